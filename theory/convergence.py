"""Convergence of SGD with bounded staleness and GAC applied to each stochastic gradient (v2: a-priori).

Theorem (statement, assumptions and proof in theory/README.md, §3): L-smooth f ≥ f*, g_t = ∇f(θ_{t−s_t}) + ξ_t,
s_t ≤ s independent of the noise, E[ξ_t | F_t] = 0, E‖ξ_t‖² ≤ σ², E⟨d̂_t, ξ_t⟩² ≤ σ_∥²; GAC in mode "project" or
"cap" (any threshold). If φ = Lη + (1+Lη)(1+γ)L²η²s² ≤ 1 for some γ > 0, the kept energy
K = (1/T) Σ_t E⟨∇f(θ_t), D_t ∇f(θ_t)⟩ satisfies K ≤ (b + √(b² + A))² with b = (1+Lη)σ_∥ and
  A = 2Δ/(ηT) + Lησ² + Lησ_∥²/4 + (1+Lη)(1+1/γ)L²η²(2sσ² + s²σ_∥²/2);
without GAC (D = I, K = (1/T)Σ E‖∇f‖²): K ≤ 2Δ/(ηT) + Lησ² + (1+Lη)(1+1/γ)L²η² s σ². Nothing is measured
after the fact. ``convergence_bound`` is the theory curve of ``fig7_bound``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp
import torch

import gac

MODES = ("none", "project", "cap")

# ---------------------------------------------------------------------------------------------
# The algebra (sympy)
# ---------------------------------------------------------------------------------------------


def bound_expression() -> dict:
    """The v2 bound and its pieces as sympy expressions in L, η, s, T, Δ, σ², σ_∥², γ (GAC branch).

    Returns {"phi": φ (condition φ ≤ 1), "gamma_opt": the γ that solves φ = 1 (the bound decreases in γ, so
    this is the optimum), "A", "b", "bound": (b + √(b² + A))², "bound_none": the no-GAC bound,
    "symbols": dict}. An independent path to ``convergence_bound`` (which is numpy).
    """
    L, eta, s, T, delta_f, sigma2, sigma_par2, gamma = sp.symbols(
        "L eta s T Delta sigma2 sigma_par2 gamma", positive=True)
    phi = L * eta + (1 + L * eta) * (1 + gamma) * L**2 * eta**2 * s**2
    gamma_opt = sp.solve(sp.Eq(phi, 1), gamma)[0]
    stale = (1 + L * eta) * (1 + 1 / gamma) * L**2 * eta**2
    base = 2 * delta_f / (eta * T) + L * eta * sigma2
    a_gac = base + L * eta * sigma_par2 / 4 + stale * (2 * s * sigma2 + s**2 * sigma_par2 / 2)
    b = (1 + L * eta) * sp.sqrt(sigma_par2)
    return {"phi": phi, "gamma_opt": sp.simplify(gamma_opt), "A": a_gac, "b": b,
            "bound": (b + sp.sqrt(b**2 + a_gac)) ** 2, "bound_none": base + stale * s * sigma2,
            "symbols": {"L": L, "eta": eta, "s": s, "T": T, "Delta": delta_f, "sigma2": sigma2,
                        "sigma_par2": sigma_par2, "gamma": gamma}}


def stationary_gradient_energy_series(staleness: int, order: int = 2) -> sp.Expr:
    """Tightness example: exact E[f'(θ)²]/σ² of plain delayed SGD on f = ½λθ² (1-d, Gaussian noise), series in a = ηλ.

    E[f'²] = σ²·SNR_s(a) = σ²(a/2 + (2s+1)a²/4 + O(a³)) (from ``cosine.gradient_autocovariance_symbolic``). The
    v2 bound's noise terms, Lησ² + O(L²η² s σ²) as T → ∞, match this in both orders: the ratio → 2 as η → 0 and
    the a² coefficient grows like s, not s² — a bound with s² is loose by a factor of order s.
    """
    from theory.cosine import gradient_autocovariance_symbolic

    derived = gradient_autocovariance_symbolic(staleness)
    return sp.expand(sp.series(derived["snr"], derived["a"], 0, order + 1).removeO())


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------


def max_step_size(L: float, staleness: int) -> float:
    """Largest η with Lη + (1+Lη)L²η²s² < 1 (γ → 0): x = Lη is the positive root of s²x³ + s²x² + x − 1.

    1/L at s = 0.
    """
    if staleness == 0:
        return 1.0 / L
    roots = np.roots([staleness**2, staleness**2, 1.0, -1.0])
    return float(roots[(np.abs(roots.imag) < 1e-12) & (roots.real > 0)].real.min()) / L


def gac_terms(L: float, eta: float, staleness: int, sigma2: float, sigma_par2: float) -> tuple[float, float, float]:
    """(b, extra, window) of the GAC branch: b = (1+Lη)σ_∥ (decision bias, paired with the kept energy),
    extra = Lησ_∥²/4 (bias inside the second-order term), window = 2sσ² + s²σ_∥²/2 (martingale window noise plus
    the window's bias)."""
    return ((1 + L * eta) * np.sqrt(sigma_par2), L * eta * sigma_par2 / 4,
            2 * staleness * sigma2 + staleness**2 * sigma_par2 / 2)


def convergence_bound(L: float, delta_f: float, sigma2: float, eta: float, staleness: int, T: int,
                      mode: str = "project", sigma_par2: float = 0.0) -> float:
    """A-priori upper bound on the kept energy (1/T)Σ_t E⟨∇f(θ_t), D_t∇f(θ_t)⟩ (= (1/T)Σ E‖∇f(θ_t)‖² without GAC).

    L: smoothness; delta_f: f(θ_0) − f*; sigma2: E‖ξ‖² bound; eta: step size; staleness: s ≥ s_t; T: steps;
    mode: "none" (plain delayed SGD), "project" or "cap" (GAC, any threshold τ); sigma_par2: bound on E⟨d̂, ξ⟩²
    along the reference direction (σ²/P for isotropic noise). γ is set to its optimum, the root of φ = 1.
    Returns inf if η ≥ ``max_step_size``. Skip mode is not covered (see README §3).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; skip is not covered by the theorem, got {mode!r}")
    if eta <= 0 or L <= 0 or T <= 0 or sigma2 < 0 or sigma_par2 < 0 or staleness < 0:
        raise ValueError("convergence_bound needs eta, L, T > 0 and sigma2, sigma_par2, staleness >= 0")
    if eta >= max_step_size(L, staleness):
        return float("inf")
    base = 2.0 * delta_f / (eta * T) + L * eta * sigma2
    if mode == "none":
        b, extra, window = 0.0, 0.0, staleness * sigma2
    else:
        b, extra, window = gac_terms(L, eta, staleness, sigma2, sigma_par2)
    stale = 0.0
    if staleness > 0:
        gamma = (1.0 - L * eta) / ((1.0 + L * eta) * L**2 * eta**2 * staleness**2) - 1.0
        stale = (1.0 + L * eta) * (1.0 + 1.0 / gamma) * L**2 * eta**2 * window
    total = base + extra + stale
    return float((b + np.sqrt(b * b + total)) ** 2)


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

    η = eta_fraction · max_step_size(L, s). σ² = P·noise_std², σ_∥² = noise_std² (isotropic noise, reference
    F_t-measurable); the bound uses nothing measured on the run. Rows carry "bound", "measured_kept" (average
    over t of the seed-averaged kept energy ⟨∇f, D∇f⟩, the quantity bounded), "measured_avg" and "measured_min"
    (of E‖∇f‖²), "bound_over_kept" = bound / measured_kept, "retention" (Σ kept / Σ E‖∇f‖², for information) and
    "acted" (share of steps GAC acted on).
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
        delta_f = float(problem.value(problem.x0))
        bound = convergence_bound(L, delta_f, dim * noise_std**2, eta, s, steps, setting["mode"],
                                  sigma_par2=noise_std**2)
        kept = float(run["kept_sq"].mean())
        rows.append({**setting, "eta": eta, "L": L, "bound": bound, "measured_kept": kept,
                     "measured_min": float(run["grad_sq"].min()), "measured_avg": float(run["grad_sq"].mean()),
                     "bound_over_kept": bound / kept, "retention": float(run["kept_sq"].sum() / run["grad_sq"].sum()),
                     "acted": float(run["acted"].mean())})
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


def decision_bias_floor_example(etas=(0.1, 0.03, 0.01), dim: int = 50, steps: int = 3000, seeds: int = 16,
                                noise_std: float = 1.0, seed: int = 0) -> list[dict]:
    """Lower-bound example for the decision-bias term: within the theorem's assumptions it need not vanish as η → 0.

    f = ½‖θ‖² (L = 1), θ_0 = 0 (Δ = 0), isotropic noise. GAC project (``gac.control``) with the F_t-measurable
    reference d_t = ∇f(θ_t) and threshold τ_t = ‖∇_t‖/√(‖∇_t‖² + Pσ_n²): in high dimension ‖g_t‖ ≈ √(‖∇_t‖² + Pσ_n²),
    so GAC acts when the noise along ∇ is positive and keeps only the steps whose noise pushes uphill. The drift
    along ∇ is −η(‖∇‖/2 − σ_n/√(2π)): uphill while ‖∇‖ < 0.8σ_n, whatever η. Plain SGD (same noise) for contrast.
    Rows: eta, "kept" (average of E⟨∇f, D∇f⟩ over the second half), "plain" (E‖∇f‖², no GAC), "bound" (v2).
    """
    gen = torch.Generator().manual_seed(seed)
    cfg = gac.GACConfig(threshold=0.0, mode="project")
    rows = []
    for eta in etas:
        theta_gac = torch.zeros(seeds, dim, dtype=torch.float64)
        theta_plain = torch.zeros_like(theta_gac)
        kept, plain = [], []
        for t in range(steps):
            noise = noise_std * torch.randn(theta_gac.shape, generator=gen, dtype=theta_gac.dtype)
            grad_norm_sq = (theta_gac * theta_gac).sum(-1)
            threshold = (grad_norm_sq / (grad_norm_sq + dim * noise_std**2)).sqrt()
            out = gac.control(theta_gac + noise, theta_gac, cfg, threshold=threshold)
            acted = (out.regime == gac.ACT).to(theta_gac.dtype)
            if t >= steps // 2:
                kept.append(((1.0 - acted) * grad_norm_sq).mean())  # d̂ = ∇̂: removing it keeps nothing of ∇
                plain.append((theta_plain * theta_plain).sum(-1).mean())
            theta_gac = theta_gac - eta * out.grad
            theta_plain = theta_plain - eta * (theta_plain + noise)
        rows.append({"eta": eta, "kept": float(torch.stack(kept).mean()), "plain": float(torch.stack(plain).mean()),
                     "bound": convergence_bound(1.0, 0.0, dim * noise_std**2, eta, 0, steps, "project",
                                                sigma_par2=noise_std**2)})
    return rows


def check_bound_expression(cases: int = 40, seed: int = 0) -> float:
    """Max relative difference between ``convergence_bound`` (numpy) and ``bound_expression`` (sympy, γ at its
    optimum) over random (L, Δ, σ², σ_∥², s, T, η < η_max) in both branches: an independent path to the formula."""
    rng = np.random.default_rng(seed)
    e = bound_expression()
    sym = e["symbols"]
    worst = 0.0
    for k in range(cases):
        L, staleness = float(rng.uniform(0.5, 5.0)), int(rng.integers(1, 17))
        values = {sym["L"]: L, sym["s"]: staleness, sym["T"]: int(rng.integers(10, 10000)),
                  sym["Delta"]: float(rng.uniform(0.0, 10.0)), sym["sigma2"]: float(rng.uniform(0.1, 50.0)),
                  sym["sigma_par2"]: float(rng.uniform(0.01, 2.0)),
                  sym["eta"]: float(rng.uniform(0.01, 0.99)) * max_step_size(L, staleness)}
        values[sym["gamma"]] = e["gamma_opt"].subs(values)
        mode = "none" if k % 2 else "project"
        exact = float((e["bound_none"] if mode == "none" else e["bound"]).subs(values))
        numeric = convergence_bound(L, float(values[sym["Delta"]]), float(values[sym["sigma2"]]),
                                    float(values[sym["eta"]]), staleness, int(values[sym["T"]]), mode,
                                    float(values[sym["sigma_par2"]]))
        worst = max(worst, abs(numeric - exact) / exact)
    return worst
