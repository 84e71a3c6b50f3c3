"""Small-LLM GRPO with stale rollouts: task (addition), model (Qwen3 from a config), warm start, GRPO loss,
training loop (``python -m sim.llm.train``) and the cached sweep behind the LLM figures (``experiments``)."""
