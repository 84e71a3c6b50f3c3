"""fig7_bound: the a-priori GAC-SGD bound of theory/ (v2) against the measured kept energy avg_t E⟨∇f, D∇f⟩.

Runs ``theory.convergence.check_bound`` through experiments/bound.py (GAC-SGD batched over seeds on random
quadratics and the non-convex "wavy" toy, fixed and bounded-random staleness, modes none / project / cap; nothing
measured enters the bound) on ``convergence.DEFAULT_SETTINGS`` and plots bound vs measured kept energy on log-log
axes with the line y = x: every point above it is a bound that holds. One panel per noise level (gradient- vs
noise-dominated). The CSV has the bound, the measured kept energy, min/avg E‖∇f‖² and the ratio bound/kept.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from experiments import bound
from paper_figs.common import Results, apply_style, method_color, panel_letters, save_figure
from runtime.cache import Unit, unit
from runtime.files import write_records

NAME = "fig7_bound"
MODE_STYLE = {"naive": method_color("naive"), "project (0.0)": method_color("gac"), "project (0.5)": "#17becf",
              "cap (0.3)": "#ff7f0e"}


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """``experiments.bound.run_rows``, one cached unit (check_bound runs on the CPU whatever ``device``)."""
    return [unit(NAME, bound.run_rows, profile, cost=16.0)]


def tightness_summary(rows: list[dict]) -> list[dict]:
    """Ranges of bound/kept (the v2 bound is on the kept energy) per (noise_std, mode label)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["noise_std"], r["label"]), []).append(r)
    summary = []
    for (noise, label), sel in sorted(groups.items()):
        ratio = np.array([r["bound_over_kept"] for r in sel])
        summary.append({"noise_std": noise, "label": label, "settings": len(sel),
                        "bound_over_kept_min": float(ratio.min()), "bound_over_kept_max": float(ratio.max()),
                        "violations": sum(not r["holds_kept"] for r in sel),
                        "retention_min": min(r["retention"] for r in sel)})
    return summary


def plot(results: Results, out_dir: Path) -> list[Path]:
    rows = results.value(NAME)
    noises = sorted({r["noise_std"] for r in rows})
    apply_style()
    fig, axes = plt.subplots(1, len(noises), figsize=(3.3 * len(noises), 3.3), squeeze=False, layout="constrained")
    for ax, noise in zip(axes[0], noises, strict=True):
        sel = [r for r in rows if r["noise_std"] == noise and np.isfinite(r["bound"])]
        values = [r[k] for r in sel for k in ("bound", "measured_kept")]
        lo, hi = min(values) / 2, max(values) * 2
        ax.plot([lo, hi], [lo, hi], color="#999999", lw=0.8, label="y = x")
        for label in dict.fromkeys(r["label"] for r in sel):
            pts = [r for r in sel if r["label"] == label]
            color = MODE_STYLE.get(label, "#7f7f7f")
            ax.scatter([r["measured_kept"] for r in pts], [r["bound"] for r in pts], s=12, color=color, label=label)
        regime = "gradient-dominated" if noise < 1.0 else "noise-dominated"
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               title=f"noise $\\sigma_n$ = {noise} ({regime})",
               xlabel=r"measured kept energy $\frac{1}{T}\sum_t E\langle\nabla f, D\nabla f\rangle$",
               ylabel="a-priori bound on the kept energy")

    panel_letters(axes[0])
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names), fontsize=6)  # below, not on the points
    summary = tightness_summary(rows)
    for s in summary:
        print(f"  σ_n={s['noise_std']:<4} {s['label']:<14} n={s['settings']:>2}  bound/kept "
              f"{s['bound_over_kept_min']:.1f}–{s['bound_over_kept_max']:.1f}  violations {s['violations']}  "
              f"κ̄ ≥ {s['retention_min']:.3f}")
    return [write_records(rows, out_dir / f"{NAME}.csv"), write_records(summary, out_dir / f"{NAME}_tightness.csv"),
            *save_figure(fig, out_dir, NAME)]
