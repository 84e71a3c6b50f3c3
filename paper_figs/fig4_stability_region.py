"""fig4_stability_region: empirical divergence map over (η·λ_max, s) on the noisy quadratic, naive vs GAC.

Each cell is a delayed-SGD run (stale-gradient model) marked diverged when its loss exceeds 1e6 × the
initial loss; its colour is the share of seeds that diverged (colour bar). Overlaid: the theory boundary
a*(s) = 2 sin(π/(2(2s+1))) (``theory.stability``), beyond which x_{t+1} = x_t − a x_{t−s} is unstable for the top
eigen-direction.
The runs are defined in ``experiments.stability_map``; this module plots them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from experiments.stability_map import STALENESS, agreement, diverged_fraction, run_map
from paper_figs.common import Results, apply_style, panel_letters, save_figure
from runtime.cache import Unit, unit
from runtime.files import write_records
from theory.gac_stability import top_mode_limit
from theory.stability import stability_boundary_closed_form

NAME = "fig4_stability_region"


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The divergence map, one cached unit."""
    return [unit(NAME, run_map, profile, device, cost=4.0)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    rows = results.value(NAME)
    etas = sorted({r["eta_lambda_max"] for r in rows})
    apply_style()
    fig, axes = plt.subplots(1, 2, figsize=(6.6, 2.8), sharey=True, layout="constrained")
    for ax, method, title in zip(axes, ("naive", "gac"), ("naive async", "async + GAC (default)"),
                                 strict=True):
        grid = diverged_fraction(rows, method, etas)
        mesh = ax.pcolormesh(etas, range(len(STALENESS)), grid.numpy(), cmap="Reds", vmin=0, vmax=1,
                             shading="nearest")
        boundary = [float(stability_boundary_closed_form(s)) for s in STALENESS]
        ax.plot(boundary, range(len(STALENESS)), "k--", lw=1.2, label=r"theory $a^*(s)$")
        if method == "gac":  # mean-field GAC (theory.gac_stability): largest stable η·λ_max, 1/cos(π/(2s+3))
            predicted = [top_mode_limit(s)["a_max"] for s in STALENESS]
            ax.plot(predicted, range(len(STALENESS)), "b:", lw=1.2, label="mean-field GAC limit")
        ax.set(xscale="log", title=title, xlabel=r"$\eta\lambda_{\max}$")
        ax.set_yticks(range(len(STALENESS)), [str(s) for s in STALENESS])
    fig.colorbar(mesh, ax=list(axes), label="share of seeds diverged\n(palest: none, darkest: all)")
    axes[0].set_ylabel("staleness $s$")
    panel_letters(axes)
    handles, names = axes[1].get_legend_handles_labels()  # the right panel has both lines
    fig.legend(handles, names, loc="outside lower center", ncols=2)  # below the maps, not over a cell
    stats = agreement(rows)
    print("  " + ", ".join(f"{k} {v}" for k, v in stats.items()))
    return [write_records(rows, out_dir / f"{NAME}.csv"), *save_figure(fig, out_dir, NAME)]

