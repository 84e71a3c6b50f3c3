"""figs1's runs: how staleness hurts the three bandits as a function of signal-to-noise (groups B × group size G).

Per bandit and (B, G): naive async over STALENESS and, at s ∈ {8, 16}, the stabilizers FIXES; one summary row
per (bandit, B, G, setting) with the median final reward gap and the mean consecutive cosine.
"""

from __future__ import annotations

from experiments import toy
from experiments.profiles import lookup
from sim.bandit import run_bandit
from sim.grid import setting

STALENESS = (0, 2, 4, 8, 16)
FIXES = ("gac", "lr_scale", "tis", "m2po")
PROBLEMS = (("bandit_gaussian", toy.GAUSSIAN, toy.GAUSSIAN_LR), ("bandit_karmed", toy.KARMED, toy.SOFTMAX_LR),
            ("bandit_contextual", toy.CONTEXTUAL, toy.SOFTMAX_LR))


def snr_settings(lr: float) -> list:
    """Naive async at every s of STALENESS, then every FIXES method at s = 8 and 16."""
    return [setting("naive", s, lr) for s in STALENESS] + [setting(m, s, lr) for s in (8, 16) for m in FIXES]


def run_table(profile: str) -> list[dict]:
    """One row per (bandit, B, G, setting) at each (B, G) level of the ``bandit_snr`` profile."""
    p = lookup("bandit_snr", profile)
    steps, seeds = p.steps, p.seeds
    table = []
    for sim, problem, lr in PROBLEMS:
        settings = snr_settings(lr)
        for groups, group_size in p.levels:
            result = run_bandit(problem, settings, steps, seeds, groups=groups, group_size=group_size,
                                record_every=steps, progress=True)
            optimum = result.meta["optimal_reward"]
            for i, s in enumerate(settings):
                rows = result.rows_of(i)
                gaps = (optimum - result.summary["final_objective"][rows]).sort().values
                table.append({"sim": sim, "groups": groups, "group_size": group_size, "label": s.name,
                              "staleness": s.staleness, "median_gap": float(gaps[len(gaps) // 2]),
                              "initial_gap": optimum - result.meta["initial_reward"],
                              "mean_cos_prev": float(result.summary["mean_cos_prev"][rows].mean()),
                              "diverged": int(result.summary["diverged"][rows].sum()), "seeds": seeds})
    return table

