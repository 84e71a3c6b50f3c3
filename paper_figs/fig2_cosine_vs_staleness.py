"""fig2_cosine_vs_staleness: consecutive-gradient cosine vs staleness, simulation points on the theory curve.

Panel (a), stationary: noisy quadratic (``experiments.toy.QUADRATIC``, started near the optimum so the noise dominates
from step 0), mean cos(g_t, g_{t−1}) after burn-in at step sizes η·λ_max = r·a*(s), r ∈ {0.3, 0.6, 0.9}, and at
one fixed η; lines are ``theory.cosine.predicted_cosine`` (Lyapunov), dashed the boundary limit cos(π/(2s+1)).
Panel (b), transient: the same runs from x_0 = 1 (gradient dominates the noise), mean cosine over the first
``TRANSIENT_WINDOW`` steps whose gradient was taken at an updated iterate (steps s+1 … s+W). Panel (c): the
Gaussian-policy bandit (stale-data model, GRPO groups), mean cosine after warm-up. No theory curve in (b), (c).
The runs and the theory curves are computed in ``experiments.cosine_vs_staleness``; this module plots them.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from experiments.cosine_vs_staleness import (
    STALENESS,
    TRANSIENT_WINDOW,
    all_rows,
    fixed_series_curve,
    snr_bound_curves,
    theory_curves,
)
from paper_figs.common import Results, apply_style, save_figure
from runtime.cache import Unit, single_thread, unit
from runtime.files import write_records
from theory.cosine import cosine_at_boundary

NAME = "fig2_cosine_vs_staleness"
FRACTION_COLORS = {0.3: "#9ecae1", 0.6: "#4292c6", 0.9: "#08306b", "fixed": "#e6550d"}




def in_words(series: str) -> str:
    """A series name of ``experiments.cosine_vs_staleness`` ('η·λ_max = 0.3·a*(s)', 'GRPO B=4, G=16, η=0.2') with
    its symbols in mathtext."""
    series = series.replace("η·λ_max", r"$\eta\lambda_{\max}$").replace("a*(s)", "$a^*(s)$")
    return re.sub(r"\s*=\s*", " = ", series)


def _plot_points(ax, rows: list[dict], panel: str, offset_step: float = 0.0) -> None:
    keys = list(dict.fromkeys(r["color_key"] for r in rows if r["panel"] == panel))
    for k, key in enumerate(keys):
        sel = [r for r in rows if r["panel"] == panel and r["color_key"] == key]
        xs = np.array([r["staleness"] for r in sel], dtype=float) * (1.0 + offset_step * (k - (len(keys) - 1) / 2))
        ax.errorbar(xs, [r["sim_mean"] for r in sel], yerr=[r["sim_std"] for r in sel], fmt="o", ms=3, capsize=2,
                    color=FRACTION_COLORS.get(_as_key(key), "#2ca02c"),
                    label=f"simulation, {in_words(sel[0]['series'])}")


def _as_key(key: str):
    try:
        return float(key)
    except ValueError:
        return key


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The simulations of every panel, one cached unit (on one thread: (72, 100) tensors, robust to a busy core)."""
    return [unit(NAME, all_rows, profile, device, cost=2.0)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    rows = results.value(NAME)
    apply_style()
    fig, axes = plt.subplots(1, 3, figsize=(9.9, 3.0), sharey=True)
    symlog = dict(xscale="symlog", xlim=(-0.3, 20))
    boundary_s = np.arange(max(STALENESS) + 1)
    ax = axes[0]
    with single_thread():  # the Lyapunov curves: small tensors
        curves = theory_curves()
    for key, (grid, values) in curves.items():
        ax.plot(grid, values, color=FRACTION_COLORS[key], lw=1.0, alpha=0.8)
    ax.plot(boundary_s, cosine_at_boundary(boundary_s), "k--", lw=0.9, label=r"$\cos(\pi/(2s+1))$, limit at $a^*(s)$")
    for key, (grid, values) in snr_bound_curves().items():
        ax.plot(grid, values, color=FRACTION_COLORS[key], lw=0.7, ls=":",
                label=r"SNR/(1+SNR), bound for $s \geq 1$" if key == "fixed" else None)
    ax.plot(boundary_s, fixed_series_curve(boundary_s),
            color=FRACTION_COLORS["fixed"], lw=0.9, ls="-.", label=r"series $a/2 + (s-1)a^2/2$ (fixed $\eta$)")
    _plot_points(ax, rows, "stationary", offset_step=0.04)
    ax.set(title="(a) stationary, noisy quadratic\n(lines: Lyapunov prediction at integer $s$)", xlabel="staleness $s$",
           ylabel=r"mean $\cos(g_t, g_{t-1})$", ylim=(-1.05, 1.05), **symlog)
    ax.legend(fontsize=5.5, loc="lower right")
    ax = axes[1]
    _plot_points(ax, rows, "transient", offset_step=0.04)
    ax.set(title=f"(b) transient, noisy quadratic from $x_0 = 1$\n(steps $s+1$ … $s+{TRANSIENT_WINDOW}$)",
           xlabel="staleness $s$", **symlog)
    ax = axes[2]
    _plot_points(ax, rows, "bandit_gaussian")
    ax.set(title="(c) Gaussian-policy bandit, stale data\n(after warm-up)", xlabel="staleness $s$", **symlog)
    ax.legend(fontsize=6, loc="lower right")
    for ax in axes:
        ax.axhline(0.0, color="#999999", lw=0.6)
        ax.set_xticks(list(STALENESS), [str(s) for s in STALENESS])
    for r in rows:
        pred = "" if np.isnan(r["predicted"]) else f"predicted {r['predicted']:+.3f}  "
        print(f"  {r['panel']:<16} {r['series']:<24} s={r['staleness']:>2}  {pred}sim {r['sim_mean']:+.3f} "
              f"± {r['sim_std']:.3f}  diverged {r['diverged']}/{r['seeds']}")
    return [write_records(rows, out_dir / f"{NAME}.csv"), *save_figure(fig, out_dir, NAME)]
