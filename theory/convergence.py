"""Convergence of SGD with bounded staleness and GAC applied to each stochastic gradient.

Theorem (statement and proof in theory/README.md, §3): L-smooth f ≥ f*, g_t = ∇f(θ_{t−s_t}) + ξ_t with
s_t ≤ s and unbiased noise of variance ≤ σ², of which ≤ σ_∥² lies along the reference direction; GAC in
mode "project" or "cap" (any threshold); if Lη + (1+2δ)L²η²s² ≤ 1 then for every ε ∈ (0, κ̄), δ > 0
  min_t E‖∇f(θ_t)‖² ≤ (1/T) Σ_t E‖∇f(θ_t)‖²
                   ≤ [2Δ/(ηT) + (Lη + (1+2δ)L²η²s²)σ² + (1/ε + 1/(8δ))σ_∥²] / (κ̄ − ε),
κ̄ the fraction of the true gradient's energy GAC keeps. Without GAC (κ̄ = 1, σ_∥ → 0): the classical
2Δ/(ηT) + (Lη + L²η²s²)σ². ``convergence_bound`` is the theory curve of ``fig7_bound``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.optimize
import sympy as sp
import torch

import gac

MODES = ("none", "project", "cap")

# ---------------------------------------------------------------------------------------------
# The algebra (sympy)
# ---------------------------------------------------------------------------------------------


def bound_expression() -> dict:
    """The bound and its pieces as sympy expressions in L, η, s, T, Δ, σ², σ_∥², κ̄, ε, δ.

    Returns {"condition": the step-size condition φ ≤ 1 as φ − 1 (≤ 0 required), "phi": φ,
    "bound": the right-hand side, "eta_max": the largest admissible η (s > 0), "eps_opt": the ε that
    minimizes the bound for fixed η, δ (root of C ε² + 2σ_∥² ε − σ_∥² κ̄ = 0), "symbols": dict}.
    """
    L, eta, s, T, delta_f, sigma2, sigma_par2, kappa, eps, dlt = sp.symbols(
        "L eta s T Delta sigma2 sigma_par2 kappa epsilon delta", positive=True)
    phi = L * eta + (1 + 2 * dlt) * L**2 * eta**2 * s**2
    numerator = 2 * delta_f / (eta * T) + phi * sigma2 + (1 / eps + 1 / (8 * dlt)) * sigma_par2
    bound = numerator / (kappa - eps)
    roots = sp.solve(sp.Eq(phi, 1), eta)
    eta_max = [r for r in roots if r.is_positive is not False and sp.simplify(r.subs({L: 1, s: 1, dlt: 0})) > 0][0]
    c = sp.Symbol("C", positive=True)  # everything in the numerator except the σ_∥²/ε term
    eps_opt = [r for r in sp.solve(sp.diff((c + sigma_par2 / eps) / (kappa - eps), eps), eps)
               if sp.simplify(r.subs({c: 1, sigma_par2: 1, kappa: 1})) > 0][0]
    return {"condition": phi - 1, "phi": phi, "bound": bound, "eta_max": sp.simplify(eta_max),
            "eps_opt": sp.simplify(eps_opt), "numerator": numerator,
            "symbols": {"L": L, "eta": eta, "s": s, "T": T, "Delta": delta_f, "sigma2": sigma2,
                        "sigma_par2": sigma_par2, "kappa": kappa, "epsilon": eps, "delta": dlt, "C": c}}


def optimal_step_size_expression() -> dict:
    """Sympy: the η minimizing the no-GAC bound 2Δ/(ηT) + Lησ² + L²η²s²σ².

    Stationarity gives the cubic 2L²s²σ²η³ + Lσ²η² − 2Δ/T = 0; at s = 0 its root is η* = √(2Δ/(LTσ²)) and
    the bound at η* is 2√(2LΔσ²/T) (the classical rate); for s > 0 the staleness term is lower order
    once η* ≤ 1/(Ls), i.e. T ≳ 2Δ L s²/σ².
    """
    L, eta, s, T, delta_f, sigma2 = sp.symbols("L eta s T Delta sigma2", positive=True)
    bound = 2 * delta_f / (eta * T) + L * eta * sigma2 + L**2 * eta**2 * s**2 * sigma2
    stationarity = sp.expand(sp.diff(bound, eta) * eta**2)
    bound_sync = bound.subs(s, 0)
    eta_sync = sp.solve(sp.diff(bound_sync, eta), eta)[0]
    return {"bound": bound, "stationarity": stationarity, "eta_sync": sp.simplify(eta_sync),
            "rate_sync": sp.simplify(bound_sync.subs(eta, eta_sync)),
            "symbols": {"L": L, "eta": eta, "s": s, "T": T, "Delta": delta_f, "sigma2": sigma2}}


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------


def max_step_size(L: float, staleness: int, delta: float = 0.0) -> float:
    """Largest η with Lη + (1+2δ)L²η²s² ≤ 1: (√(1 + 4(1+2δ)s²) − 1) / (2(1+2δ)L s²), and 1/L at s = 0."""
    if staleness == 0:
        return 1.0 / L
    k = (1.0 + 2.0 * delta) * staleness**2
    return (np.sqrt(1.0 + 4.0 * k) - 1.0) / (2.0 * k * L)


def optimal_step_size(L: float, delta_f: float, sigma2: float, staleness: int, T: int) -> float:
    """η minimizing the no-GAC bound (positive root of 2L²s²σ²η³ + Lσ²η² − 2Δ/T), clipped to max_step_size."""
    roots = np.roots([2 * L**2 * staleness**2 * sigma2, L * sigma2, 0.0, -2 * delta_f / T])
    positive = roots[(np.abs(roots.imag) < 1e-12) & (roots.real > 0)].real
    return float(min(positive.min(), max_step_size(L, staleness)))


def convergence_bound(L: float, delta_f: float, sigma2: float, eta: float, staleness: int, T: int,
                      mode: str = "project", sigma_par2: float = 0.0, retention: float = 1.0) -> float:
    """Upper bound on min_t E‖∇f(θ_t)‖² (indeed on the average over t < T) for SGD with staleness ≤ s ± GAC.

    L: smoothness; delta_f: f(θ_0) − f*; sigma2: E‖ξ‖² bound; eta: step size; staleness: the bound s on
    s_t; T: number of steps; mode: "none" (plain delayed SGD), "project" or "cap" (GAC, any threshold τ:
    τ enters only through ``retention``); sigma_par2: bound on E⟨d̂, ξ⟩² along the reference direction
    (σ²/P for isotropic noise in P dims); retention: κ̄ = Σ E⟨∇f, D∇f⟩ / Σ E‖∇f‖² ∈ (0, 1], the share of the
    true gradient's energy GAC keeps (1 without GAC). The bound is minimized over the proof's free
    constants ε ∈ (0, κ̄), δ ≥ 0 subject to Lη + (1+2δ)L²η²s² ≤ 1. Returns inf if no admissible choice.
    Skip mode is not covered (see README §3).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; skip is not covered by the theorem, got {mode!r}")
    if not 0.0 < retention <= 1.0:
        raise ValueError(f"retention must be in (0, 1], got {retention}")
    if eta <= 0 or L <= 0 or T <= 0:
        raise ValueError("convergence_bound needs eta, L, T > 0")
    if eta > max_step_size(L, staleness) * (1 + 1e-12):
        return float("inf")
    base = 2.0 * delta_f / (eta * T)
    if mode == "none" or sigma_par2 == 0.0:
        return (base + (L * eta + L**2 * eta**2 * staleness**2) * sigma2) / retention

    # largest δ allowed by the step-size condition
    if staleness == 0:
        delta_max = np.inf
    else:
        delta_max = ((1.0 - L * eta) / (L**2 * eta**2 * staleness**2) - 1.0) / 2.0
    if delta_max <= 0:
        return float("inf")

    def for_delta(delta: float) -> float:
        phi = L * eta + (1 + 2 * delta) * L**2 * eta**2 * staleness**2
        c = base + phi * sigma2 + sigma_par2 / (8 * delta)
        # ε minimizing (c + σ_∥²/ε)/(κ̄ − ε): root of c ε² + 2σ_∥² ε − σ_∥² κ̄ (bound_expression()["eps_opt"])
        eps = (-sigma_par2 + np.sqrt(sigma_par2**2 + c * sigma_par2 * retention)) / c
        return (c + sigma_par2 / eps) / (retention - eps)

    upper = min(delta_max, 1e8)
    res = scipy.optimize.minimize_scalar(lambda u: for_delta(np.exp(u)), bounds=(-20.0, np.log(upper)),
                                         method="bounded", options={"xatol": 1e-6})
    return float(min(res.fun, for_delta(upper)))


