"""Stability of delayed gradient descent on one eigen-direction of a quadratic (stale-gradient model).

x_{t+1} = x_t − a·x_{t−s}, a = ηλ. Fixed staleness: roots of z^{s+1} − z^s + a, closed-form boundary
a*(s) = 2 sin(π / (2(2s+1))). Bounded-random staleness s_t ~ U{0..s_max}: mean-square boundary from
the second-moment recursion. ``stability_map`` is what ``fig4_stability_region`` draws.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

Z, A, OMEGA = sp.symbols("z a omega")


# ---------------------------------------------------------------------------------------------
# Fixed staleness: symbolic results
# ---------------------------------------------------------------------------------------------

def characteristic_polynomial(staleness: int) -> sp.Expr:
    """p_s(z) = z^{s+1} − z^s + a: the characteristic polynomial of x_{t+1} = x_t − a x_{t−s}.

    Derived, not typed in: substitute the mode x_t = z^t into the recursion and divide by z^{t−s}.
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    t = sp.Symbol("t", integer=True)
    mode = lambda k: Z**k  # noqa: E731
    recursion = mode(t + 1) - mode(t) + A * mode(t - staleness)
    return sp.expand(sp.powsimp(sp.expand(recursion / Z ** (t - staleness)), force=True))


def stability_boundary_closed_form(staleness):
    """a*(s) = 2 sin(π / (2(2s+1))): the largest a such that every root of z^{s+1} − z^s + a has |z| < 1.

    Statement: for 0 < a < a*(s) the recursion is asymptotically stable; at a = a*(s) the root pair
    z = e^{±iπ/(2s+1)} is on the unit circle; for a > a*(s) it is outside. Works on ints or arrays.
    """
    staleness = np.asarray(staleness, dtype=float)
    if np.any(staleness < 0):
        raise ValueError("staleness must be >= 0")
    return 2.0 * np.sin(np.pi / (2.0 * (2.0 * staleness + 1.0)))


def boundary_derivation() -> dict:
    """The derivation of a*(s) for general s, as sympy expressions (each step is checked in the tests).

    On the unit circle z = e^{iω}: a = −z^s (z − 1) must be real and positive.
    (1) Im[e^{iωs}(e^{iω} − 1)] = sin(ω(s+1)) − sin(ωs) = 2 cos(ω(2s+1)/2) sin(ω/2)  → ω = π/(2s+1);
    (2) |e^{iω} − 1| = 2 sin(ω/2)  → a = 2 sin(π/(2(2s+1))).
    Returns the identities of (1), (2) and the resulting a*(s) as expressions in the symbol s.
    """
    s = sp.Symbol("s", positive=True)
    w = sp.Symbol("omega", positive=True)
    imag_part = sp.sin(w * (s + 1)) - sp.sin(w * s)
    product_form = 2 * sp.cos(w * (2 * s + 1) / 2) * sp.sin(w / 2)
    modulus_sq = (sp.cos(w) - 1) ** 2 + sp.sin(w) ** 2
    omega_star = sp.pi / (2 * s + 1)
    return {"imag_part": imag_part, "product_form": product_form, "modulus_sq": modulus_sq,
            "modulus_sq_closed": 4 * sp.sin(w / 2) ** 2, "omega_star": omega_star,
            "a_star": 2 * sp.sin(omega_star / 2), "s": s, "omega": w}


def check_boundary_symbolic(max_staleness: int = 4) -> dict:
    """Exact check for s ≤ max_staleness: p_s(e^{iπ/(2s+1)}) = 0 at a = a*(s), and the general identities.

    Returns {"residual_max": max |simplified residual| (exactly 0 if right), "identities_ok": bool,
    "polynomial_ok": bool} where polynomial_ok says the derived polynomial is z^{s+1} − z^s + a.
    """
    residuals, polynomial_ok = [], True
    for s in range(max_staleness + 1):
        poly = characteristic_polynomial(s)
        polynomial_ok &= sp.simplify(poly - (Z ** (s + 1) - Z**s + A)) == 0
        omega = sp.pi / (2 * s + 1)
        at_boundary = poly.subs({A: 2 * sp.sin(omega / 2), Z: sp.exp(sp.I * omega)})
        # exact: real and imaginary parts are trigonometric numbers; sympy decides each is 0
        real, imag = sp.expand_complex(at_boundary).as_real_imag()
        exact_zero = sp.simplify(real) == 0 and sp.simplify(imag) == 0
        residuals.append(0.0 if exact_zero else float(abs(sp.N(at_boundary, 50))))
    d = boundary_derivation()
    identity_1 = sp.simplify(sp.expand_trig(d["imag_part"] - d["product_form"]).rewrite(sp.exp)) == 0
    identity_2 = sp.simplify(d["modulus_sq"] - d["modulus_sq_closed"]) == 0
    zero_of_cos = sp.simplify(sp.cos(d["omega_star"] * (2 * d["s"] + 1) / 2)) == 0
    return {"residual_max": max(residuals), "identities_ok": bool(identity_1 and identity_2 and zero_of_cos),
            "polynomial_ok": bool(polynomial_ok)}


