"""Where GAC sits around a momentum optimizer, in the delayed linear model (issue 20, item 3).

Per eigen-direction of a noisy quadratic with staleness s: EMA momentum β (heavy ball), or an Adam-like optimizer
with a constant diagonal preconditioner. GAC's mean-field filter (remove ρ × its reference) is placed on the raw
gradient, the first moment or the proposed update, against the step cut η → η(1−ρ). Results: the stability region,
the stationary cosine of consecutive Δθ, and the ρ that GAC (project, τ = 0) picks itself in each space.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import sympy as sp
import tyro

PLACEMENTS = ("none", "step_cut", "gradient", "momentum", "update")
"""none: plain optimizer; step_cut: η → η(1−ρ); gradient / momentum / update: GAC's filter in that space."""

GAC_PLACEMENTS = ("gradient", "momentum", "update")


def _check_arguments(staleness: int, beta: float, rho: float, placement: str) -> None:
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if int(staleness) != staleness or staleness < 0:
        raise ValueError(f"staleness must be an integer >= 0, got {staleness}")
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta}")
    if not 0.0 <= rho < 1.0:
        raise ValueError(f"rho must be in [0, 1), got {rho}")


# ---------------------------------------------------------------------------------------------
# One optimizer step per placement (linear in its inputs; the library semantics of gac.wrap's spaces)
# ---------------------------------------------------------------------------------------------
# Each takes the raw gradient g_t, the stored first moment m_{t−1}, the reference q_{t−1} (the previous
# *uncontrolled* value of the controlled quantity) and returns (stored m_t, reference q_t, applied u_t), with
# Δθ_t = −η p u_t (p = 1 for SGD-momentum, the preconditioner for Adam-like). q_t is what GAC measures at t.


def _none(g, m, q, beta, rho):
    m = beta * m + (1 - beta) * g
    return m, m, m


def _step_cut(g, m, q, beta, rho):
    m = beta * m + (1 - beta) * g
    return m, m, (1 - rho) * m


def _gradient(g, m, q, beta, rho):
    # project the raw gradient against the previous raw gradient; the optimizer sees the controlled one
    m = beta * m + (1 - beta) * (g - rho * q)
    return m, g, m


def _momentum(g, m, q, beta, rho):
    # the first moment is formed, controlled against the previous uncontrolled one, and stored controlled,
    # so the removed part does not come back through β m
    formed = beta * m + (1 - beta) * g
    kept = formed - rho * q
    return kept, formed, kept


def _update(g, m, q, beta, rho):
    # the proposed step is controlled against the previous proposed step; the optimizer state is untouched
    m = beta * m + (1 - beta) * g
    return m, m, m - rho * q


OPTIMIZER_STEPS = {"none": _none, "step_cut": _step_cut, "gradient": _gradient, "momentum": _momentum,
                   "update": _update}


# ---------------------------------------------------------------------------------------------
# The closed loop on one direction: state matrix, stability, stationary moments
# ---------------------------------------------------------------------------------------------


def closed_loop(a: float, staleness: int, beta: float, rho: float, placement: str) -> tuple[np.ndarray, np.ndarray]:
    """(M, b) with X_{t+1} = M X_t + b ξ_t for one direction in units of its noise σ.

    y = λx/σ, a = ηpλ (p the preconditioner, 1 for SGD-momentum), g_t = y_{t−s} + ξ_t, y_{t+1} = y_t − a u_t,
    and (m, q, u) from ``OPTIMIZER_STEPS[placement]``. State X_t = (y_t, …, y_{t−s}, m_{t−1}, q_{t−1}, u_{t−1}).
    M and b are read off the step (it is linear), so the model is the step code itself.
    """
    _check_arguments(staleness, beta, rho, placement)
    n = staleness + 4

    def step(state, noise):
        y, m, q = state[..., : staleness + 1], state[..., staleness + 1], state[..., staleness + 2]
        m, q, u = OPTIMIZER_STEPS[placement](y[..., staleness] + noise, m, q, beta, rho)
        return np.concatenate([(y[..., 0] - a * u)[..., None], y[..., :staleness], np.stack([m, q, u], -1)], -1)

    return step(np.eye(n), np.zeros(n)).T, step(np.zeros(n), 1.0)


