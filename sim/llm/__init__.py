"""Small-LLM GRPO with stale rollouts: task (addition), model (Qwen3 from a config), warm start, GRPO loss,
training loop (train.py), its probes (probes.py), checkpoints (checkpoint.py) and command line
(``python -m sim.llm``). The sweep over it lives in ``experiments.llm``."""
