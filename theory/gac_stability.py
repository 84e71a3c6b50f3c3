"""GAC's stability region: delayed gradient descent with GAC's mean-field filter g_t − ρ g_{t−1}.

Per eigen-direction x_{t+1} = x_t − a(x_{t−s} − ρ x_{t−s−1}) (a = ηλ, ρ the removed coefficient of GAC
project, τ = 0, in high dimension). Semi-closed boundary, the slow-mode lemma (a step cut a → a(1−ρ)), the
self-consistent ρ* from a Lyapunov solve that includes the filter, and its check against ``gac.control`` runs.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.optimize
import sympy as sp
import torch

import gac
from theory.stability import _last_stable, stability_boundary_closed_form


def _check_arguments(staleness: int, rho: float) -> None:
    if int(staleness) != staleness or staleness < 0:
        raise ValueError(f"staleness must be an integer >= 0, got {staleness}")
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"rho must be in [0, 1), got {rho}")


def gac_phase(omega, staleness: int, rho: float):
    """F(ω) = ω(s + 3/2) − π/2 − arg(e^{iω} − ρ): a root on z = e^{iω} needs F(ω) ≡ 0 (mod 2π).

    From z^{s+1}(z − 1) + a(z − ρ) = 0: a = −z^{s+1}(z − 1)/(z − ρ), and −z^{s+1}(z − 1) = 2 sin(ω/2)
    e^{i(ω(s+3/2) − π/2)}, so a is real and positive iff the phase F vanishes.
    """
    omega = np.asarray(omega)
    return omega * (staleness + 1.5) - np.pi / 2 - np.arctan2(np.sin(omega), np.cos(omega) - rho)


def gac_stability_boundary(staleness: int, rho: float) -> float:
    """a*_GAC(s, ρ) = 2 sin(ω/2) / |e^{iω} − ρ|, ω the smallest root in (0, π] of the phase condition F(ω) = 0.

    Statement: every root of z^{s+2} − z^{s+1} + a z − aρ lies in |z| < 1 iff 0 < a < a*_GAC(s, ρ).
    Why the smallest root: arg(e^{iω} − ρ) is increasing and concave in ω for 0 ≤ ρ < 1, so F is convex with
    F(0) = −π/2 and F(π) = πs ≥ 0: it has exactly one root in (0, π] (ω = π at s = 0, a = 2/(1+ρ)), and F > −2π,
    so no other branch of the mod-2π condition is reached first. |a(ω)| is increasing in ω, and small a > 0
    is stable (the root z = 1 moves to 1 − a(1−ρ)), so this crossing is where stability is lost.
    ρ = 0 gives ω = π/(2s+1) and a*(s).
    """
    _check_arguments(staleness, rho)
    if staleness == 0:
        omega = np.pi
    else:
        omega = scipy.optimize.brentq(gac_phase, 0.0, np.pi, args=(staleness, rho), xtol=1e-15, rtol=1e-15)
    return float(2.0 * np.sin(omega / 2) / abs(np.exp(1j * omega) - rho))


def filtered_companion_matrix(a, staleness: int, rho: float) -> np.ndarray:
    """State matrix of X_{t+1} = M X_t, X_t = (x_t, …, x_{t−s−1}), for x_{t+1} = x_t − a x_{t−s} + aρ x_{t−s−1}."""
    n = staleness + 2
    m = np.zeros((n, n))
    m[0, 0] = 1.0
    m[0, staleness] -= a
    m[0, staleness + 1] = a * rho
    for k in range(1, n):
        m[k, k - 1] = 1.0
    return m


def gac_stability_boundary_bisection(staleness: int, rho: float, tol: float = 1e-12) -> float:
    """a*_GAC(s, ρ) by bisection on the spectral radius of ``filtered_companion_matrix`` (no phase condition)."""
    _check_arguments(staleness, rho)
    radius = lambda a: np.abs(np.linalg.eigvals(filtered_companion_matrix(a, staleness, rho))).max()  # noqa: E731
    return _last_stable(radius, 1e-9, 2.5, tol)


def check_gac_boundary(max_staleness: int, rhos) -> dict:
    """max |semi-closed − bisection| over s = 0..max_staleness and the given ρ, and ρ = 0 against a*(s)."""
    errors = [abs(gac_stability_boundary(s, r) - gac_stability_boundary_bisection(s, r))
              for s in range(max_staleness + 1) for r in rhos]
    plain = max(abs(gac_stability_boundary(s, 0.0) - float(stability_boundary_closed_form(s)))
                for s in range(max_staleness + 1))
    return {"max_error": max(errors), "rho_zero_vs_a_star": plain, "cases": len(errors)}


# ---------------------------------------------------------------------------------------------
# Slow modes: the filter is a step cut
# ---------------------------------------------------------------------------------------------


def slow_mode_root_series(order: int) -> dict:
    """Sympy lemma: the root of z^{s+2} − z^{s+1} + a z − aρ near z = 1 is z(a) = 1 − a(1−ρ) + c₂a² + O(a³).

    Derivation: substitute z = 1 + c₁a + c₂a² into z^{s+1}(z − 1) + a(z − ρ) and set the coefficients of a
    and a² to 0 (s symbolic). So to first order the filtered slow mode is plain gradient descent with step
    a(1−ρ): on slow modes GAC's mean-field filter is exactly a step-size cut. Returns {"root": the series,
    "c1", "c2", "symbols": (a, s, rho)}.
    """
    a, s, rho = sp.symbols("a s rho", positive=True)
    coeffs = sp.symbols(f"c1:{order + 1}")
    z = 1 + sum(c * a ** (k + 1) for k, c in enumerate(coeffs))
    expanded = sp.series(z ** (s + 1) * (z - 1) + a * (z - rho), a, 0, order + 1).removeO()
    solution = sp.solve([sp.expand(expanded).coeff(a, k) for k in range(1, order + 1)], coeffs, dict=True)[0]
    root = sum(sp.simplify(solution[c]) * a ** (k + 1) for k, c in enumerate(coeffs)) + 1
    return {"root": sp.expand(root), "c1": sp.simplify(solution[coeffs[0]]),
            "c2": sp.simplify(solution[coeffs[1]]) if order >= 2 else None, "symbols": (a, s, rho)}


def check_slow_mode(stalenesses=(1, 2, 4, 8, 16), rhos=(0.0, 0.3, 0.6, 0.9), a_values=(1e-2, 1e-3, 1e-4)) -> dict:
    """Numeric roots (companion matrix) against the lemma: max over (s, ρ, a) of |z − (1 − a(1−ρ))| / a² and of
    |z − series to a²| / a³ (both bounded as a → 0 if the lemma holds)."""
    lemma = slow_mode_root_series(2)
    a_sym, s_sym, rho_sym = lemma["symbols"]
    second_order = sp.lambdify((a_sym, s_sym, rho_sym), lemma["root"])
    first, second = 0.0, 0.0
    for s in stalenesses:
        for rho in rhos:
            for a in a_values:
                roots = np.linalg.eigvals(filtered_companion_matrix(a, s, rho))
                z = roots[np.argmin(np.abs(roots - 1.0))]
                first = max(first, abs(z - (1 - a * (1 - rho))) / a**2)
                second = max(second, abs(z - second_order(a, s, rho)) / a**3)
    return {"first_order_over_a2": float(first), "second_order_over_a3": float(second)}


def step_cut_ratio(staleness: int, rho: float) -> float:
    """a*_GAC(s, ρ) / (a*(s)/(1−ρ)): 1 if GAC's widening were a pure step cut a → a(1−ρ)."""
    return gac_stability_boundary(staleness, rho) * (1.0 - rho) / float(stability_boundary_closed_form(staleness))