# ---------------------------------------------------------------------------------------------
# Fixed staleness: numerics
# ---------------------------------------------------------------------------------------------

def companion_matrix(a, staleness: int) -> np.ndarray:
    """State matrix of X_{t+1} = M X_t, X_t = (x_t, …, x_{t−s}); batched over an array of a: (..., s+1, s+1)."""
    a = np.asarray(a, dtype=float)
    n = staleness + 1
    m = np.zeros(a.shape + (n, n))
    m[..., 0, 0] = 1.0
    m[..., 0, n - 1] -= a
    for k in range(1, n):
        m[..., k, k - 1] = 1.0
    return m


def spectral_radius(a, staleness: int) -> np.ndarray:
    """max |z| over roots of z^{s+1} − z^s + a (eigenvalues of the companion matrix); batched over a."""
    return np.abs(np.linalg.eigvals(companion_matrix(a, staleness))).max(-1)


def _last_stable(radius, lo: float, hi: float, tol: float) -> float:
    """Bisection for the a where ``radius(a)`` crosses 1 (stable below, unstable above) in (lo, hi)."""
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if radius(mid) < 1.0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def stability_boundary(staleness: int, tol: float = 1e-12) -> float:
    """a*(s) computed numerically: bisection on a ↦ spectral radius < 1 over a ∈ (0, 2.5).

    Independent of the closed form: only the polynomial's roots are used.
    """
    return _last_stable(lambda a: spectral_radius(a, staleness), 1e-9, 2.5, tol)


def check_boundary_numeric(max_staleness: int = 64) -> dict:
    """max_s |a*_numeric(s) − 2 sin(π/(2(2s+1)))| for s = 0..max_staleness, plus a sign check on both sides.

    Also returns "sides_ok": spectral radius < 1 at 0.999·a* and > 1 at 1.001·a* for every s.
    """
    errors, sides_ok = [], True
    for s in range(max_staleness + 1):
        closed = float(stability_boundary_closed_form(s))
        errors.append(abs(stability_boundary(s) - closed))
        rho = spectral_radius(np.array([0.999 * closed, 1.001 * closed]), s)
        sides_ok &= bool(rho[0] < 1.0 < rho[1])
    return {"max_error": max(errors), "sides_ok": sides_ok}


def stability_map(a_grid, staleness_grid, method: str = "closed_form") -> np.ndarray:
    """Bool array (len(staleness_grid), len(a_grid)): True where x_{t+1} = x_t − a x_{t−s} is stable.

    a is ηλ (step size × curvature). method="closed_form" uses 0 < a < a*(s); method="roots" uses the
    spectral radius of the companion matrix (slower; the two agree away from the boundary itself).
    This is the theory layer of ``fig4_stability_region``.
    """
    a_grid = np.asarray(a_grid, dtype=float)
    staleness_grid = np.asarray(staleness_grid, dtype=int)
    if method == "closed_form":
        boundary = stability_boundary_closed_form(staleness_grid)[:, None]
        return (a_grid[None, :] > 0) & (a_grid[None, :] < boundary)
    if method == "roots":
        return np.stack([spectral_radius(a_grid, int(s)) < 1.0 for s in staleness_grid])
    raise ValueError(f"method must be 'closed_form' or 'roots', got {method!r}")


# ---------------------------------------------------------------------------------------------
# Bounded-random staleness: mean-square stability
# ---------------------------------------------------------------------------------------------

def random_staleness_matrices(a: float, max_staleness: int) -> np.ndarray:
    """The s_max+1 state matrices A_k (X_{t+1} = A_{s_t} X_t, X_t = (x_t, …, x_{t−s_max})), one per s_t = k."""
    n = max_staleness + 1
    mats = np.zeros((n, n, n))
    for k in range(n):
        mats[k, 0, 0] = 1.0
        mats[k, 0, k] -= a
        for j in range(1, n):
            mats[k, j, j - 1] = 1.0
    return mats


