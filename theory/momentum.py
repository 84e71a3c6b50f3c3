"""Staleness as implicit momentum (cf. Mitliagkas et al., "Asynchrony begets momentum", 2016), and GAC on it.

Geometric staleness gives heavy-ball momentum exactly (in the mean); fixed staleness s gives an effective
momentum in the dominant mode, μ_eff = z₁z₂ (product of the two largest roots of z^{s+1} − z^s + a). GAC's
projection, in the high-dimensional mean-field picture, filters the gradient by (1 − ρ z⁻¹), which lowers
μ_eff and widens the stable range of a.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
import torch

import gac
from theory.gac_stability import gac_stability_boundary
from theory.stability import stability_boundary_closed_form


def geometric_staleness_momentum() -> dict:
    """Sympy: s_t ~ Geometric, P(s = k) = (1−μ)μ^k, gives E x_{t+1} = E x_t + μ(E x_t − E x_{t−1}) − a(1−μ) E x_t.

    With characteristic function z − 1 + a(1−μ) Σ_k μ^k z^{−k} = z − 1 + a(1−μ) z/(z − μ), multiplying by
    (z − μ) gives the heavy-ball polynomial z² − (1 + μ − a(1−μ)) z + μ. Returns both polynomials and their
    difference (0 if the statement is right).
    """
    z, a, mu, ratio, k = sp.symbols("z a mu r k")
    geometric = sp.summation(ratio**k, (k, 0, sp.oo)).args[0][0]  # Piecewise((1/(1 − r), |r| < 1), ...): 1/(1 − r)
    kernel = sp.simplify((1 - mu) * geometric.subs(ratio, mu / z))  # Σ_k P(s=k) z^{−k}, |μ/z| < 1
    delayed = sp.simplify((z - 1 + a * kernel) * (z - mu))
    heavy_ball = z**2 - (1 + mu - a * (1 - mu)) * z + mu
    return {"delayed": sp.expand(delayed), "heavy_ball": heavy_ball,
            "difference": sp.simplify(sp.expand(delayed - heavy_ball)), "symbols": (z, a, mu)}


def check_geometric_momentum(a: float, mu: float, steps: int, paths: int, history: int = 80, *, seed: int) -> dict:
    """Mean of x_t under random geometric staleness (Monte Carlo) and the exact kernel recursion vs heavy ball.

    Pre-history x_{−k} = x_0 = 1 (a delay reaching past the stored history reads that value, so the Monte Carlo
    is exact); the kernel sum stops after history + steps terms (weight μ^{history+steps+1} left out). Returns
    "kernel_error": max |kernel recursion − heavy ball| and "mc_max_z": max |MC mean − heavy ball| / stderr.
    """
    rng = np.random.default_rng(seed)
    heavy = np.empty(steps + 1)
    heavy[0], heavy[1] = 1.0, 1.0 - a
    for t in range(1, steps):
        heavy[t + 1] = heavy[t] + mu * (heavy[t] - heavy[t - 1]) - a * (1 - mu) * heavy[t]
    weights = (1 - mu) * mu ** np.arange(history + steps + 1)
    kernel = [1.0]
    for t in range(steps):
        past = np.array([kernel[t - k] if t - k >= 0 else 1.0 for k in range(history + steps + 1)])
        kernel.append(kernel[t] - a * float(weights @ past))
    traj = np.ones((paths, history + steps + 1))  # column j holds x_{j − history}
    for t in range(steps):
        delays = np.minimum(rng.geometric(1 - mu, size=paths) - 1, history + t)
        now = history + t
        traj[:, now + 1] = traj[:, now] - a * traj[np.arange(paths), now - delays]
    mc = traj[:, history:]
    stderr = mc.std(0, ddof=1) / np.sqrt(paths)
    z = np.abs(mc.mean(0) - heavy)[2:] / (stderr[2:] + 1e-15)
    return {"kernel_error": float(np.abs(np.array(kernel) - heavy).max()), "mc_max_z": float(z.max())}


def delayed_roots(a: float, staleness: int, rho: float) -> np.ndarray:
    """The roots of z^{s+2} − z^{s+1} + a z − aρ (ρ = 0: of z^{s+1} − z^s + a, and 0), largest modulus first."""
    coeffs = np.zeros(staleness + 3)
    coeffs[0], coeffs[1] = 1.0, -1.0
    coeffs[-2] += a
    coeffs[-1] -= a * rho
    roots = np.roots(coeffs)
    return roots[np.argsort(-np.abs(roots))]


def dominant_roots(a: float, staleness: int, rho: float) -> np.ndarray:
    """The two largest-modulus roots of z^{s+2} − z^{s+1} + a z − aρ (ρ = 0: of z^{s+1} − z^s + a)."""
    return delayed_roots(a, staleness, rho)[:2]


def effective_momentum(a: float, staleness: int, rho: float = 0.0) -> tuple[float, float]:
    """(μ_eff, a_eff): the heavy ball x_{t+1} = x_t − a_eff x_t + μ_eff (x_t − x_{t−1}) with the same dominant roots.

    μ_eff = z₁z₂, a_eff = (1 − z₁)(1 − z₂) for the two dominant roots of the delayed recursion
    x_{t+1} = x_t − a (x_{t−s} − ρ x_{t−s−1}) (ρ = 0: plain staleness; ρ > 0: GAC's mean-field filter).
    Exact for s = 1, ρ = 0 (μ_eff = a_eff = a); near the boundary a → a*(s), μ_eff → 1.
    """
    z1, z2 = dominant_roots(a, staleness, rho)
    return float((z1 * z2).real), float(((1 - z1) * (1 - z2)).real)


def check_effective_momentum(cases=((2, 0.5), (2, 0.9), (4, 0.7), (8, 0.5), (8, 0.95)), seed: int = 0) -> float:
    """Least-squares fit of heavy-ball coefficients to a simulated late trajectory of x_{t+1} = x_t − a x_{t−s}.

    For each (s, fraction of a*(s)): random initial history, run until the subdominant roots have decayed
    by 1e-12 relative to the dominant pair, regress x_{t+1} − x_t on (x_t, x_t − x_{t−1}) over the last 40
    steps. Returns the max |fitted μ − μ_eff| over the cases (roots are used only for the run length).
    """
    rng = np.random.default_rng(seed)
    worst = 0.0
    for staleness, fraction in cases:
        a = fraction * float(stability_boundary_closed_form(staleness))
        moduli = np.abs(delayed_roots(a, staleness, 0.0))
        steps = int(np.ceil(np.log(1e-12) / np.log(moduli[2] / moduli[0]))) + 60
        x = list(rng.standard_normal(staleness + 1))
        for _ in range(steps):
            x.append(x[-1] - a * x[-1 - staleness])
            if abs(x[-1]) < 1e-200 or abs(x[-1]) > 1e200:  # keep the scale in range
                x = [v / abs(x[-1]) for v in x[-(staleness + 2):]]
        x = np.array(x[-42:])
        design = np.stack([x[1:-1], x[1:-1] - x[:-2]], axis=1)
        scale = np.abs(design).max()
        coef, *_ = np.linalg.lstsq(design / scale, (x[2:] - x[1:-1]) / scale, rcond=None)
        worst = max(worst, abs(coef[1] - effective_momentum(a, staleness)[0]))
    return worst


def mean_field_gac_boundary(staleness: int, rho: float) -> float:
    """Largest a with all roots of z^{s+2} − z^{s+1} + a z − aρ inside the unit circle.

    Mean-field model of GAC project (τ = 0) in high dimension: the removed coefficient ⟨g_t, g_{t−1}⟩/‖g_{t−1}‖²
    concentrates on ρ, so each mode sees x_{t+1} = x_t − a(x_{t−s} − ρ x_{t−s−1}). ρ = 0 gives a*(s). Computed by
    ``theory.gac_stability.gac_stability_boundary`` (semi-closed form, checked there against bisection).
    """
    return gac_stability_boundary(staleness, rho)


def check_gac_extends_stability(staleness: int, overshoot: float, dim: int = 400, steps: int = 1500, seeds: int = 8,
                                *, seed: int) -> dict:
    """Noisy quadratic with ηλ_max = overshoot·a*(s) (10% of directions there, the rest at 0.05·a*):
    plain delayed SGD vs GAC (``gac.control``, project, τ = 0). Also the mean-field boundary at the measured ρ̄.

    Returns {"plain_final": median final ‖x‖², "gac_final": the same with GAC, "gac_mid": GAC's median
    ‖x‖² half-way (a stationary run has gac_final ≈ gac_mid), "rho_bar": mean removed
    coefficient ρ_t·[GAC acted] over the second half, "mean_field_boundary_ratio": a_GAC(s, ρ̄)/a*(s)}.
    """
    gen = torch.Generator().manual_seed(seed)
    boundary = float(stability_boundary_closed_form(staleness))
    curvature = torch.full((dim,), 0.05 * boundary, dtype=torch.float64)
    curvature[: dim // 10] = overshoot * boundary
    cfg = gac.GACConfig(threshold=0.0, mode="project")
    finals, rho_bar, mid = {}, 0.0, 0.0
    for use_gac in (False, True):
        x = torch.zeros(seeds, dim, dtype=torch.float64)
        history = [x.clone() for _ in range(staleness + 1)]
        prev = torch.zeros_like(x)
        rhos = []
        for t in range(steps):
            grad = curvature * history[staleness] + torch.randn(x.shape, generator=gen, dtype=x.dtype)
            applied = grad
            if use_gac:
                out = gac.control(grad, prev, cfg)
                applied = out.grad
                if t >= steps // 2:
                    coef = (grad * prev).sum(-1) / (prev * prev).sum(-1).clamp_min(1e-300)
                    rhos.append((coef * (out.regime == gac.ACT)).mean())
            prev = grad
            x = x - applied  # η = 1: a = λ
            if use_gac and t == steps // 2:
                mid = float((x * x).sum(-1).median())
            history = [x.clone()] + history[:-1]
        finals[use_gac] = float(torch.nan_to_num((x * x).sum(-1), nan=float("inf")).median())
        if use_gac:
            rho_bar = float(torch.stack(rhos).mean())
    return {"plain_final": finals[False], "gac_final": finals[True], "gac_mid": mid, "rho_bar": rho_bar,
            "mean_field_boundary_ratio": mean_field_gac_boundary(staleness, rho_bar) / boundary}