# ---------------------------------------------------------------------------------------------
# Self-consistent ρ*: Lyapunov solve including the filter
# ---------------------------------------------------------------------------------------------


def filtered_gradient_moments(a, staleness: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Per direction, (E[g_t g_{t−1}], E[g_t²]) / σ² of the raw gradient when GAC's filter is applied.

    Model: g_t = λx_{t−s} + σξ_t, x_{t+1} = x_t − η(g_t − ρ g_{t−1}). In units of ησ the state
    X_t = (x_t, …, x_{t−s−1}, ξ_{t−1}) obeys X_{t+1} = M X_t + b ξ_t with row 0 of M = (1, …, −a at s, aρ at
    s+1, ρ), b = (−1, 0, …, 0, 1); P = M P Mᵀ + b bᵀ (scipy Lyapunov). Then E[g²] = a²P_ss + 1 and
    E[g_t g_{t−1}] = a²(MP)_ss + a b_s (b_s = −1 only at s = 0). ρ = 0 reduces to ``cosine.gradient_moments``.
    nan where the filtered recursion is unstable (a ≥ a*_GAC(s, ρ)); a = 0 gives (0, 1).
    """
    a = np.atleast_1d(np.asarray(a))
    lag_one, second = np.full(a.shape, np.nan), np.full(a.shape, np.nan)
    boundary = gac_stability_boundary(staleness, rho)
    n = staleness + 3
    unique_a, inverse = np.unique(a, return_inverse=True)
    for k, value in enumerate(unique_a):
        if value == 0.0:
            lag_one[inverse == k], second[inverse == k] = 0.0, 1.0
            continue
        if not 0.0 < value < boundary:
            continue
        m = np.zeros((n, n))
        m[: n - 1, : n - 1] = filtered_companion_matrix(value, staleness, rho)
        m[0, n - 1] = rho
        b = np.zeros(n)
        b[0], b[n - 1] = -1.0, 1.0
        p = scipy.linalg.solve_discrete_lyapunov(m, np.outer(b, b))
        idx = inverse == k
        second[idx] = value**2 * p[staleness, staleness] + 1.0
        lag_one[idx] = value**2 * (m @ p)[staleness, staleness] + value * b[staleness]
    return lag_one, second


def predicted_coefficient(eta: float, curvatures, staleness: int, rho: float, noise=1.0) -> float:
    """max(0, Σσ_i²E[g_t g_{t−1}]_i / Σσ_i²E[g²]_i) under filter ρ: the removed coefficient ⟨g_t, g_{t−1}⟩/‖g_{t−1}‖²
    that GAC project (τ = 0) would see in high dimension (0 when the mean cosine is ≤ 0: GAC does not act)."""
    a = eta * np.atleast_1d(np.asarray(curvatures))
    noise_sq = np.broadcast_to(np.asarray(noise) ** 2, a.shape)
    lag_one, second = filtered_gradient_moments(a, staleness, rho)
    return max(0.0, float((noise_sq * lag_one).sum() / (noise_sq * second).sum()))


def _stable_rho_interval(a_max: float, staleness: int, grid: int = 400) -> tuple[float, float] | None:
    """(ρ_lo, ρ_hi): the ρ ∈ [0, 1) with a_max < a*_GAC(s, ρ), as a grid-resolved interval; None if empty."""
    rhos = np.linspace(0.0, 0.999, grid)
    stable = np.array([a_max < gac_stability_boundary(staleness, r) for r in rhos])
    if not stable.any():
        return None
    first, last = np.argmax(stable), len(stable) - 1 - np.argmax(stable[::-1])
    boundary_gap = lambda r: gac_stability_boundary(staleness, r) - a_max  # noqa: E731
    lo = 0.0 if first == 0 else scipy.optimize.brentq(boundary_gap, rhos[first - 1], rhos[first], xtol=1e-13)
    hi = rhos[last] if last == len(rhos) - 1 else scipy.optimize.brentq(boundary_gap, rhos[last], rhos[last + 1],
                                                                         xtol=1e-13)
    return lo, hi


def self_consistent_rho(eta: float, curvatures, staleness: int, noise=1.0, grid: int = 60) -> float:
    """ρ*: the first (smallest) fixed point of ρ ↦ ``predicted_coefficient``(η, λ, s, ρ) among the ρ that keep
    every mode stable; the limit of the iteration ρ_{k+1} = max(0, predicted lag-one coefficient at ρ_k)
    started from the smallest stable ρ. nan if no stable fixed point exists (mean-field GAC cannot hold it).

    Near the lower end of the stable ρ-interval the top mode's variance diverges and the coefficient tends to
    the cosine of its boundary frequency, so the scan starts there and stops at the first sign change.
    """
    a_max = eta * float(np.max(curvatures))
    interval = _stable_rho_interval(a_max, staleness)
    if interval is None:
        return float("nan")
    lo, hi = interval
    gap = lambda r: predicted_coefficient(eta, curvatures, staleness, r, noise) - r  # noqa: E731
    margin = 1e-9  # hi - lo < 1: an absolute margin
    rhos = np.linspace(lo + (margin if lo > 0 else 0.0), hi - margin, grid)
    values = np.array([gap(r) for r in rhos])
    if values[0] <= 0.0:
        return 0.0 if lo == 0.0 else float("nan")
    crossing = np.flatnonzero(values <= 0.0)
    if crossing.size == 0:
        return float("nan")
    k = crossing[0]
    return float(scipy.optimize.brentq(gap, rhos[k - 1], rhos[k], xtol=1e-12))


def top_mode_limit(staleness: int) -> dict:
    """The top-mode-dominated limit of the self-consistent filter: ρ = cos ω at the boundary frequency ω.

    With ρ = cos ω, |e^{iω} − ρ| = sin ω and arg(e^{iω} − ρ) = π/2, so the phase condition gives ω = 2π/(2s+3)
    and a*_GAC = 2 sin(ω/2)/sin ω = 1/cos(π/(2s+3)) (2 at s = 0, 1.236 at s = 1, → 1 as s grows). Beyond this
    a_max, the coefficient the diverging top mode produces is smaller than the ρ needed to stabilize it.
    """
    omega = 2.0 * np.pi / (2 * staleness + 3)
    return {"omega": omega, "rho": float(np.cos(omega)), "a_max": float(1.0 / np.cos(omega / 2))}


def predicted_max_stable_step(curvatures, staleness: int, tol: float, noise=1.0) -> float:
    """Largest η·λ_max for which mean-field GAC (project, τ = 0) has a stable self-consistent ρ* (bisection)."""
    lam = float(np.max(curvatures))
    lo, hi = 0.5 * float(stability_boundary_closed_form(staleness)), 2.1
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if np.isfinite(self_consistent_rho(mid / lam, curvatures, staleness, noise)):
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------------------------------------
# Real (nonlinear) GAC runs: measured removed coefficient and divergence
# ---------------------------------------------------------------------------------------------


def gac_project_step(grad: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GAC project, τ = 0, through ``gac.control``: (applied gradient, removed coefficient per row).

    The removed coefficient is (1 − γ)·⟨g, d⟩/‖d‖² where GAC acted (γ the reported parallel scale) and 0
    where it kept g: the quantity whose mean the mean-field ρ models. The only use of ``gac`` in this module.
    """
    out = gac.control(grad, reference, gac.GACConfig(threshold=0.0, mode="project"))
    acted = out.regime == gac.ACT
    along = (grad * reference).sum(-1) / (reference * reference).sum(-1).clamp_min(1e-300)
    return out.grad, acted * (1.0 - out.parallel_scale) * along


def run_gac_quadratic(curvatures, eta, staleness: int, steps: int, seeds: int, seed: int, noise: float = 1.0):
    """Delayed SGD with GAC on f = ½Σλ_i x_i², g_t = Λx_{t−s} + noise·ξ_t, from x = 0, batched over seeds.

    Returns {"rho_bar": mean removed coefficient over the second half and the seeds, "final_sq": median
    final ‖x‖², "mid_sq": median ‖x‖² at half-way, "diverged": share of seeds whose ‖x‖² is non-finite or
    above 1e6 × the half-way value (a stationary run has final ≈ mid)}. eta may be a list of step sizes: they
    run side by side in one batch (each row its own run, GAC acts per row) and a list of such dicts is returned.
    """
    gen = torch.Generator().manual_seed(seed)
    lam = torch.as_tensor(np.asarray(curvatures))
    step = torch.as_tensor(np.atleast_1d(eta))[:, None, None]
    x = torch.zeros(step.shape[0], seeds, lam.numel(), dtype=torch.float64)
    history = [x.clone() for _ in range(staleness + 1)]  # history[k] = x_{t−k}
    reference = torch.zeros_like(x)
    coefficients, mid = [], None
    for t in range(steps):
        grad = lam * history[staleness] + noise * torch.randn(x.shape, generator=gen, dtype=x.dtype)
        applied, coefficient = gac_project_step(grad, reference) if t > 0 else (grad, torch.zeros(x.shape[:-1]))
        if t >= steps // 2:
            coefficients.append(coefficient)
        reference = grad
        x = x - step * applied
        history = [x] + history[:-1]
        if t == steps // 2:
            mid = (x * x).sum(-1)
    final = torch.nan_to_num((x * x).sum(-1), nan=float("inf"))
    diverged = (~torch.isfinite(final)) | (final > 1e6 * mid.clamp_min(1e-300))
    rho_bar = torch.nan_to_num(torch.stack(coefficients)).mean((0, 2))  # per step size: over steps and seeds
    runs = [{"rho_bar": float(rho_bar[k]), "final_sq": float(final[k].median()), "mid_sq": float(mid[k].median()),
             "diverged": float(diverged[k].double().mean())} for k in range(step.shape[0])]
    return runs[0] if np.ndim(eta) == 0 else runs


def spiked_curvatures(staleness: int, dim: int) -> np.ndarray:
    """The test spectrum of the GAC checks: 10% of directions at λ = 1, the rest at 0.05·a*(s) (η·λ_max = η)."""
    out = np.full(dim, 0.05 * float(stability_boundary_closed_form(staleness)))
    out[: max(1, dim // 10)] = 1.0
    return out


RHO_SETTINGS = [(2, 0.5), (2, 1.5), (4, 1.1), (4, 2.0)]
"""(s, η·λ_max / a*(s)) of the ρ* check: inside a*(s) and well beyond it (where only the filter keeps it stable)."""


def check_self_consistent_rho(settings=RHO_SETTINGS, dim: int = 1000, steps: int = 2000, seeds: int = 2,
                              seed: int = 0) -> list[dict]:
    """Self-consistent ρ* (mean-field, Lyapunov with the filter) against the mean removed coefficient of real
    GAC (``gac.control``, project, τ = 0) on ``spiked_curvatures``, noise σ = 1. Rows: s, fraction, eta,
    "predicted", "measured", "abs_error", "diverged"."""
    rows = []
    for k, staleness in enumerate(dict.fromkeys(s for s, _ in settings)):  # one batched run per staleness
        curvatures = spiked_curvatures(staleness, dim)
        fractions = [fraction for s, fraction in settings if s == staleness]
        etas = [fraction * float(stability_boundary_closed_form(staleness)) for fraction in fractions]
        runs = run_gac_quadratic(curvatures, etas, staleness, steps, seeds, seed=seed + k)
        for fraction, eta, run in zip(fractions, etas, runs, strict=True):
            predicted = self_consistent_rho(eta, curvatures, staleness)
            rows.append({"staleness": staleness, "fraction": fraction, "eta": eta, "predicted": predicted,
                         "measured": run["rho_bar"], "abs_error": abs(predicted - run["rho_bar"]),
                         "diverged": run["diverged"]})
    return rows


def check_max_stable_step(staleness: int, factors=(0.95, 1.05), dim: int = 1000, steps: int = 3000, seeds: int = 2,
                          seed: int = 0) -> dict:
    """Predicted largest stable η·λ_max of mean-field GAC (``predicted_max_stable_step`` on the spiked spectrum;
    equals ``top_mode_limit``) and real GAC runs at factor × that value. Returns {"predicted", "top_mode_limit",
    "runs": {factor: run_gac_quadratic result}}."""
    curvatures = spiked_curvatures(staleness, dim)
    predicted = predicted_max_stable_step(curvatures, staleness, tol=1e-3)
    runs = {f: run_gac_quadratic(curvatures, f * predicted, staleness, steps, seeds, seed=seed) for f in factors}
    return {"predicted": predicted, "top_mode_limit": top_mode_limit(staleness)["a_max"], "runs": runs}
