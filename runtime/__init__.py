"""The runtime: what runs, stores and reports the research code's work, and simulates nothing.

``cache`` (results keyed by their configuration and code), ``graph`` (the one road from units to results: a task graph
on a process pool, with one progress line), ``cluster`` (Ray as the graph's other executor), ``files`` (atomic writes,
locks, published figure sets, record CSVs), ``checkpoint`` (torch checkpoints with their SHA-256, and the check that a
resume continues the same run), ``paths`` (where things go; the one reader of GAC_LAB_*), ``cli`` (one
parser style, one-line refusals) and ``fingerprint`` (which code computed a result). It imports ``gac`` and nothing
else of this package, so the simulators, the studies and the figures all build on it.
"""
