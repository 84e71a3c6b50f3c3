"""Small-LLM GRPO with stale rollouts: task (addition), model (Qwen3 from a config), warm start, GRPO loss,
the run's state (state.py), training loop (train.py) over the batched step (batched.py) with its controls
(controls.py: GAC through ``gac.placement``), probes (probes.py), checkpoints (checkpoint.py), and command line
(``python -m sim.llm``). The modules form layers without a circle (an import-linter contract in pyproject.toml).
The sweep over it lives in ``experiments.llm``."""
