"""Small-LLM GRPO with stale rollouts, read top to bottom: the task (task.py), the Qwen3 model (model.py), its warm
start (warmstart.py), the configuration, GRPO losses and one training loop on ``gac.wrap(torch.optim.AdamW)``
(train.py) and the command line (``python -m sim.llm``). Checkpoints: ``runtime.checkpoint``; sweeps: experiments/."""
