"""The experiments layer: what to run (profiles and sweeps at the quadratic, bandit and LLM scales), the run
cache, the process pool and the aggregation of records. It sits between the simulators (``sim/``, which only
return records) and the figures (``paper_figs/``, which only plot what this layer returns).
"""