def spectral_radius(a: float, staleness: int, beta: float, rho: float, placement: str) -> float:
    """max |eigenvalue| of ``closed_loop``'s M; < 1 ⇔ the placement is stable on this direction."""
    return float(np.abs(np.linalg.eigvals(closed_loop(a, staleness, beta, rho, placement)[0])).max())


def _first_crossing(radius, a_max: float = 200.0, grid: int = 400, tol: float = 1e-10) -> float:
    """The smallest a > 0 where radius(a) reaches 1: a log-grid scan for the first unstable point, then bisection."""
    grid_a = np.geomspace(1e-4, a_max, grid)
    unstable = [k for k, value in enumerate(grid_a) if radius(value) >= 1.0]
    if not unstable:
        return float("inf")
    hi = grid_a[unstable[0]]
    lo = grid_a[unstable[0] - 1] if unstable[0] > 0 else 0.0
    while hi - lo > tol * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if radius(mid) < 1.0 else (lo, mid)
    return 0.5 * (lo + hi)


def stability_boundary(staleness: int, beta: float, rho: float, placement: str) -> float:
    """a*_P(s, β, ρ): the largest ηpλ below which every a > 0 is stable, for placement P at a fixed filter ρ.

    Bisection on ``spectral_radius`` after a log-grid scan for the first unstable a (the stable set is taken
    from 0 to the first crossing). β = 0 and placement gradient/momentum/update gives a*_GAC(s, ρ) of
    ``gac_stability``; ρ = 0 or placement none gives plain EMA-momentum delayed descent.
    """
    _check_arguments(staleness, beta, rho, placement)
    return _first_crossing(lambda a: spectral_radius(a, staleness, beta, rho, placement))


def characteristic_polynomial(staleness: int, placement: str) -> sp.Expr:
    """Numerator of (z − 1) + a·H_P(z)·z^{−s}: the closed loop's characteristic polynomial, from transfer functions.

    Independent of ``closed_loop``: written from the z-transforms of the filters, g ↦ u,
      none: H = E(z) = (1−β)/(1 − βz⁻¹);  step_cut: (1−ρ)E;  gradient: E·(1 − ρz⁻¹);  update: (1 − ρz⁻¹)·E;
      momentum: (1−β)(1 − ρz⁻¹)/(1 − βz⁻¹ + βρz⁻²)  (m̃ = β(m̃ − ρm̃z⁻¹)z⁻¹ + (1−β)g, u = (1 − ρz⁻¹)m̃).
    Gradient and update space are the same linear system at equal ρ (the two filters commute); momentum space
    is not: its removed part leaves the EMA's feedback too. Returns a polynomial in z (symbols a, beta, rho).
    """
    z, a, beta, rho = sp.symbols("z a beta rho")
    ema = (1 - beta) / (1 - beta / z)
    cut = 1 - rho / z
    transfer = {"none": ema, "step_cut": (1 - rho) * ema, "gradient": ema * cut, "update": cut * ema,
                "momentum": (1 - beta) * cut / (1 - beta / z + beta * rho / z**2)}[placement]
    numerator, _ = sp.fraction(sp.together((z - 1) + a * transfer * z ** (-staleness)))
    return sp.Poly(sp.expand(numerator), z)


def check_characteristic_polynomial(stalenesses=(0, 1, 2, 5, 8), draws: int = 12, seed: int = 0) -> dict:
    """max |spectral radius of M − max |root of the transfer-function polynomial|| over random (a, β, ρ), per
    placement, and whether gradient and update space have the same polynomial (they must)."""
    rng = np.random.default_rng(seed)
    z, a_sym, beta_sym, rho_sym = sp.symbols("z a beta rho")
    errors = {}
    for placement in PLACEMENTS:
        worst = 0.0
        for s in stalenesses:
            poly = characteristic_polynomial(s, placement)
            for _ in range(draws):
                a, beta, rho = rng.uniform(0.01, 3.0), rng.uniform(0.0, 0.95), rng.uniform(0.0, 0.9)
                coeffs = [complex(c.subs({a_sym: a, beta_sym: beta, rho_sym: rho})) for c in poly.all_coeffs()]
                roots = np.roots(np.real(coeffs))
                worst = max(worst, abs(np.abs(roots).max() - spectral_radius(a, s, beta, rho, placement)))
        errors[placement] = worst
    same = all(sp.simplify(characteristic_polynomial(s, "gradient").as_expr()
                           - characteristic_polynomial(s, "update").as_expr()) == 0 for s in stalenesses)
    return {"max_error": max(errors.values()), "per_placement": errors, "gradient_equals_update": same}