def second_moment_operator(a: float, max_staleness: int) -> np.ndarray:
    """𝒜 = E_k[A_k ⊗ A_k] with k ~ U{0..s_max}: vec(E[X_{t+1}X_{t+1}ᵀ]) = 𝒜 vec(E[X_t X_tᵀ])."""
    mats = random_staleness_matrices(a, max_staleness)
    return np.mean([np.kron(m, m) for m in mats], axis=0)


def mean_square_radius(a: float, max_staleness: int) -> float:
    """Spectral radius of the second-moment operator; < 1 ⇔ E[x_t²] → 0 (mean-square stability)."""
    return float(np.abs(np.linalg.eigvals(second_moment_operator(a, max_staleness))).max())


def mean_square_boundary_random(max_staleness: int, tol: float = 1e-9) -> float:
    """Largest a for which x_{t+1} = x_t − a x_{t−s_t}, s_t ~ U{0..s_max} i.i.d., is mean-square stable.

    Computed by bisection on the spectral radius of 𝒜 = E[A ⊗ A] (no closed form claimed). For
    s_max = 0 it equals 2. It lies between a*(s_max) (always taking the worst delay) and 2.
    """
    return _last_stable(lambda a: mean_square_radius(a, max_staleness), 1e-9, 2.0 + 1e-6, tol)


def predicted_second_moment(a: float, max_staleness: int, steps: int, x0: float = 1.0) -> np.ndarray:
    """E[x_t²] for t = 0..steps from the second-moment recursion, starting from X_0 = (x0, …, x0)."""
    n = max_staleness + 1
    op = second_moment_operator(a, max_staleness)
    moment = np.full(n * n, x0 * x0)
    out = [moment[0]]
    for _ in range(steps):
        moment = op @ moment
        out.append(moment[0])
    return np.array(out)


def simulate_random_staleness(a: float, max_staleness: int, steps: int, paths: int, seed: int = 0) -> np.ndarray:
    """Monte Carlo x_t² (paths, steps+1) of x_{t+1} = x_t − a x_{t−s_t}, s_t ~ U{0..s_max}; history = x0 = 1."""
    rng = np.random.default_rng(seed)
    n = max_staleness + 1
    history = np.ones((paths, n))  # column k holds x_{t−k}
    out = np.empty((paths, steps + 1))
    out[:, 0] = 1.0
    rows = np.arange(paths)
    for t in range(steps):
        delays = rng.integers(0, n, size=paths)
        new = history[:, 0] - a * history[rows, delays]
        history = np.concatenate([new[:, None], history[:, :-1]], axis=1)
        out[:, t + 1] = new * new
    return out


def check_mean_square_random(max_staleness: int = 4, paths: int = 20000, steps: int = 24, seed: int = 0) -> dict:
    """Monte Carlo against the second-moment recursion, at 0.8·a_ms and 1.25·a_ms.

    Returns, per side, the largest |MC mean − predicted| of E[x_t²] in units of the MC standard error
    over t ≤ steps ("max_z"), and the predicted/measured growth over the last half of the run: the
    recursion says E[x²] shrinks below a_ms and grows above it, and the simulation must agree.
    x_t² is heavy-tailed (products of random matrices), so the sample mean is trustworthy only over
    a few dozen steps; beyond that rare paths dominate E[x²] and the standard error is meaningless.
    """
    boundary = mean_square_boundary_random(max_staleness)
    result = {"boundary": boundary, "a_star_fixed": float(stability_boundary_closed_form(max_staleness))}
    for name, factor in (("below", 0.8), ("above", 1.25)):
        a = factor * boundary
        predicted = predicted_second_moment(a, max_staleness, steps)
        samples = simulate_random_staleness(a, max_staleness, steps, paths, seed)
        mean = samples.mean(0)
        stderr = samples.std(0, ddof=1) / np.sqrt(paths)
        # the first steps can be deterministic (stderr 0): allow float rounding there
        z = np.abs(mean - predicted) / (stderr + 1e-12 * np.abs(predicted))
        half = steps // 2
        result[name] = {"a": a, "max_z": float(z.max()),
                        "predicted_growth": float(predicted[-1] / predicted[half]),
                        "measured_growth": float(mean[-1] / mean[half])}
    return result
