"""theory: closed-form and numeric predictions beside every simulated curve (see theory/README.md).

stability (delayed-update stability, fig4), cosine (stationary consecutive-gradient cosine and its SNR law,
fig2), gac_stability (GAC's mean-field stability region, fig4), convergence (a-priori GAC-SGD bound under bounded
staleness, fig7), momentum (staleness as implicit momentum).
Each result is a function with its statement in the docstring and a ``check_*`` run by tests/theory.
"""
