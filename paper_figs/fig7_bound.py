"""fig7_bound: the a-priori GAC-SGD bound of theory/ (v2) against the measured kept energy avg_t E⟨∇f, D∇f⟩.

Runs ``theory.convergence.check_bound`` (GAC-SGD batched over seeds on random quadratics and the non-convex
"wavy" toy, fixed and bounded-random staleness, modes none / project / cap; nothing measured enters the bound) on
``convergence.DEFAULT_SETTINGS`` and plots bound vs measured kept energy on log-log axes with the line y = x: every
point above it is a bound that holds. One panel per noise level (gradient- vs noise-dominated). The CSV has the
bound, the measured kept energy, min/avg E‖∇f‖² and the ratio bound/kept.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from paper_figs.common import apply_style, method_color, save_figure, single_thread
from sim.record import write_records
from theory import convergence

NAME = "fig7_bound"
SMOKE_SETTINGS = [
    {"kind": "quadratic", "staleness": 2, "eta_fraction": 0.5, "mode": mode, "threshold": tau, "noise_std": 1.0}
    for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3))]
# (settings, dim, steps T, seeds) per profile; quick and full run the whole grid (the theory README's table
# is the quick profile: check_bound's defaults), full averages over 4x more seeds.
PROFILES = {"smoke": (SMOKE_SETTINGS, 10, 30, 4),
            "quick": (convergence.DEFAULT_SETTINGS, 50, 300, 32),
            "full": (convergence.DEFAULT_SETTINGS, 50, 300, 128)}
MODE_STYLE = {"none": method_color("none"), "project (0.0)": method_color("gac"), "project (0.5)": "#17becf",
              "cap (0.3)": "#ff7f0e"}


def mode_name(row: dict) -> str:
    """Legend name: the mode as in ``check_bound``'s settings, with GAC's threshold τ in parentheses."""
    return row["mode"] if row["mode"] == "none" else f"{row['mode']} ({row['threshold']})"


def run_rows(profile: str) -> list[dict]:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    settings, dim, steps, seeds = PROFILES[profile]
    rows = convergence.check_bound(settings, dim=dim, steps=steps, seeds=seeds)
    out = []
    for row in rows:
        row = {"random_staleness": False, **row}
        out.append({**row, "label": mode_name(row), "dim": dim, "steps": steps, "seeds": seeds,
                    "holds_kept": bool(row["measured_kept"] <= row["bound"])})
    return out


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


def main(profile: str, out_dir: Path, device: str = "cpu") -> list[dict]:
    with single_thread():  # check_bound runs on CPU on (seeds, 50) tensors; device is not used
        rows = run_rows(profile)
    noises = sorted({r["noise_std"] for r in rows})
    apply_style()
    fig, axes = plt.subplots(1, len(noises), figsize=(3.3 * len(noises), 3.0), squeeze=False)
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
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"noise σ_n = {noise} ({regime})",
               xlabel="measured kept energy avg_t E⟨∇f, D∇f⟩", ylabel="a-priori bound (theory.convergence v2)")
        ax.legend(fontsize=5, loc="upper left")
    summary = tightness_summary(rows)
    for s in summary:
        print(f"  σ_n={s['noise_std']:<4} {s['label']:<14} n={s['settings']:>2}  bound/kept "
              f"{s['bound_over_kept_min']:.1f}–{s['bound_over_kept_max']:.1f}  violations {s['violations']}  "
              f"κ̄ ≥ {s['retention_min']:.3f}")
    write_records(rows, out_dir / f"{NAME}.csv")
    write_records(summary, out_dir / f"{NAME}_tightness.csv")
    save_figure(fig, out_dir, NAME)
    return rows
