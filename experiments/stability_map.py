"""fig4's runs: the empirical divergence map over (η·λ_max, s) on the noisy quadratic, naive async vs GAC.

Each cell is a delayed-SGD run marked diverged when its loss exceeds 1e6 × the initial loss; every row carries
the theory boundary a*(s) = 2 sin(π/(2(2s+1))) and whether the cell lies beyond it.
"""

from __future__ import annotations

import torch

from experiments import toy
from experiments.profiles import lookup
from sim.grid import setting
from sim.quadratic import run_quadratic
from sim.stabilizers import NAIVE, SYNC
from theory.stability import stability_boundary_closed_form

STALENESS = (0, 1, 2, 3, 4, 6, 8, 12, 16)


def step_sizes(profile: str) -> list[float]:
    count = lookup("stability_map", profile).step_sizes
    return torch.logspace(-1.7, 0.4, count, dtype=torch.float64).tolist()  # η·λ_max from 0.02 to 2.5


def run_map(profile: str, device: str = "cpu") -> list[dict]:
    """One summary row per (method, s, η, seed), with eta_lambda_max, boundary and theory_unstable."""
    p = lookup("stability_map", profile)
    steps, seeds = p.steps, p.seeds
    etas = step_sizes(profile)
    lam = toy.QUADRATIC.curvature_max
    settings = [setting(method, s, eta / lam) for method in (NAIVE, "gac") for s in STALENESS for eta in etas]
    result = run_quadratic(toy.QUADRATIC, settings, steps, seeds, record_every=steps, progress=True, device=device)
    rows = []
    for row in result.summary_rows():
        row["eta_lambda_max"] = row["lr"] * lam
        row["boundary"] = float(stability_boundary_closed_form(row["staleness"]))
        row["theory_unstable"] = row["eta_lambda_max"] > row["boundary"]
        rows.append(row)
    return rows


def agreement(rows: list[dict]) -> dict:
    """For naive async: how often the empirical outcome matches the theory boundary (per run)."""
    naive = runs_of(rows, NAIVE)
    unstable = [r for r in naive if r["theory_unstable"]]
    stable = [r for r in naive if not r["theory_unstable"]]
    return {"theory_unstable_runs": len(unstable), "diverged_of_those": sum(r["diverged"] for r in unstable),
            "theory_stable_runs": len(stable), "diverged_of_stable": sum(r["diverged"] for r in stable),
            "gac_runs_beyond_boundary": sum(1 for r in rows if r["method"] == "gac" and r["theory_unstable"]),
            "gac_diverged_beyond_boundary": sum(r["diverged"] for r in rows
                                                if r["method"] == "gac" and r["theory_unstable"])}


def runs_of(rows: list[dict], method: str) -> list[dict]:
    """The rows of ``method`` at every staleness (naive's rows at s = 0 are named sync)."""
    names = (NAIVE, SYNC) if method == NAIVE else (method,)
    return [r for r in rows if r["method"] in names]


def diverged_fraction(rows: list[dict], method: str, etas: list[float]) -> torch.Tensor:
    """(len(STALENESS), len(etas)) share of ``method``'s seeds that diverged in each cell."""
    seeds = len({r["seed"] for r in rows})
    grid = torch.zeros(len(STALENESS), len(etas))
    for r in runs_of(rows, method):
        grid[STALENESS.index(r["staleness"]), etas.index(r["eta_lambda_max"])] += float(r["diverged"]) / seeds
    return grid
