"""The experiments layer: which runs to make (profiles and studies at the quadratic, bandit and LLM scales) and the
statistics of their records. It sits between the simulators (``sim/``, which only return records) and the figures
(``paper_figs/``, which only plot what this layer returns); ``runtime/`` computes and caches the runs.
"""
