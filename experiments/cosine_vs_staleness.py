"""fig2's runs: the consecutive-gradient cosine against staleness, measured on the toys next to the theory curve.

Stationary (after burn-in) and transient cosines on the noisy quadratic at step sizes tied to the stability
boundary, the Gaussian bandit's cosine after warm-up, and ``theory.cosine.predicted_cosine`` at every integer s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments import toy
from experiments.aggregate import seed_std
from experiments.profiles import lookup
from sim.bandit import run_bandit
from sim.grid import setting
from sim.quadratic import run_quadratic
from theory.cosine import cosine_at_boundary, predicted_cosine, series_cosine, snr_bound
from theory.stability import stability_boundary_closed_form as a_star

STALENESS = toy.STALENESS
BOUNDARY_FRACTIONS = (0.3, 0.6, 0.9)
"""r in η·λ_max = r·a*(s): the step size as a fraction of the stability boundary at each s."""
FIXED_ETA_LAMBDA = 0.05
"""One fixed η·λ_max for all s (below a*(16) ≈ 0.095, so every s is stable)."""
TRANSIENT_WINDOW = 50
STATIONARY = dataclasses.replace(toy.QUADRATIC, init_scale=0.01)
"""x_0 = 0.01·1: Σλ²x_0² ≈ 1e-3 against a noise energy dσ² = 1, so the runs start noise-dominated."""


def series() -> list[tuple[str, object, list]]:
    """(series name, color key, settings over STALENESS) for every step-size rule."""
    lam = toy.QUADRATIC.curvature_max
    out = [(f"η·λ_max = {r}·a*(s)", r, [setting("naive", s, r * float(a_star(s)) / lam) for s in STALENESS])
           for r in BOUNDARY_FRACTIONS]
    out.append((f"η·λ_max = {FIXED_ETA_LAMBDA}", "fixed",
                [setting("naive", s, FIXED_ETA_LAMBDA / lam) for s in STALENESS]))
    return out


def _burn_in(profile: str) -> tuple[int, int]:
    steps = lookup("toy", profile).quad_steps
    return steps, max(1, (3 * steps) // 10)


def _stats(values: np.ndarray) -> dict:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"sim_mean": float("nan"), "sim_std": float("nan"), "sim_min": float("nan"), "sim_max": float("nan")}
    return {"sim_mean": float(finite.mean()), "sim_std": seed_std(finite), "sim_min": float(finite.min()),
            "sim_max": float(finite.max())}


def quadratic_rows(profile: str, device: str = "cpu") -> list[dict]:
    """Stationary (after burn-in) and transient cosines on the noisy quadratic, one row per (panel, series, s)."""
    p = lookup("toy", profile)
    all_series = series()
    settings = [s for _, _, group in all_series for s in group]
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
    for name, key, group in all_series:
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
    p = lookup("toy", profile)
    settings = [setting("naive", s, toy.GAUSSIAN_LR) for s in STALENESS]
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


def all_rows(profile: str, device: str = "cpu") -> list[dict]:
    """Every row of fig2: the quadratic panels, then the bandit panel."""
    return quadratic_rows(profile, device) + bandit_rows(profile)


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
    curves = {r: (grid, np.array([snr_bound(r * float(a_star(int(s))) / lam, curvatures, int(s))
                                  for s in grid])) for r in BOUNDARY_FRACTIONS}
    curves["fixed"] = (grid, snr_bound(FIXED_ETA_LAMBDA / lam, curvatures, grid))
    return curves


def fixed_series_curve(staleness: np.ndarray) -> np.ndarray:
    """``theory.cosine.series_cosine`` (a/2 + (s−1)a²/2 per direction) at the fixed step size, at each s."""
    return series_cosine(FIXED_ETA_LAMBDA / toy.QUADRATIC.curvature_max, toy.QUADRATIC.curvatures().numpy(),
                         staleness)