# ---------------------------------------------------------------------------------------------
# The numeric check: GAC-SGD with staleness on quadratics and a non-convex toy
# ---------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """A separable test objective f(x) = Σ_i λ_i ψ(x_i) with f* = 0.

    kind "quadratic": ψ = x²/2 (L = max λ); kind "wavy": ψ = x²/2 + 3 sin²x, non-convex (ψ'' = 1 + 6 cos 2x
    ∈ [−5, 7], so L = 7 max λ) with spurious stationary points at |x| ≈ 2.4.
    """

    kind: str
    curvatures: torch.Tensor
    x0: torch.Tensor

    @property
    def smoothness(self) -> float:
        return float(self.curvatures.max()) * (1.0 if self.kind == "quadratic" else 7.0)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        psi = 0.5 * x * x + (3.0 * torch.sin(x) ** 2 if self.kind == "wavy" else 0.0)
        return (self.curvatures * psi).sum(-1)

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        dpsi = x + (3.0 * torch.sin(2.0 * x) if self.kind == "wavy" else 0.0)
        return self.curvatures * dpsi


def make_problem(kind: str, dim: int, seed: int) -> Problem:
    """Random spectrum λ_i ~ U(0.05, 1) (then λ_max set to 1) and a fixed start x0 ~ U(−3, 3)^P."""
    gen = torch.Generator().manual_seed(seed)
    curvatures = 0.05 + 0.95 * torch.rand(dim, generator=gen, dtype=torch.float64)
    curvatures /= curvatures.max()
    x0 = 6.0 * torch.rand(dim, generator=gen, dtype=torch.float64) - 3.0
    return Problem(kind, curvatures, x0)


def run_gac_sgd(problem: Problem, eta: float, staleness: int, steps: int, noise_std: float, seeds: int,
                mode: str = "none", threshold: float = 0.0, random_staleness: bool = False, seed: int = 0) -> dict:
    """θ_{t+1} = θ_t − η GAC(g_t, g_{t−1}), g_t = ∇f(θ_{t−s_t}) + noise_std·N(0, I), batched over seeds.

    s_t = staleness, or s_t ~ U{0..staleness} when random_staleness. GAC is ``gac.control`` (reference
    = previous raw gradient). Returns per step (seed-averaged): "grad_sq" E‖∇f(θ_t)‖², "kept_sq"
    E⟨∇f(θ_t), D_t ∇f(θ_t)⟩ (D_t the map GAC applied), "acted" fraction of seeds where GAC acted.
    """
    gen = torch.Generator().manual_seed(seed)
    cfg = None if mode == "none" else gac.GACConfig(threshold=threshold, mode=mode)
    theta = problem.x0.expand(seeds, -1).clone()
    history = [theta.clone() for _ in range(staleness + 1)]  # history[k] = θ_{t−k}; first steps use θ_0
    prev_grad = torch.zeros_like(theta)
    rows = torch.arange(seeds)
    grad_sq, kept_sq, acted = [], [], []
    for _ in range(steps):
        true_grad = problem.gradient(theta)
        if random_staleness:
            delays = torch.randint(0, staleness + 1, (seeds,), generator=gen)
            stale = torch.stack(history)[delays, rows]
        else:
            stale = history[staleness]
        grad = problem.gradient(stale) + noise_std * torch.randn(theta.shape, generator=gen, dtype=theta.dtype)
        sq = (true_grad * true_grad).sum(-1)
        if cfg is None:
            applied, removed = grad, torch.zeros(seeds, dtype=theta.dtype)
            act = torch.zeros(seeds)
        else:
            out = gac.control(grad, prev_grad, cfg)
            applied = out.grad
            act = (out.regime == gac.ACT).to(theta.dtype)
            removed_fraction = act * (1.0 - out.parallel_scale)  # c_t: D_t = I − c_t d̂d̂ᵀ
            ref_norm = prev_grad.norm(dim=-1).clamp_min(1e-300)
            along = (true_grad * prev_grad).sum(-1) / ref_norm
            removed = removed_fraction * along * along
        grad_sq.append(sq.mean())
        kept_sq.append((sq - removed).mean())
        acted.append(act.mean())
        prev_grad = grad
        theta = theta - eta * applied
        history = [theta.clone()] + history[:-1]
    return {"grad_sq": torch.stack(grad_sq).numpy(), "kept_sq": torch.stack(kept_sq).numpy(),
            "acted": torch.stack(acted).numpy()}


def check_bound(settings, dim: int = 50, steps: int = 300, seeds: int = 32) -> list[dict]:
    """For each setting dict(kind, staleness, eta_fraction, mode, threshold, noise_std[, random_staleness]): compare.

    η = eta_fraction · max_step_size(L, s). Measured: min_t of the seed-averaged ‖∇f(θ_t)‖² and the
    average over t (the quantity the proof bounds). κ̄ is measured from the same run (Σ kept / Σ grad_sq,
    seed-averaged). σ² = P·noise_std², σ_∥² = noise_std² (isotropic noise, reference independent of ξ_t).
    Rows carry "bound", "measured_min", "measured_avg", "tightness" = bound / measured_min,
    "tightness_avg" = bound / measured_avg, "retention" (κ̄) and "acted" (share of steps GAC acted on).
    """
    rows = []
    for k, setting in enumerate(settings):
        problem = make_problem(setting["kind"], dim, seed=100 + k)
        L = problem.smoothness
        s = setting["staleness"]
        eta = setting["eta_fraction"] * max_step_size(L, s)
        noise_std = setting["noise_std"]
        run = run_gac_sgd(problem, eta, s, steps, noise_std, seeds, setting["mode"], setting.get("threshold", 0.0),
                          setting.get("random_staleness", False), seed=k)
        retention = float(run["kept_sq"].sum() / run["grad_sq"].sum())
        delta_f = float(problem.value(problem.x0))
        bound = convergence_bound(L, delta_f, dim * noise_std**2, eta, s, steps, setting["mode"],
                                  sigma_par2=noise_std**2 if setting["mode"] != "none" else 0.0,
                                  retention=retention)
        measured_min = float(run["grad_sq"].min())
        rows.append({**setting, "eta": eta, "L": L, "bound": bound, "measured_min": measured_min,
                     "measured_avg": float(run["grad_sq"].mean()), "tightness": bound / measured_min,
                     "tightness_avg": bound / float(run["grad_sq"].mean()),
                     "retention": retention, "acted": float(run["acted"].mean())})
    return rows


DEFAULT_SETTINGS = [
    {"kind": kind, "staleness": s, "eta_fraction": frac, "mode": mode, "threshold": tau, "noise_std": noise}
    for noise in (0.1, 1.0)
    for kind in ("quadratic", "wavy")
    for s in (0, 2, 8)
    for frac in (0.1, 0.5)
    for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3))
] + [{"kind": kind, "staleness": 8, "eta_fraction": 0.5, "mode": mode, "threshold": tau, "noise_std": 1.0,
      "random_staleness": random}
     for kind in ("quadratic", "wavy") for mode, tau in (("project", 0.5), ("none", 0.0), ("project", 0.0))
     for random in (False, True) if random or mode == "project" and tau == 0.5]
"""The grid of ``check_bound`` used by the tests and the tightness table: noise_std ∈ {0.1 (gradient-dominated),
1.0 (noise-dominated)} × 2 problems × s ∈ {0, 2, 8} × η ∈ {0.1, 0.5}·η_max(s) × {none, project τ=0, cap τ=0.3},
plus project τ=0.5 at s = 8 and bounded-random s_t ~ U{0..8} (none, project τ=0)."""