def slow_mode_gain(beta, rho, placement: str):
    """κ_P = H_P(1)/H_none(1): the factor on the step that a slow mode sees (its root is z = 1 − aκ_P + O(a²)).

    step_cut, gradient, update: 1 − ρ;  momentum: (1−β)(1−ρ)/(1 − β + βρ), because the removed part of m̃_{t−1}
    is removed again from every later moment (at β = 0.9, ρ = 0.5: 0.091, an 11× step cut). On slow modes each
    placement is therefore a step cut of this size; compare stability regions at equal κ_P.
    """
    gains = {"none": 1.0 + 0 * rho, "step_cut": 1 - rho, "gradient": 1 - rho, "update": 1 - rho,
             "momentum": (1 - beta) * (1 - rho) / (1 - beta + beta * rho)}
    return gains[placement]


def check_slow_mode_gain(betas=(0.0, 0.5, 0.9), rhos=(0.0, 0.3, 0.6, 0.9), a: float = 1e-6,
                         stalenesses=(0, 3)) -> float:
    """max |(1 − z_slow)/a − κ_P| over placements, β, ρ, s; z_slow the eigenvalue of M nearest 1 (should be O(a))."""
    worst = 0.0
    for placement in PLACEMENTS:
        for beta in betas:
            for rho in rhos:
                for s in stalenesses:
                    eig = np.linalg.eigvals(closed_loop(a, s, beta, rho, placement)[0])
                    z = eig[np.argmin(np.abs(eig - 1.0))]
                    worst = max(worst, abs((1.0 - z) / a - slow_mode_gain(beta, rho, placement)))
    return float(worst)


def stationary_moments(a: float, staleness: int, beta: float, rho: float, placement: str) -> dict:
    """Stationary second moments of one direction (units of σ²), from the Lyapunov solve P = M P Mᵀ + b bᵀ.

    Returns E[u²], E[u_t u_{t−1}] (applied update, Δθ = −ηpσu), E[r²], E[r_t r_{t−1}] (r: what GAC measures in
    the placement's space: raw g, formed m̃ or proposed m), E[g²] and E[y²] (signal² / σ², y = λx/σ), since
    E[X_{t+1}X_tᵀ] = M P. All nan where the loop is unstable.
    """
    m, b = closed_loop(a, staleness, beta, rho, placement)
    keys = ("u_sq", "u_lag", "r_sq", "r_lag", "g_sq", "y_sq")
    if a <= 0 or np.abs(np.linalg.eigvals(m)).max() >= 1.0:
        return dict.fromkeys(keys, float("nan"))
    import scipy.linalg  # here: --help and the symbolic checks load without scipy

    p = scipy.linalg.solve_discrete_lyapunov(m, np.outer(b, b))
    lagged = m @ p
    iq, iu = staleness + 2, staleness + 3
    return {"u_sq": p[iu, iu], "u_lag": lagged[iu, iu], "r_sq": p[iq, iq], "r_lag": lagged[iq, iq],
            "g_sq": p[staleness, staleness] + 1.0, "y_sq": p[0, 0]}


def _aggregate(eta, curvatures, staleness, beta, rho, placement, noise, preconditioner):
    """Per-direction moments of a spectrum and the weights of the sums (see ``predicted_update_cosine``)."""
    lam = np.atleast_1d(np.asarray(curvatures, dtype=float))
    sigma = np.broadcast_to(np.asarray(noise, dtype=float), lam.shape)
    precond = np.broadcast_to(np.asarray(1.0 if preconditioner is None else preconditioner, dtype=float), lam.shape)
    a = eta * precond * lam
    cache = {}
    rows = []
    for value in a:
        if value not in cache:
            cache[value] = stationary_moments(float(value), staleness, beta, rho, placement)
        rows.append(cache[value])
    moments = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return moments, sigma**2, (precond * sigma) ** 2


def predicted_update_cosine(eta: float, curvatures, staleness: int, beta: float, rho: float, placement: str,
                            noise=1.0, preconditioner=None) -> float:
    """Stationary cos(Δθ_t, Δθ_{t−1}) of the applied updates: Σ_i p_i²σ_i² E[u_t u_{t−1}]_i / Σ_i p_i²σ_i² E[u²]_i.

    In high dimension the per-step cosine concentrates on this ratio of sums. preconditioner: None (SGD-momentum)
    or the constant p_i of an Adam-like optimizer (Δθ_i = −η p_i m_i). nan where some direction is unstable.
    """
    moments, _, weights = _aggregate(eta, curvatures, staleness, beta, rho, placement, noise, preconditioner)
    return float((weights * moments["u_lag"]).sum() / (weights * moments["u_sq"]).sum())


