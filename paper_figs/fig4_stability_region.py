"""fig4_stability_region: empirical divergence map over (η·λ_max, s) on the noisy quadratic, naive vs GAC.

Each cell is a delayed-SGD run (stale-gradient model) marked diverged when its loss exceeds 1e6 × the
initial loss. Overlaid: the theory boundary a*(s) = 2 sin(π/(2(2s+1))) (from theory/ when importable,
else the closed form), beyond which x_{t+1} = x_t − a x_{t−s} is unstable for the top eigen-direction.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import torch

from experiments import toy
from experiments.cache import cached_runs
from paper_figs.common import apply_style, save_figure
from sim.grid import setting
from sim.quadratic import run_quadratic
from sim.record import write_records
from theory.gac_stability import top_mode_limit
from theory.stability import stability_boundary_closed_form

NAME = "fig4_stability_region"
STALENESS = (0, 1, 2, 3, 4, 6, 8, 12, 16)


def step_sizes(profile: str) -> list[float]:
    count = {"smoke": 4, "quick": 16}.get(profile, 40)
    return torch.logspace(-1.7, 0.4, count, dtype=torch.float64).tolist()  # η·λ_max from 0.02 to 2.5


def run_map(profile: str, device: str = "cpu") -> list[dict]:
    steps = {"smoke": 30, "quick": 600}.get(profile, 2000)
    seeds = {"smoke": 1, "quick": 2}.get(profile, 8)
    etas = step_sizes(profile)
    lam = toy.QUADRATIC.curvature_max
    settings = [setting(method, s, eta / lam) for method in ("none", "gac") for s in STALENESS for eta in etas]
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
    naive = [r for r in rows if r["method"] == "none"]
    unstable = [r for r in naive if r["theory_unstable"]]
    stable = [r for r in naive if not r["theory_unstable"]]
    return {"theory_unstable_runs": len(unstable), "diverged_of_those": sum(r["diverged"] for r in unstable),
            "theory_stable_runs": len(stable), "diverged_of_stable": sum(r["diverged"] for r in stable),
            "gac_runs_beyond_boundary": sum(1 for r in rows if r["method"] == "gac" and r["theory_unstable"]),
            "gac_diverged_beyond_boundary": sum(r["diverged"] for r in rows
                                                if r["method"] == "gac" and r["theory_unstable"])}


def main(profile: str, out_dir: Path, device: str = "cpu") -> dict:
    rows = cached_runs(NAME, profile, device, lambda: run_map(profile, device))
    etas = sorted({r["eta_lambda_max"] for r in rows})
    apply_style()
    fig, axes = plt.subplots(1, 2, figsize=(6.6, 2.8), sharey=True)
    for ax, method, title in zip(axes, ("none", "gac"), ("naive async (none)", "async + GAC (default)"),
                                 strict=True):
        grid = torch.zeros(len(STALENESS), len(etas))
        for r in rows:
            if r["method"] == method:
                i, j = STALENESS.index(r["staleness"]), etas.index(r["eta_lambda_max"])
                grid[i, j] += float(r["diverged"]) / r_seeds(rows)
        ax.pcolormesh(etas, range(len(STALENESS)), grid.numpy(), cmap="Reds", vmin=0, vmax=1, shading="nearest")
        boundary = [float(stability_boundary_closed_form(s)) for s in STALENESS]
        ax.plot(boundary, range(len(STALENESS)), "k--", lw=1.2, label="theory a*(s)")
        if method == "gac":  # mean-field GAC (theory.gac_stability): largest stable η·λ_max, 1/cos(π/(2s+3))
            predicted = [top_mode_limit(s)["a_max"] for s in STALENESS]
            ax.plot(predicted, range(len(STALENESS)), "b:", lw=1.2, label="mean-field GAC limit")
            ax.legend(loc="lower left")
        ax.set(xscale="log", title=title, xlabel="η·λ_max")
        ax.set_yticks(range(len(STALENESS)), [str(s) for s in STALENESS])
    axes[0].set_ylabel("staleness s")
    axes[0].legend(loc="lower left")
    stats = agreement(rows)
    print("  " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    write_records(rows, out_dir / f"{NAME}.csv")
    save_figure(fig, out_dir, NAME)
    return stats


def r_seeds(rows: list[dict]) -> int:
    return len({r["seed"] for r in rows})
