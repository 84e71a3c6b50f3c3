"""Convergence of SGD with bounded staleness and GAC applied to each stochastic gradient (v3: a-priori).

Theorem (statement, assumptions, proof and measured tightness in theory/README.md, §3): L-smooth f ≥ f*,
g_t = ∇f(θ_{t−s_t}) + ξ_t, s_t ≤ s independent of the noise, E[ξ_t | F_t] = 0, E‖ξ_t‖² ≤ σ², E⟨d̂_t, ξ_t⟩² ≤ σ_∥²;
GAC in mode "project" or "cap" (any threshold). If φ = Lη + (1+Lη)(1+γ)L²η²s² ≤ 1 for some γ > 0, the kept energy
K = (1/T) Σ_t E⟨∇f(θ_t), D_t ∇f(θ_t)⟩ satisfies K ≤ (b + √(b² + A))² with b = (1−Lη)σ_∥ and
  A = 2Δ/(ηT) + Lησ² + (1+Lη)(1+1/γ)L²η²(2sσ² + s²σ_∥²/2);
without GAC (D = I, K = (1/T)Σ E‖∇f‖²), if φ₀ = Lη + (1+γ)L²η²s² ≤ 1: K ≤ 2Δ/(ηT) + Lησ² + (1+1/γ)L²η² s σ².
Nothing is measured after the fact. ``convergence_bound`` is the theory curve of ``fig7_bound``; the ``check_*``
functions evaluate each inequality of the proof on sampled instances (not the formula a second time).
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
    """The v3 bound as sympy expressions in L, η, s, T, Δ, σ², σ_∥², γ: the statement in readable form (notebook).

    Returns {"phi": φ = Lη + (1+Lη)(1+γ)L²η²s² (GAC condition φ ≤ 1), "gamma_opt": the γ that solves φ = 1 (the
    bound decreases in γ, so this is the optimum), "A", "b", "bound": (b + √(b² + A))² (GAC branch),
    "bound_none": the no-GAC bound (its own γ, from φ₀ = Lη + (1+γ)L²η²s² ≤ 1), "symbols": dict}. Not a check of
    ``convergence_bound``: the checks evaluate the proof's steps (``check_decision_bias``, ``check_one_step``,
    ``window_noise_energy``, ``noise_term_coefficients``).
    """
    L, eta, s, T, delta_f, sigma2, sigma_par2, gamma = sp.symbols(
        "L eta s T Delta sigma2 sigma_par2 gamma", positive=True)
    phi = L * eta + (1 + L * eta) * (1 + gamma) * L**2 * eta**2 * s**2
    gamma_opt = sp.solve(sp.Eq(phi, 1), gamma)[0]
    base = 2 * delta_f / (eta * T) + L * eta * sigma2
    a_gac = base + (1 + L * eta) * (1 + 1 / gamma) * L**2 * eta**2 * (2 * s * sigma2 + s**2 * sigma_par2 / 2)
    b = (1 - L * eta) * sp.sqrt(sigma_par2)
    return {"phi": phi, "gamma_opt": sp.simplify(gamma_opt), "A": a_gac, "b": b,
            "bound": (b + sp.sqrt(b**2 + a_gac)) ** 2,
            "bound_none": base + (1 + 1 / gamma) * L**2 * eta**2 * s * sigma2,
            "symbols": {"L": L, "eta": eta, "s": s, "T": T, "Delta": delta_f, "sigma2": sigma2,
                        "sigma_par2": sigma_par2, "gamma": gamma}}


def stationary_gradient_energy_series(staleness: int, order: int = 2) -> sp.Expr:
    """Tightness example: exact E[f'(θ)²]/σ² of plain delayed SGD on f = ½λθ² (1-d, Gaussian noise), series in a = ηλ.

    E[f'²] = σ²·SNR_s(a) = σ²(a/2 + (2s+1)a²/4 + O(a³)) (from ``cosine.gradient_autocovariance_symbolic``). The
    bound's noise terms, Lησ² + L²η²sσ² + O(η³) as T → ∞, match this in both orders up to constant factors (2 and
    4s/(2s+1) < 2): the a² coefficient grows like s, not s².
    """
    from theory.cosine import gradient_autocovariance_symbolic

    derived = gradient_autocovariance_symbolic(staleness)
    return sp.expand(sp.series(derived["snr"], derived["a"], 0, order + 1).removeO())


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------


def max_step_size(L: float, staleness: int, mode: str = "project") -> float:
    """Largest η the theorem allows (γ → 0), for the GAC branch unless mode="none".

    GAC: Lη + (1+Lη)L²η²s² < 1, x = Lη the positive root of s²x³ + s²x² + x − 1. No GAC: Lη + L²η²s² < 1,
    x = (√(1 + 4s²) − 1)/(2s²). 1/L at s = 0.
    """
    if staleness == 0:
        return 1.0 / L
    if mode == "none":
        return (np.sqrt(1.0 + 4.0 * staleness**2) - 1.0) / (2.0 * staleness**2) / L
    roots = np.roots([staleness**2, staleness**2, 1.0, -1.0])
    return float(roots[(np.abs(roots.imag) < 1e-12) & (roots.real > 0)].real.min()) / L


def gac_terms(L: float, eta: float, staleness: int, sigma2: float, sigma_par2: float) -> tuple[float, float]:
    """(b, window) of the GAC branch: b = (1−Lη)σ_∥ (decision bias, paired with the kept energy; proof step 1–2),
    window = 2sσ² + s²σ_∥²/2 (martingale window noise plus the window's bias; proof step 3)."""
    return (1 - L * eta) * np.sqrt(sigma_par2), 2 * staleness * sigma2 + staleness**2 * sigma_par2 / 2


def convergence_bound(L: float, delta_f: float, sigma2: float, eta: float, staleness: int, T: int,
                      mode: str = "project", sigma_par2: float = 0.0) -> float:
    """A-priori upper bound on the kept energy (1/T)Σ_t E⟨∇f(θ_t), D_t∇f(θ_t)⟩ (= (1/T)Σ E‖∇f(θ_t)‖² without GAC).

    L: smoothness; delta_f: f(θ_0) − f*; sigma2: E‖ξ‖² bound; eta: step size; staleness: s ≥ s_t; T: steps;
    mode: "none" (plain delayed SGD), "project" or "cap" (GAC, any threshold τ); sigma_par2: bound on E⟨d̂, ξ⟩²
    along the reference direction (σ²/P for isotropic noise). γ is set to its optimum, the root of φ = 1 (φ₀ = 1
    without GAC). Returns inf if η ≥ ``max_step_size(L, staleness, mode)``. Skip mode is not covered (README §3).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; skip is not covered by the theorem, got {mode!r}")
    if eta <= 0 or L <= 0 or T <= 0 or sigma2 < 0 or sigma_par2 < 0 or staleness < 0:
        raise ValueError("convergence_bound needs eta, L, T > 0 and sigma2, sigma_par2, staleness >= 0")
    if eta >= max_step_size(L, staleness, mode):
        return float("inf")
    base = 2.0 * delta_f / (eta * T) + L * eta * sigma2
    # Without GAC the error ‖e‖² enters the one-step inequality with coefficient 1; with GAC the bias cross term
    # adds Lη‖e‖² (proof step 2), hence the (1+Lη) in φ and in the staleness term.
    error_weight = 1.0 if mode == "none" else 1.0 + L * eta
    if mode == "none":
        b, window = 0.0, staleness * sigma2
    else:
        b, window = gac_terms(L, eta, staleness, sigma2, sigma_par2)
    stale = 0.0
    if staleness > 0:
        gamma = (1.0 - L * eta) / (error_weight * L**2 * eta**2 * staleness**2) - 1.0
        stale = error_weight * (1.0 + 1.0 / gamma) * L**2 * eta**2 * window
    total = base + stale
    return float((b + np.sqrt(b * b + total)) ** 2)


# ---------------------------------------------------------------------------------------------
# The proof's inequalities, evaluated on sampled instances (exact expectations over discrete noise laws)
# ---------------------------------------------------------------------------------------------


def _noise_law(rng: np.random.Generator, atoms: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A random mean-zero noise law with `atoms` points in R^dim: (points (atoms, dim), probabilities (atoms,))."""
    probs = rng.dirichlet(np.ones(atoms))
    points = rng.normal(size=(atoms, dim)) * rng.uniform(0.1, 3.0)
    return points - probs @ points, probs


def _adversarial_bias_law(rng: np.random.Generator, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The case that makes step 1 tight: two atoms along d̂ = e₀, +M with probability ε, −εM/(1−ε) otherwise, and
    c = 1 on the positive atom: β = σ_∥√(ε(1−ε)), kept energy (1−ε)p², so |pβ|/(σ_∥√K̄) = √ε → 1 as ε → 1."""
    eps = rng.uniform(0.5, 0.999)
    points = np.zeros((2, dim))
    points[0, 0], points[1, 0] = 1.0, -eps / (1 - eps)
    return points * rng.uniform(0.1, 3.0), np.array([eps, 1 - eps]), np.array([1.0, 0.0])


def _decisions(rng: np.random.Generator, kind: str, grads: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """c ∈ [0, 1] per noise atom: any function of the gradient is allowed (A4); "gac" uses ``gac.control``."""
    if kind == "random":
        return rng.uniform(0.0, 1.0, len(grads))
    if kind == "indicator":
        return (rng.uniform(size=len(grads)) < 0.5).astype(float)
    cfg = gac.GACConfig(threshold=float(rng.uniform(0.0, 0.9)), mode=kind)
    ref = torch.as_tensor(np.broadcast_to(reference, grads.shape).copy())
    out = gac.control(torch.as_tensor(grads), ref, cfg)
    return (1.0 - out.parallel_scale.numpy()) * (out.regime == gac.ACT).numpy()


def check_decision_bias(cases: int = 400, seed: int = 0) -> float:
    """Proof step 1 on sampled instances: max over cases of |p β| / (σ_∥ √K̄) (the lemma says ≤ 1).

    p = ⟨∇, d̂⟩, β = E[c X], X = ⟨d̂, ξ⟩, σ_∥² = E X², K̄ = ‖∇‖² − E[c] p², for random noise laws and decisions c
    (random, 0/1, real GAC), plus the adversarial two-atom law, where the ratio is √ε: the maximum near 1 shows the
    constant cannot be smaller.
    """
    rng = np.random.default_rng(seed)
    worst = 0.0
    for k in range(cases):
        dim = int(rng.integers(1, 6))
        reference = np.zeros(dim)
        reference[0] = 1.0
        grad = rng.normal(size=dim) if k % 2 else reference * rng.uniform(0.1, 3.0)
        if k % 4 == 3:
            points, probs, c = _adversarial_bias_law(rng, dim)
        else:
            points, probs = _noise_law(rng, int(rng.integers(2, 7)), dim)
            c = _decisions(rng, ("random", "indicator", "project", "cap")[k % 4], grad + points, reference)
        along = points @ reference
        p, beta, sigma_par = grad @ reference, probs @ (c * along), np.sqrt(probs @ along**2)
        kept = grad @ grad - (probs @ c) * p * p
        if sigma_par > 0 and kept > 0:
            worst = max(worst, abs(p * beta) / (sigma_par * np.sqrt(kept)))
    return worst


def check_one_step(cases: int = 600, mode: str = "project", seed: int = 0) -> dict:
    """Proof step 2 on sampled instances: exact E f(θ_{t+1}) − f(θ_t) against the one-step inequality.

    f = ½θᵀHθ with eig(H) ∈ [−L, L] (L-smooth, non-convex allowed); random ∇ = Hθ_t, u = Hθ_stale, reference d̂,
    mean-zero discrete noise law, and a decision c ∈ [0, 1] per atom (random, 0/1, ``gac.control``; c ≡ 0 for
    mode "none"), with b from ``gac_terms``. Right side: (η/2)[−K̄ − (1−Lη)E‖u‖²_D + w‖e‖² + Lησ²] + ηb√K̄, w = 1+Lη
    (GAC) or 1 (none). A quarter of the cases are the adversarial law of ``_adversarial_bias_law`` with H = LI,
    u = ∇ ∥ d̂. Returns {"max_excess": max (left − right)/(η(‖∇‖² + ‖u‖² + σ²)) (≤ 0 if step 2 holds),
    "bias_used": max (left − right + ηb√K̄)/(ηb√K̄) (≤ 1; near 1: b cannot be smaller)}.
    """
    rng = np.random.default_rng(seed)
    max_excess, bias_used = -np.inf, 0.0
    for k in range(cases):
        L = float(rng.uniform(0.5, 3.0))
        eta = float(rng.uniform(0.0, 1.0) ** 2) / L  # many small Lη: where the bias term dominates
        dim = int(rng.integers(1, 6))
        reference = np.zeros(dim)
        reference[0] = 1.0
        adversarial = k % 4 == 3 and mode != "none"
        if adversarial:
            hessian = L * np.eye(dim)
            grad = reference * rng.uniform(0.5, 3.0)
            stale_grad = grad
            points, probs, c = _adversarial_bias_law(rng, dim)
        else:
            basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
            eigenvalues = rng.uniform(-L, L, dim)
            eigenvalues[0] = L
            hessian = basis @ np.diag(eigenvalues) @ basis.T
            grad, stale_grad = hessian @ rng.normal(size=dim), hessian @ rng.normal(size=dim)
            points, probs = _noise_law(rng, int(rng.integers(2, 7)), dim)
            kind = ("random", "indicator", "project", "cap")[k % 4]
            c = np.zeros(len(probs)) if mode == "none" else _decisions(rng, kind, stale_grad + points, reference)
        # D_j = I − c_j d̂d̂ᵀ per atom; the step is −η D_j g_j, g_j = u + ξ_j
        grads = stale_grad + points
        steps = -eta * (grads - np.outer(c * (grads @ reference), reference))
        left = probs @ (steps @ grad + 0.5 * np.einsum("ji,ik,jk->j", steps, hessian, steps))
        error = stale_grad - grad
        p, q = grad @ reference, stale_grad @ reference
        kept = grad @ grad - (probs @ c) * p * p
        kept_stale = stale_grad @ stale_grad - (probs @ c) * q * q
        sigma2, sigma_par2 = probs @ (points**2).sum(1), probs @ (points @ reference) ** 2
        b = 0.0 if mode == "none" else gac_terms(L, eta, 0, sigma2, sigma_par2)[0]
        weight = 1.0 if mode == "none" else 1.0 + L * eta
        bias = eta * b * np.sqrt(max(kept, 0.0))
        rest = 0.5 * eta * (-kept - (1 - L * eta) * kept_stale + weight * error @ error + L * eta * sigma2)
        max_excess = max(max_excess, (left - rest - bias) / (eta * (grad @ grad + stale_grad @ stale_grad + sigma2)))
        if bias > 0:
            bias_used = max(bias_used, (left - rest) / bias)
    return {"max_excess": float(max_excess), "bias_used": float(bias_used)}


def window_noise_energy(staleness: int, law: str, paths: int = 4000, dim: int = 50, seed: int = 0) -> float:
    """Proof step 3's quantity E‖Σ_{k∈W} D_k ξ_k‖² / σ² over a window of s steps, by Monte Carlo.

    law "gac": isotropic Gaussian noise in `dim` dimensions (σ² = dim), a fixed signal u = 2·1, real GAC
    (``gac.control``, project τ = 0, reference = previous raw gradient, fresh noise each step): inside (A1)–(A4).
    law "bias": the worst bias, one dimension, ξ = ±1 with c = 1 on +1 (β = 1/2 each step): E‖Σ‖² = (s + s²)/4.
    ``gac_terms``' window (2sσ² + s²σ_∥²/2) must be at least this, and a constant factor above it uniformly in s.
    """
    gen = torch.Generator().manual_seed(seed)
    if law == "bias":
        noise = torch.randint(0, 2, (paths, staleness), generator=gen, dtype=torch.float64) * 2 - 1
        return float((torch.where(noise > 0, 0.0, noise).sum(1) ** 2).mean())
    cfg = gac.GACConfig(threshold=0.0, mode="project")
    signal = torch.full((paths, dim), 2.0, dtype=torch.float64)
    previous = signal + torch.randn(paths, dim, generator=gen, dtype=torch.float64)
    total = torch.zeros(paths, dim, dtype=torch.float64)
    for _ in range(staleness):
        noise = torch.randn(paths, dim, generator=gen, dtype=torch.float64)
        grad = signal + noise
        out = gac.control(grad, previous, cfg)
        removed = (out.regime == gac.ACT).to(grad.dtype) * (1.0 - out.parallel_scale)  # c_k
        direction = previous / previous.norm(dim=1, keepdim=True)
        total += noise - (removed * (noise * direction).sum(1))[:, None] * direction  # D_k ξ_k
        previous = grad
    return float((total * total).sum(1).mean()) / dim


def noise_term_coefficients(staleness: int, mode: str, eta: float = 1e-3) -> dict:
    """First- and second-order coefficients in η of the stationary bound (T → ∞, Δ = 0, L = λ = σ² = 1, σ_∥ = 0)
    and of the exact stationary E[f'²] of plain delayed SGD on f = ½θ² (Lyapunov solve, ``cosine.snr``).

    Finite differences at η and 2η (B(0) = 0): c₁ ≈ (4B(η) − B(2η))/(2η), c₂ ≈ (B(2η) − 2B(η))/(2η²). The exact
    process is a GAC process with c ≡ 0, so both branches must lie above it. Returns {"bound": (c₁, c₂),
    "exact": (c₁, c₂)}; the theory: exact (1/2, (2s+1)/4), bound (1, s) without GAC and (1, 2s) with GAC.
    """
    from theory.cosine import snr

    def coefficients(value):
        one, two = value(eta), value(2 * eta)
        return (4 * one - two) / (2 * eta), (two - 2 * one) / (2 * eta**2)

    bound = coefficients(lambda h: convergence_bound(1.0, 0.0, 1.0, h, staleness, 10**15, mode, sigma_par2=0.0))
    return {"bound": bound, "exact": coefficients(lambda h: snr(h, [1.0], staleness))}

# ---------------------------------------------------------------------------------------------
# The numeric check: GAC-SGD with staleness on quadratics and a non-convex toy
# ---------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """A separable test objective f(x) = Σ_i λ_i ψ(x_i) with f* = 0.

    kind "quadratic": ψ = x²/2 (L = max λ); kind "wavy": ψ = x²/2 + 3 sin²x, non-convex (ψ'' = 1 + 6 cos 2x
    ∈ [−5, 7], so L = 7 max λ) with spurious stationary points where x + 3 sin 2x = 0: |x| ≈ 1.918 (a local
    maximum of ψ) and |x| ≈ 2.613 (a local minimum).
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


def run_gac_sgd(problem: Problem, eta: float, staleness: int, steps: int, noise_std: float, seeds: int, mode: str,
                threshold: float = 0.0, random_staleness: bool = False, seed: int = 0) -> dict:
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
        run = run_gac_sgd(problem, eta, s, steps, noise_std, seeds, setting["mode"], setting["threshold"],
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


def decision_bias_floor_example(etas, dim: int, steps: int, seeds: int, noise_std: float = 1.0,
                                seed: int = 0) -> list[dict]:
    """Lower-bound example for the decision-bias term: within the theorem's assumptions it need not vanish as η → 0.

    f = ½‖θ‖² (L = 1), θ_0 = 0 (Δ = 0), isotropic noise. GAC project (``gac.control``) with the F_t-measurable
    reference d_t = ∇f(θ_t) and threshold τ_t = ‖∇_t‖/√(‖∇_t‖² + Pσ_n²): in high dimension ‖g_t‖ ≈ √(‖∇_t‖² + Pσ_n²),
    so GAC acts when the noise along ∇ is positive and keeps only the steps whose noise pushes uphill. The drift
    along ∇ is −η(‖∇‖/2 − σ_n/√(2π)): uphill while ‖∇‖ < 0.8σ_n, whatever η. Plain SGD (same noise) for contrast.
    Rows: eta, "kept" (average of E⟨∇f, D∇f⟩ over the second half), "plain" (E‖∇f‖², no GAC), "bound" (v2).
    """
    gen = torch.Generator().manual_seed(seed)
    cfg = gac.GACConfig(threshold=0.0, mode="project")
    step = torch.tensor(etas, dtype=torch.float64)[:, None, None]  # every η in one batch: (etas, seeds, dim)
    theta_gac = torch.zeros(len(etas), seeds, dim, dtype=torch.float64)
    theta_plain = torch.zeros_like(theta_gac)
    kept, plain = [], []
    for t in range(steps):
        noise = noise_std * torch.randn(theta_gac.shape, generator=gen, dtype=theta_gac.dtype)
        grad_norm_sq = (theta_gac * theta_gac).sum(-1)
        threshold = (grad_norm_sq / (grad_norm_sq + dim * noise_std**2)).sqrt()
        out = gac.control(theta_gac + noise, theta_gac, cfg, threshold=threshold)
        acted = (out.regime == gac.ACT).to(theta_gac.dtype)
        if t >= steps // 2:
            kept.append(((1.0 - acted) * grad_norm_sq).mean(-1))  # d̂ = ∇̂: removing it keeps nothing of ∇
            plain.append((theta_plain * theta_plain).sum(-1).mean(-1))
        theta_gac = theta_gac - step * out.grad
        theta_plain = theta_plain - step * (theta_plain + noise)
    kept, plain = torch.stack(kept).mean(0), torch.stack(plain).mean(0)
    rows = []
    for k, eta in enumerate(etas):
        rows.append({"eta": eta, "kept": float(kept[k]), "plain": float(plain[k]),
                     "bound": convergence_bound(1.0, 0.0, dim * noise_std**2, eta, 0, steps, "project",
                                                sigma_par2=noise_std**2)})
    return rows


# ---------------------------------------------------------------------------------------------
# Tightness at stationarity, and runs outside the assumptions
# ---------------------------------------------------------------------------------------------


def stationary_tightness(fractions=(0.1, 0.03, 0.01, 0.003), stalenesses=(0, 4), modes=("none", "project"),
                         dim: int = 50, seeds: int = 8, noise_std: float = 1.0, transient_steps: int = 300,
                         min_steps: int = 5000, seed: int = 0) -> list[dict]:
    """bound / kept energy in the transient (T = 300 from θ_0 ~ U(−3, 3)^P) and at stationarity (a long run).

    Quadratic with λ_i evenly spaced in [0.5, 1] (the slowest mode mixes in 1/(0.5η) steps), isotropic noise,
    GAC project τ = 0 with the previous raw gradient as reference (what GAC uses). The stationary run starts at
    θ_0 = 0 (Δ = 0, so its bound is the T → ∞ one: Lησ² + staleness term + decision-bias floor), lasts
    T = max(min_steps, 5/(ηλ_min)) steps and is averaged over its second half (the variance's deficit there is
    below e^{−5}). Rows: staleness, mode, fraction, eta, steps, transient_/stationary_ kept, bound and bound/kept ratio.
    """
    curvatures = torch.linspace(0.5, 1.0, dim, dtype=torch.float64)
    x0 = 6.0 * torch.rand(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) - 3.0
    sigma2, sigma_par2 = dim * noise_std**2, noise_std**2
    rows = []
    for staleness in stalenesses:
        for mode in modes:
            for fraction in fractions:
                eta = fraction * max_step_size(1.0, staleness)
                steps = max(min_steps, int(5.0 / (eta * 0.5)))
                start = Problem("quadratic", curvatures, x0)
                transient = float(run_gac_sgd(start, eta, staleness, transient_steps, noise_std, seeds, mode,
                                              seed=seed)["kept_sq"].mean())
                transient_bound = convergence_bound(1.0, float(start.value(x0)), sigma2, eta, staleness,
                                                    transient_steps, mode, sigma_par2)
                run = run_gac_sgd(Problem("quadratic", curvatures, torch.zeros_like(x0)), eta, staleness, steps,
                                  noise_std, seeds, mode, seed=seed)
                stationary = float(run["kept_sq"][steps // 2:].mean())
                stationary_bound = convergence_bound(1.0, 0.0, sigma2, eta, staleness, steps, mode, sigma_par2)
                rows.append({"staleness": staleness, "mode": mode, "fraction": fraction, "eta": eta, "steps": steps,
                             "transient_kept": transient, "transient_bound": transient_bound,
                             "transient_ratio": transient_bound / transient, "stationary_kept": stationary,
                             "stationary_bound": stationary_bound, "stationary_ratio": stationary_bound / stationary})
    return rows


ASSUMPTION_CASES = {
    "independent": ("inside", "fresh noise each step, reference = previous raw gradient"),
    "minibatches": ("inside", "2 minibatches of one rollout, one pass (the LLM trainer): fresh noise per minibatch, "
                              "both at the rollout's θ (delays 0, 1; bound with s = 1)"),
    "epochs": ("A3", "4 epochs over one minibatch: each noise draw used for 4 consecutive steps"),
    "epochs_minibatches": ("A3", "2 minibatches × 4 epochs of one rollout: noise ξ¹ξ²ξ¹ξ²…, 8 steps per rollout"),
    "reference_uses_noise": ("A4", "reference d_t = ∇̂_t + ξ̂_t⊥, built from the current noise"),
    "delay_after_noise": ("A2", "s_t ∈ {0..4} picked after ξ_t is drawn: the delay whose applied step descends least"),
}
"""case → (assumption it breaks, or "inside"; what the run does). ``run_assumption_case`` runs them."""


def run_assumption_case(case: str, mode: str, eta: float = 0.05, dim: int = 50, steps: int = 2000, seeds: int = 8,
                        noise_std: float = 1.0, seed: int = 0) -> dict:
    """Kept energy of one run inside or outside the theorem's assumptions, against the bound it would claim.

    f = ½‖θ‖² (L = 1), θ_0 = 0 (Δ = 0), noise_std·N(0, I) per draw (σ² = P·noise_std², σ_∥² = noise_std²), GAC
    project/cap τ = 0 with the previous raw gradient as reference (mode "none": no GAC). ``ASSUMPTION_CASES`` says
    what each case changes. Returns {"case", "mode", "breaks", "staleness" (the s of the bound), "kept" (average of
    E⟨∇f, D∇f⟩ over the second half), "bound" (T = steps), "ratio" = kept/bound (> 1: the claim fails)}.
    """
    if case not in ASSUMPTION_CASES or mode not in MODES:
        raise ValueError(f"case must be one of {list(ASSUMPTION_CASES)} and mode one of {MODES}")
    gen = torch.Generator().manual_seed(seed)
    minibatches, epochs = {"minibatches": (2, 1), "epochs": (1, 4), "epochs_minibatches": (2, 4)}.get(case, (1, 1))
    rollout = minibatches * epochs
    staleness = {"minibatches": 1, "delay_after_noise": 4}.get(case, 0)
    cfg = None if mode == "none" else gac.GACConfig(threshold=0.0, mode=mode)
    theta = torch.zeros(seeds, dim, dtype=torch.float64)
    history = [theta] * (staleness + 1)  # history[k] = θ_{t−k}
    previous = torch.zeros_like(theta)
    kept = []
    for t in range(steps):
        if t % rollout == 0:
            draws = noise_std * torch.randn(minibatches, seeds, dim, generator=gen, dtype=theta.dtype)
        noise = draws[t % minibatches]
        grad_now = theta  # ∇f(θ_t)
        reference = previous
        if case == "reference_uses_noise":
            norm = grad_now.norm(dim=-1, keepdim=True)
            unit = grad_now / norm.clamp_min(1e-300)  # ∇̂
            across = noise - (noise * unit).sum(-1, keepdim=True) * unit  # ξ⊥: the noise's part orthogonal to ∇
            reference = torch.where(norm > 0, unit + across / across.norm(dim=-1, keepdim=True), 0.0)  # 0 at ∇ = 0
        if case == "delay_after_noise":
            candidates = torch.stack(history) + noise  # g for each delay k = 0..s
            applied = candidates if cfg is None else gac.control(candidates, reference.expand_as(candidates), cfg).grad
            pick = (applied * grad_now).sum(-1).argmin(0)  # the delay that descends least, chosen knowing ξ_t
            grad = candidates[pick, torch.arange(seeds)]
        else:
            grad = history[t % rollout if case == "minibatches" else 0] + noise
        sq = (grad_now * grad_now).sum(-1)
        if cfg is None:
            applied, removed = grad, torch.zeros_like(sq)
        else:
            out = gac.control(grad, reference, cfg)
            applied = out.grad
            c = (out.regime == gac.ACT).to(theta.dtype) * (1.0 - out.parallel_scale)
            along = (grad_now * reference).sum(-1) / reference.norm(dim=-1).clamp_min(1e-300)
            removed = c * along * along
        if t >= steps // 2:
            kept.append((sq - removed).mean())
        previous = grad
        theta = theta - eta * applied
        history = [theta] + history[:-1]
    value = float(torch.stack(kept).mean())
    bound = convergence_bound(1.0, 0.0, dim * noise_std**2, eta, staleness, steps, mode, noise_std**2)
    return {"case": case, "mode": mode, "breaks": ASSUMPTION_CASES[case][0], "staleness": staleness, "kept": value,
            "bound": bound, "ratio": value / bound}