def predicted_step_energy(eta: float, curvatures, staleness: int, beta: float, rho: float, placement: str,
                          noise=1.0, preconditioner=None) -> float:
    """Stationary E‖Δθ‖² = η² Σ_i p_i²σ_i² E[u²]_i (nan if unstable): compare placements at equal step norm."""
    moments, _, weights = _aggregate(eta, curvatures, staleness, beta, rho, placement, noise, preconditioner)
    return float(eta**2 * (weights * moments["u_sq"]).sum())


def predicted_coefficient(eta: float, curvatures, staleness: int, beta: float, rho: float, placement: str,
                          noise=1.0, preconditioner=None) -> float:
    """max(0, ⟨r_t, r_{t−1}⟩/‖r_{t−1}‖²) in the stationary state under filter ρ: the coefficient GAC project, τ = 0,
    would remove in its space (0 where the mean cosine is ≤ 0: it does not act; nan where some direction is unstable).

    r is the raw gradient (gradient space), the formed first moment (momentum space; both in gradient units, weights
    σ_i²) or the proposed update Δθ = −ηp m (update space; weights p_i²σ_i²).
    """
    moments, grad_weights, update_weights = _aggregate(eta, curvatures, staleness, beta, rho, placement, noise,
                                                       preconditioner)
    weights = update_weights if placement == "update" else grad_weights
    ratio = float((weights * moments["r_lag"]).sum() / (weights * moments["r_sq"]).sum())
    return ratio if np.isnan(ratio) else max(0.0, ratio)  # max(0, nan) would hide an unstable state


def self_consistent_rho(eta: float, curvatures, staleness: int, beta: float, placement: str, noise=1.0,
                        preconditioner=None, grid: int = 60) -> float:
    """ρ*_P: the smallest ρ ∈ [0, 1) with ρ = ``predicted_coefficient``(ρ) and every direction stable (the limit of
    ρ_{k+1} = coefficient(ρ_k) from the smallest stable ρ); nan if none (mean-field GAC cannot hold the run).

    A grid over ρ ∈ [0, 0.995] for the first sign change of coefficient(ρ) − ρ among stable ρ, then a root solve.
    """
    import scipy.optimize

    if placement not in GAC_PLACEMENTS:
        raise ValueError(f"self_consistent_rho needs a GAC placement {GAC_PLACEMENTS}, got {placement!r}")
    gap = lambda r: predicted_coefficient(eta, curvatures, staleness, beta, r, placement, noise,  # noqa: E731
                                          preconditioner) - r
    rhos = np.linspace(0.0, 0.995, grid)
    previous = gap(rhos[0])
    if previous <= 0.0:  # False for nan (unstable at ρ = 0)
        return 0.0
    for k in range(1, grid):  # walk up the grid, stop at the first sign change between two stable points
        value = gap(rhos[k])
        if previous > 0.0 >= value:
            return float(scipy.optimize.brentq(gap, rhos[k - 1], rhos[k], xtol=1e-12))
        previous = value
    return float("nan")


def predicted_max_stable_step(curvatures, staleness: int, beta: float, placement: str, noise=1.0,
                              preconditioner=None, grid: int = 25, tol: float = 1e-3) -> float:
    """The η·λ_max (in units of a*_none(s, β)) at which mean-field GAC in this space first loses its stable
    self-consistent ρ* as η grows: a log-grid scan over [0.5, 32] for the first factor without one, then bisection
    between it and the last factor with one (the set is not always an interval, so plain bisection is not used).
    Returns 32 if ρ* exists on the whole grid."""
    top = stability_boundary(staleness, beta, 0.0, "none")
    lam_max = float(np.max(curvatures)) * (1.0 if preconditioner is None else float(np.max(preconditioner)))
    holds = lambda f: np.isfinite(self_consistent_rho(f * top / lam_max, curvatures, staleness, beta,  # noqa: E731
                                                      placement, noise, preconditioner))
    factors = np.geomspace(0.5, 32.0, grid)
    failing = next((k for k, f in enumerate(factors) if not holds(f)), None)
    if failing is None:
        return 32.0
    if failing == 0:
        return float("nan")
    lo, hi = factors[failing - 1], factors[failing]
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return 0.5 * (lo + hi)


