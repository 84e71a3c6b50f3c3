"""fig2_cosine_vs_staleness: consecutive-gradient cosine vs staleness, simulation points on the theory curve.

Panel (a), stationary: noisy quadratic (``toy.QUADRATIC``, started near the optimum so the noise dominates
from step 0), mean cos(g_t, g_{t−1}) after burn-in at step sizes η·λ_max = r·a*(s), r ∈ {0.3, 0.6, 0.9}, and at
one fixed η; lines are ``theory.cosine.predicted_cosine`` (Lyapunov), dashed the boundary limit cos(π/(2s+1)).
Panel (b), transient: the same runs from x_0 = 1 (gradient dominates the noise), mean cosine over the first
``TRANSIENT_WINDOW`` steps whose gradient was taken at an updated iterate (steps s+1 … s+W). Panel (c): the
Gaussian-policy bandit (stale-data model, GRPO groups), mean cosine after warm-up. No theory curve in (b), (c).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from experiments import toy
from paper_figs.common import apply_style, save_figure, single_thread
from sim.bandit import run_bandit
from sim.grid import setting
from sim.quadratic import run_quadratic
from sim.record import write_records
from theory.cosine import cosine_at_boundary, predicted_cosine, series_cosine, snr_bound
from theory.stability import stability_boundary_closed_form as a_star

NAME = "fig2_cosine_vs_staleness"
STALENESS = toy.STALENESS
BOUNDARY_FRACTIONS = (0.3, 0.6, 0.9)
"""r in η·λ_max = r·a*(s): the step size as a fraction of the stability boundary at each s."""
FIXED_ETA_LAMBDA = 0.05
"""One fixed η·λ_max for all s (below a*(16) ≈ 0.095, so every s is stable)."""
TRANSIENT_WINDOW = 50
STATIONARY = dataclasses.replace(toy.QUADRATIC, init_scale=0.01)
"""x_0 = 0.01·1: Σλ²x_0² ≈ 1e-3 against a noise energy dσ² = 1, so the runs start noise-dominated."""
FRACTION_COLORS = {0.3: "#9ecae1", 0.6: "#4292c6", 0.9: "#08306b", "fixed": "#e6550d"}


def _series() -> list[tuple[str, object, list]]:
    """(series name, color key, settings over STALENESS) for every step-size rule."""
    lam = toy.QUADRATIC.curvature_max
    out = [(f"η·λ_max = {r}·a*(s)", r, [setting("none", s, r * float(a_star(s)) / lam) for s in STALENESS])
           for r in BOUNDARY_FRACTIONS]
    out.append((f"η·λ_max = {FIXED_ETA_LAMBDA}", "fixed",
                [setting("none", s, FIXED_ETA_LAMBDA / lam) for s in STALENESS]))
    return out


def _burn_in(profile: str) -> tuple[int, int]:
    steps = toy.profile_of(profile).quad_steps
    return steps, max(1, (3 * steps) // 10)


def _stats(values: np.ndarray) -> dict:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"sim_mean": float("nan"), "sim_std": float("nan"), "sim_min": float("nan"), "sim_max": float("nan")}
    return {"sim_mean": float(finite.mean()), "sim_std": float(finite.std()), "sim_min": float(finite.min()),
            "sim_max": float(finite.max())}


def quadratic_rows(profile: str, device: str = "cpu") -> list[dict]:
    """Stationary (after burn-in) and transient cosines on the noisy quadratic, one row per (panel, series, s)."""
    p = toy.profile_of(profile)
    series = _series()
    settings = [s for _, _, group in series for s in group]
    steps, warmup = _burn_in(profile)
    stationary = run_quadratic(STATIONARY, settings, steps, p.seeds, seed=0, warmup=warmup, record_every=steps,
                               progress=True, device=device)
    transient_steps = max(STALENESS) + TRANSIENT_WINDOW + 1
    transient = run_quadratic(toy.QUADRATIC, settings, transient_steps, p.seeds, seed=0, warmup=0,
                              record_every=1, progress=True, device=device)
    curvatures = toy.QUADRATIC.curvatures().numpy()
    cos_trace = transient.traces["cos_prev"].numpy()  # (steps, rows)
    rows = []
    index = 0
    for name, key, group in series:
        for st in group:
            runs = stationary.rows_of(index)
            predicted = predicted_cosine(st.lr, curvatures, st.staleness)
            base = {"series": name, "eta_lambda_max": st.lr * toy.QUADRATIC.curvature_max,
                    "fraction_of_boundary": st.lr * toy.QUADRATIC.curvature_max / float(a_star(st.staleness)),
                    "staleness": st.staleness, "boundary_limit": float(cosine_at_boundary(st.staleness)),
                    "seeds": p.seeds, "color_key": str(key)}
            rows.append({"panel": "stationary", **base, "predicted": predicted,
                         "window": f"steps {warmup}..{steps - 1}",
                         **_stats(stationary.summary["mean_cos_prev"][runs].numpy()),
                         "diverged": int(stationary.summary["diverged"][runs].sum())})
            start = st.staleness + 1
            window = cos_trace[start: start + TRANSIENT_WINDOW, transient.rows_of(index)]
            rows.append({"panel": "transient", **base, "predicted": float("nan"),
                         "window": f"steps {start}..{start + TRANSIENT_WINDOW - 1}",
                         **_stats(np.nanmean(window, axis=0)),
                         "diverged": int(transient.summary["diverged"][transient.rows_of(index)].sum())})
            index += 1
    return rows


def bandit_rows(profile: str) -> list[dict]:
    """Mean cosine after warm-up of the Gaussian-policy bandit (toy settings), one row per s."""
    p = toy.profile_of(profile)
    settings = [setting("none", s, toy.GAUSSIAN_LR) for s in STALENESS]
    result = run_bandit(toy.GAUSSIAN, settings, p.bandit_steps, p.seeds, seed=0, groups=toy.BANDIT_GROUPS,
                        group_size=toy.BANDIT_GROUP_SIZE, record_every=p.bandit_steps, progress=True)
    warmup = p.bandit_steps // 5
    rows = []
    for i, st in enumerate(settings):
        runs = result.rows_of(i)
        rows.append({"panel": "bandit_gaussian",
                     "series": f"GRPO B={toy.BANDIT_GROUPS}, G={toy.BANDIT_GROUP_SIZE}, η={toy.GAUSSIAN_LR}",
                     "eta_lambda_max": float("nan"), "fraction_of_boundary": float("nan"), "staleness": st.staleness,
                     "boundary_limit": float(cosine_at_boundary(st.staleness)), "seeds": p.seeds,
                     "color_key": "bandit", "predicted": float("nan"),
                     "window": f"steps {warmup}..{p.bandit_steps - 1}",
                     **_stats(result.summary["mean_cos_prev"][runs].numpy()),
                     "diverged": int(result.summary["diverged"][runs].sum())})
    return rows


def theory_curves() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """predicted_cosine at every integer s in 0..max(STALENESS), per series (the lines of panel a)."""
    curvatures = toy.QUADRATIC.curvatures().numpy()
    lam = toy.QUADRATIC.curvature_max
    grid = np.arange(max(STALENESS) + 1)
    curves = {}
    for r in BOUNDARY_FRACTIONS:
        curves[r] = (grid, np.array([predicted_cosine(r * float(a_star(int(s))) / lam, curvatures, int(s))
                                     for s in grid]))
    curves["fixed"] = (grid, predicted_cosine(FIXED_ETA_LAMBDA / lam, curvatures, grid))
    return curves


def snr_bound_curves() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """SNR/(1+SNR) at every integer s per series: the upper bound on panel a's lines for s ≥ 1 (theory.cosine.snr)."""
    curvatures = toy.QUADRATIC.curvatures().numpy()
    lam = toy.QUADRATIC.curvature_max
    grid = np.arange(1, max(STALENESS) + 1)  # at s = 0 the law is an equality for −cos, not a bound
    curves = {r: (grid, np.array([snr_bound(r * toy.stability_boundary(int(s)) / lam, curvatures, int(s))
                                  for s in grid])) for r in BOUNDARY_FRACTIONS}
    curves["fixed"] = (grid, snr_bound(FIXED_ETA_LAMBDA / lam, curvatures, grid))
    return curves


