"""Small-LLM GRPO with stale rollouts: task (addition), model (Qwen3 from a config), warm start, GRPO loss,
training loop (``python -m sim.llm.train``). The sweep over it lives in ``experiments.llm``."""