def adam_preconditioner(eta: float, curvatures, staleness: int, beta: float, noise=1.0) -> np.ndarray:
    """p_i = 1/√v_i with v_i = E[g_i²] of the uncontrolled stationary run (Adam's second moment, β₂ → 1, ε = 0).

    Per direction a = ηp_iλ_i solves a·√(E[g²](a)/σ²) = ηλ_i/σ_i (brentq on (0, a*_none); the left side runs from 0
    to ∞ there, so a solution always exists: the preconditioner shrinks a direction's step as its variance grows).
    Held constant afterwards: the stated simplification of the Adam-like case (GAC's effect on v is ignored).
    """
    import scipy.optimize

    lam = np.atleast_1d(np.asarray(curvatures, dtype=float))
    sigma = np.broadcast_to(np.asarray(noise, dtype=float), lam.shape)
    top = stability_boundary(staleness, beta, 0.0, "none")
    out = np.empty(lam.shape)
    for i, (curvature, noise_i) in enumerate(zip(lam, sigma, strict=True)):
        if curvature == 0.0:
            out[i] = 1.0 / noise_i
            continue
        target = eta * curvature / noise_i
        level = lambda a: a * np.sqrt(stationary_moments(a, staleness, beta, 0.0, "none")["g_sq"]) - target  # noqa
        a = scipy.optimize.brentq(level, 1e-12, top * (1 - 1e-9), xtol=1e-14)
        out[i] = a / (eta * curvature)
    return out


# ---------------------------------------------------------------------------------------------
# Noise-dominated limit (a → 0): closed forms
# ---------------------------------------------------------------------------------------------


def noise_limit(beta) -> dict:
    """ρ* and the Δθ cosine per placement when the gradient is white noise (a → 0, the low-SNR LLM regime).

    - none, step cut: u = EMA(ξ), cos(Δθ) = β (the EMA's own lag-one autocorrelation; no staleness involved).
    - gradient: raw gradients are uncorrelated, ρ* = 0: nothing removed, cos(Δθ) = β.
    - update: ρ* = β (the proposed steps are the EMA), u = m_t − βm_{t−1} = (1−β)ξ_t: momentum undone, cos(Δθ) = 0,
      E[u²] = (1−β)² against (1−β)/(1+β) without control.
    - momentum: m̃ is AR(2), m̃_t = βm̃_{t−1} − βρm̃_{t−2} + (1−β)ξ_t, lag-one autocorrelation β/(1+βρ) (Yule–Walker),
      so ρ* solves βρ² + ρ − β = 0: ρ* = (√(1+4β²) − 1)/(2β) (0.588 at β = 0.9). Its lag-two autocorrelation
      β·ρ* − βρ* = 0, hence E[u_t u_{t−1}] = ρ*³γ₀, E[u²] = (1 − ρ*²)γ₀ and cos(Δθ) = ρ*³/(1 − ρ*²) (0.312 at 0.9).
    Returns {placement: {"rho": ρ*, "cosine": cos(Δθ)}}; sympy expressions when beta is a sympy symbol.
    """
    sqrt = sp.sqrt if isinstance(beta, sp.Basic) else np.sqrt
    rho_m = (sqrt(1 + 4 * beta**2) - 1) / (2 * beta)
    return {"none": {"rho": 0 * beta, "cosine": beta}, "step_cut": {"rho": 0 * beta, "cosine": beta},
            "gradient": {"rho": 0 * beta, "cosine": beta}, "update": {"rho": beta, "cosine": 0 * beta},
            "momentum": {"rho": rho_m, "cosine": rho_m**3 / (1 - rho_m**2)}}


# ---------------------------------------------------------------------------------------------
# Direct simulation: the optimizers written out, real GAC through gac.control (independent of the above)
# ---------------------------------------------------------------------------------------------