def _plot_points(ax, rows: list[dict], panel: str, offset_step: float = 0.0) -> None:
    keys = list(dict.fromkeys(r["color_key"] for r in rows if r["panel"] == panel))
    for k, key in enumerate(keys):
        sel = [r for r in rows if r["panel"] == panel and r["color_key"] == key]
        xs = np.array([r["staleness"] for r in sel], dtype=float) * (1.0 + offset_step * (k - (len(keys) - 1) / 2))
        ax.errorbar(xs, [r["sim_mean"] for r in sel], yerr=[r["sim_std"] for r in sel], fmt="o", ms=3, capsize=2,
                    color=FRACTION_COLORS.get(_as_key(key), "#2ca02c"), label=f"sim, {sel[0]['series']}")


def _as_key(key: str):
    try:
        return float(key)
    except ValueError:
        return key


def main(profile: str, out_dir: Path, device: str = "cpu") -> list[dict]:
    with single_thread():  # (72, 100) CPU tensors: one thread is as fast, and robust to a busy core
        rows = quadratic_rows(profile, device) + bandit_rows(profile)
    apply_style()
    fig, axes = plt.subplots(1, 3, figsize=(9.9, 3.0), sharey=True)
    symlog = dict(xscale="symlog", xlim=(-0.3, 20))
    boundary_s = np.arange(max(STALENESS) + 1)
    ax = axes[0]
    for key, (grid, values) in theory_curves().items():
        ax.plot(grid, values, color=FRACTION_COLORS[key], lw=1.0, alpha=0.8)
    ax.plot(boundary_s, cosine_at_boundary(boundary_s), "k--", lw=0.9, label="cos(π/(2s+1)), limit at a*(s)")
    for key, (grid, values) in snr_bound_curves().items():
        ax.plot(grid, values, color=FRACTION_COLORS[key], lw=0.7, ls=":",
                label="SNR/(1+SNR), bound for s ≥ 1" if key == "fixed" else None)
    ax.plot(boundary_s, series_cosine(FIXED_ETA_LAMBDA / toy.QUADRATIC.curvature_max,
                                      toy.QUADRATIC.curvatures().numpy(), boundary_s),
            color=FRACTION_COLORS["fixed"], lw=0.9, ls="-.", label="series a/2 + (s−1)a²/2 (fixed η)")
    _plot_points(ax, rows, "stationary", offset_step=0.04)
    ax.set(title="(a) stationary, noisy quadratic\n(lines: predicted_cosine at integer s)", xlabel="staleness s",
           ylabel="mean cos(g_t, g_{t-1})", ylim=(-1.05, 1.05), **symlog)
    ax.legend(fontsize=5.5, loc="lower right")
    ax = axes[1]
    _plot_points(ax, rows, "transient", offset_step=0.04)
    ax.set(title=f"(b) transient, noisy quadratic from x_0 = 1\n(steps s+1 … s+{TRANSIENT_WINDOW})",
           xlabel="staleness s", **symlog)
    ax = axes[2]
    _plot_points(ax, rows, "bandit_gaussian")
    ax.set(title="(c) Gaussian-policy bandit, stale data\n(after warm-up)", xlabel="staleness s", **symlog)
    ax.legend(fontsize=6, loc="lower right")
    for ax in axes:
        ax.axhline(0.0, color="#999999", lw=0.6)
        ax.set_xticks(list(STALENESS), [str(s) for s in STALENESS])
    for r in rows:
        pred = "" if np.isnan(r["predicted"]) else f"predicted {r['predicted']:+.3f}  "
        print(f"  {r['panel']:<16} {r['series']:<24} s={r['staleness']:>2}  {pred}sim {r['sim_mean']:+.3f} "
              f"± {r['sim_std']:.3f}  diverged {r['diverged']}/{r['seeds']}")
    write_records(rows, out_dir / f"{NAME}.csv")
    save_figure(fig, out_dir, NAME)
    return rows