def simulate(curvatures, eta: float, staleness: int, beta: float, placement: str, rho: float | None = None,
             noise=1.0, preconditioner=None, adam_beta2: float | None = None, steps: int = 3000, seeds: int = 4,
             seed: int = 0) -> dict:
    """Delayed stochastic descent on f = ½Σλ_i x_i² with an EMA-momentum optimizer and GAC in one space, from x = 0.

    g_t = Λx_{t−s} + σξ_t; m_t = βm_{t−1} + (1−β)g_t; Δθ = −η·p·m. rho=None uses real GAC (``gac.control``,
    project, τ = 0, per seed, reference = the previous uncontrolled value in its space); a float ρ applies the
    mean-field filter (remove ρ × reference) every step. preconditioner: constant p_i, or adam_beta2 for a running
    p = 1/√v̂ (bias-corrected EMA of g²), to measure the constant-preconditioner simplification. Returns, over the
    second half: "rho_bar" (mean removed coefficient), "cos_update" (mean per-step cos(Δθ_t, Δθ_{t−1})),
    "cos_ratio" (Σ⟨Δθ_t, Δθ_{t−1}⟩/Σ‖Δθ‖²), "step_sq" (mean ‖Δθ‖²), "final_sq" / "mid_sq" (median ‖x‖² at the
    end / half-way), "precond" (mean p_i per direction).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    import torch  # here, not at the top: the tables that need no simulation (and --help) load without torch

    import gac

    gen = torch.Generator().manual_seed(seed)
    lam = torch.as_tensor(np.asarray(curvatures, dtype=float))
    sigma = torch.as_tensor(np.broadcast_to(np.asarray(noise, dtype=float), lam.shape).copy())
    p = torch.as_tensor(np.broadcast_to(np.asarray(1.0 if preconditioner is None else preconditioner, dtype=float),
                                        lam.shape).copy())
    cfg = gac.GACConfig(threshold=0.0, mode="project")
    x = torch.zeros(seeds, lam.numel(), dtype=torch.float64)
    past = [x] * (staleness + 1)  # past[k] = x_{t−k}
    m, v = torch.zeros_like(x), torch.zeros_like(x)
    reference, previous_step = torch.zeros_like(x), torch.zeros_like(x)
    removed, cos_steps, dots, norms, preconds, mid = [], [], [], [], [], None

    def controlled(value, ref):
        if rho is not None:
            return value - rho * ref, torch.full((seeds,), float(rho), dtype=x.dtype)
        out = gac.control(value, ref, cfg)
        along = (value * ref).sum(-1) / (ref * ref).sum(-1).clamp_min(1e-300)
        acted = (out.regime == gac.ACT).to(x.dtype)
        return out.grad, acted * (1.0 - out.parallel_scale.to(x.dtype)) * along

    for t in range(steps):
        grad = lam * past[staleness] + sigma * torch.randn(x.shape, generator=gen, dtype=x.dtype)
        if adam_beta2 is not None:
            v = adam_beta2 * v + (1 - adam_beta2) * grad * grad
            p = 1.0 / (v / (1 - adam_beta2 ** (t + 1))).sqrt()
        coefficient = torch.zeros(seeds, dtype=x.dtype)
        if placement == "gradient":
            applied_grad, coefficient = controlled(grad, reference)
            reference = grad
            m = beta * m + (1 - beta) * applied_grad
            step = -eta * p * m
        elif placement == "momentum":
            formed = beta * m + (1 - beta) * grad
            m, coefficient = controlled(formed, reference)
            reference = formed
            step = -eta * p * m
        elif placement == "update":
            m = beta * m + (1 - beta) * grad
            proposed = -eta * p * m
            step, coefficient = controlled(proposed, reference)
            reference = proposed
        else:
            m = beta * m + (1 - beta) * grad
            step = -eta * p * m * ((1 - rho) if placement == "step_cut" else 1.0)
        if t >= steps // 2:
            removed.append(coefficient)
            dot = (step * previous_step).sum(-1)
            cos_steps.append(dot / ((step * step).sum(-1) * (previous_step * previous_step).sum(-1)).sqrt())
            dots.append(dot)
            norms.append((previous_step * previous_step).sum(-1))
            preconds.append(p.expand_as(x).mean(0))
        previous_step = step
        x = x + step
        past = [x] + past[:-1]
        if t == steps // 2:
            mid = (x * x).sum(-1)
    final = torch.nan_to_num((x * x).sum(-1), nan=float("inf"))
    return {"rho_bar": float(torch.stack(removed).mean()), "cos_update": float(torch.stack(cos_steps).mean()),
            "cos_ratio": float(torch.stack(dots).sum() / torch.stack(norms).sum()),
            "step_sq": float(torch.stack(norms).mean()), "final_sq": float(final.median()),
            "mid_sq": float(mid.median()), "precond": torch.stack(preconds).mean(0).numpy()}


# ---------------------------------------------------------------------------------------------
# Tables: `python -m theory.placement [boundary|plain|noise|consistent|stable|all]`
# ---------------------------------------------------------------------------------------------


def spiked_curvatures(staleness: int, beta: float, dim: int) -> np.ndarray:
    """10 % of directions at λ = 1, the rest at 0.05·a*_none(s, β): the spectrum of the tables (η·λ_max = η)."""
    out = np.full(dim, 0.05 * stability_boundary(staleness, beta, 0.0, "none"))
    out[: max(1, dim // 10)] = 1.0
    return out


def boundary_table(stalenesses=(1, 2, 4, 8, 16), betas=(0.0, 0.9), rhos=(0.3, 0.6)) -> str:
    lines = ["| s | β | ρ | a*_none | a*_gradient = a*_update | ratio at equal slow step | a*_momentum | κ_momentum | "
             "ratio at equal slow step |", "|---|---|---|---|---|---|---|---|---|"]
    for beta in betas:
        for rho in rhos:
            for s in stalenesses:
                plain = stability_boundary(s, beta, 0.0, "none")
                grad, mom = stability_boundary(s, beta, rho, "gradient"), stability_boundary(s, beta, rho, "momentum")
                kappa = slow_mode_gain(beta, rho, "momentum")
                lines.append(f"| {s} | {beta} | {rho} | {plain:.4f} | {grad:.4f} | {grad * (1 - rho) / plain:.3f} | "
                             f"{mom:.4f} | {kappa:.4f} | {mom * kappa / plain:.3f} |")
    return "\n".join(lines)


def plain_table(stalenesses=(0, 1, 4, 16), betas=(0.0, 0.9), steps=(0.01, 0.05)) -> str:
    """cos(Δθ_t, Δθ_{t−1}) without GAC, one direction, at small a = ηλ and at 0.9·a*_none(s, β): what staleness adds."""
    lines = ["| β | s | " + " | ".join(f"a = {a}" for a in steps) + " | a = 0.9·a*_none |",
             "|---|---|" + "---|" * (len(steps) + 1)]
    for beta in betas:
        for s in stalenesses:
            values = [*steps, 0.9 * stability_boundary(s, beta, 0.0, "none")]
            cells = [f"{predicted_update_cosine(a, [1.0], s, beta, 0.0, 'none'):.4f}" for a in values]
            lines.append(f"| {beta} | {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def noise_table(betas=(0.5, 0.9, 0.95, 0.99), a: float = 1e-5, staleness: int = 4) -> str:
    lines = ["| β | placement | ρ* (closed form) | cos(Δθ) (closed form) | cos(Δθ) (Lyapunov, a = 1e-5) | κ at ρ* | "
             "‖Δθ‖ / ‖Δθ‖_none |", "|---|---|---|---|---|---|---|"]
    for beta in betas:
        closed = noise_limit(beta)
        plain = predicted_step_energy(a, [1.0], staleness, beta, 0.0, "none")
        for space in ("none", *GAC_PLACEMENTS):
            rho = self_consistent_rho(a, [1.0], staleness, beta, space) if space in GAC_PLACEMENTS else 0.0
            cosine = predicted_update_cosine(a, [1.0], staleness, beta, rho, space)
            norm = np.sqrt(predicted_step_energy(a, [1.0], staleness, beta, rho, space) / plain)
            lines.append(f"| {beta} | {space} | {float(closed[space]['rho']):.4f} | "
                         f"{float(closed[space]['cosine']):.4f} | {cosine:.4f} | "
                         f"{float(slow_mode_gain(beta, rho, space)):.4f} | {norm:.3f} |")
    return "\n".join(lines)


def _optimizer_setting(optimizer: str, staleness: int, beta: float, fraction: float, dim: int, seed: int = 0):
    """(η, curvatures, noise σ_i, frozen preconditioner or None, adam_beta2 or None) of one table row.

    SGD-momentum: σ = 1, η·λ_max = fraction·a*_none. Adam-like: σ_i log-spaced over [0.1, 10] (shuffled; 1 on the
    top directions), η chosen so that the top direction's preconditioned a is fraction·a*_none."""
    curvatures = spiked_curvatures(staleness, beta, dim)
    top = stability_boundary(staleness, beta, 0.0, "none")
    if optimizer == "sgd":
        return fraction * top, curvatures, np.ones(dim), None, None
    noise = np.random.default_rng(seed).permutation(np.geomspace(0.1, 10.0, dim))
    noise[: dim // 10] = 1.0
    a = fraction * top  # top direction: λ = σ = 1, a = η/√E[g²](a)
    eta = a * np.sqrt(stationary_moments(a, staleness, beta, 0.0, "none")["g_sq"])
    return eta, curvatures, noise, adam_preconditioner(eta, curvatures, staleness, beta, noise), 0.999


def consistent_table(staleness: int = 4, beta: float = 0.9, fractions=(0.9,), dim: int = 300, steps: int = 1200,
                     seeds: int = 2) -> str:
    lines = ["| optimizer | ηλ_max / a*_none | placement | ρ* predicted | ρ̄ measured | cos(Δθ) predicted | measured | "
             "κ at ρ* | ‖Δθ‖/‖Δθ‖_none predicted | measured |", "|---|---|---|---|---|---|---|---|---|---|"]
    for optimizer in ("sgd", "adam"):
        for fraction in fractions:
            eta, curvatures, noise, precond, beta2 = _optimizer_setting(optimizer, staleness, beta, fraction, dim)
            plain_energy = predicted_step_energy(eta, curvatures, staleness, beta, 0.0, "none", noise, precond)
            plain_run = None
            for space in ("none", *GAC_PLACEMENTS):
                gac_space = space in GAC_PLACEMENTS
                rho = self_consistent_rho(eta, curvatures, staleness, beta, space, noise, precond) if gac_space else 0.0
                run = simulate(curvatures, eta, staleness, beta, space, rho=None if gac_space else 0.0, noise=noise,
                               preconditioner=precond, adam_beta2=beta2, steps=steps, seeds=seeds)
                plain_run = run if space == "none" else plain_run
                cosine = predicted_update_cosine(eta, curvatures, staleness, beta, rho, space, noise, precond)
                norm = np.sqrt(predicted_step_energy(eta, curvatures, staleness, beta, rho, space, noise, precond)
                               / plain_energy)
                lines.append(f"| {optimizer} | {fraction} | {space} | {rho:.4f} | {run['rho_bar']:.4f} | "
                             f"{cosine:.4f} | {run['cos_ratio']:.4f} | {float(slow_mode_gain(beta, rho, space)):.4f} | "
                             f"{norm:.3f} | {np.sqrt(run['step_sq'] / plain_run['step_sq']):.3f} |")
    return "\n".join(lines)


def stable_table(stalenesses=(4,), beta: float = 0.9, dim: int = 300, steps: int = 1200, seeds: int = 2,
                 factors=(0.9, 1.1)) -> str:
    lines = ["| s | placement | predicted largest ηλ_max / a*_none | ρ* just below | 1/κ at that ρ* | real GAC at 0.9× "
             "(final/mid ‖x‖²) | at 1.1× |", "|---|---|---|---|---|---|---|"]
    for s in stalenesses:
        curvatures = spiked_curvatures(s, beta, dim)
        top = stability_boundary(s, beta, 0.0, "none")
        for space in GAC_PLACEMENTS:
            largest = predicted_max_stable_step(curvatures, s, beta, space)
            rho = self_consistent_rho(0.999 * largest * top, curvatures, s, beta, space)
            cells = []
            for factor in factors:
                run = simulate(curvatures, factor * largest * top, s, beta, space, steps=steps, seeds=seeds, seed=s)
                cells.append(f"{run['final_sq'] / run['mid_sq']:.3g}")
            lines.append(f"| {s} | {space} | {largest:.3f} | {rho:.3f} | "
                         f"{1 / float(slow_mode_gain(beta, rho, space)):.2f} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


TABLES = {"boundary": boundary_table, "plain": plain_table, "noise": noise_table, "consistent": consistent_table,
          "stable": stable_table}


TableName = Literal["all", "boundary", "plain", "noise", "consistent", "stable"]


def print_tables(names: tyro.conf.Positional[tuple[TableName, ...]] = ("all",)) -> None:
    """Print the placement tables as markdown (theory/README). NAMES: which tables (default all)."""
    for name in TABLES if "all" in names or not names else names:
        print(f"## {name}\n\n{TABLES[name]()}\n", flush=True)


def main(argv: list[str] | None = None) -> None:
    tyro.cli(print_tables, args=argv, prog="python -m theory.placement")


if __name__ == "__main__":
    main()
