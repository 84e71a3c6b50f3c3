"""Predicted stationary cosine between consecutive gradients under staleness (noisy quadratic).

f(x) = ½ Σ λ_i x_i², stale-gradient model g_t = Λ x_{t−s} + σ ξ_t, update x_{t+1} = x_t − η g_t. Per
eigen-direction the augmented state (x_t, …, x_{t−s}) is a linear system driven by noise; its
stationary covariance (discrete Lyapunov solve) gives E[g_t g_{t−1}] and E[g_t²]. Also the
stale-data model for a softmax policy and when it reduces to the same structure.
``predicted_cosine`` is the curve of ``fig2_cosine_vs_staleness``.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.linalg
import sympy as sp

from theory.stability import companion_matrix, stability_boundary_closed_form

# ---------------------------------------------------------------------------------------------
# One eigen-direction
# ---------------------------------------------------------------------------------------------


def unit_noise_covariance(a: float, staleness: int) -> np.ndarray:
    """P̃ with P̃ = M P̃ Mᵀ + e₀e₀ᵀ: stationary Cov(x_t, …, x_{t−s}) / (ησ)² for x_{t+1} = x_t − a x_{t−s} − ησ ξ_t.

    M is the companion matrix of z^{s+1} − z^s + a. Requires 0 < a < a*(s) (otherwise no stationary law).
    """
    m = companion_matrix(a, staleness)
    q = np.zeros_like(m)
    q[0, 0] = 1.0
    return scipy.linalg.solve_discrete_lyapunov(m, q)


def gradient_moments(a, staleness: int) -> tuple[np.ndarray, np.ndarray]:
    """Per direction, (E[g_t g_{t−1}], E[g_t²]) / σ² in the stationary state, for an array of a = ηλ.

    With g_t = λ e_sᵀX_t + σξ_t and X_t = M X_{t−1} + b ξ_{t−1}, b = −ησ e₀:
      E[g_t²]        = σ² (a² P̃_ss + 1),
      E[g_t g_{t−1}] = λ² (M P)_ss + λσ b_s = σ² (a² (M P̃)_ss − a·[s = 0]),
    since E[X_t X_{t−1}ᵀ] = M P and ξ_{t−1} enters x_{t−s} only when s = 0. a = 0 (flat direction)
    contributes (0, 1): its gradient is pure noise. Returns nan where a < 0 or a ≥ a*(s).
    """
    a = np.atleast_1d(np.asarray(a, dtype=float))
    boundary = float(stability_boundary_closed_form(staleness))
    lag_one, second = np.full(a.shape, np.nan), np.full(a.shape, np.nan)
    flat = a == 0.0
    lag_one[flat], second[flat] = 0.0, 1.0
    unique_a, inverse = np.unique(a, return_inverse=True)  # spectra often repeat values
    inverse = inverse.reshape(a.shape)
    values = unique_a[(unique_a > 0.0) & (unique_a < boundary)]
    p_ss, mp_ss = np.empty(values.shape), np.empty(values.shape)
    n = staleness + 1
    for start in range(0, values.size, 256):  # chunks of 256 values keep the (n², n²) systems in memory
        chunk = slice(start, start + 256)
        m = companion_matrix(values[chunk], staleness)
        p = _batched_unit_noise_covariance(m) if n < 10 else np.stack([unit_noise_covariance(v, staleness)
                                                                        for v in values[chunk]])
        p_ss[chunk], mp_ss[chunk] = p[:, staleness, staleness], (m @ p)[:, staleness, staleness]
    position = np.searchsorted(unique_a, values)  # where each solved value sits among the unique ones
    solved = np.isin(inverse, position)
    k = np.searchsorted(position, inverse[solved])
    second[solved] = values[k] ** 2 * p_ss[k] + 1.0
    lag_one[solved] = values[k] ** 2 * mp_ss[k] - (values[k] if staleness == 0 else 0.0)
    return lag_one, second


def _batched_unit_noise_covariance(m: np.ndarray) -> np.ndarray:
    """``unit_noise_covariance`` for a batch of companion matrices (b, n, n), n < 10: scipy's own "direct" method
    at that size, (I − M ⊗ M) vec P̃ = vec(e₀e₀ᵀ), solved for the whole batch in one call."""
    b, n, _ = m.shape
    kron = np.einsum("bik,bjl->bijkl", m, m).reshape(b, n * n, n * n)
    rhs = np.zeros((b, n * n, 1))
    rhs[:, 0, 0] = 1.0
    return np.linalg.solve(np.eye(n * n) - kron, rhs).reshape(b, n, n)


def predicted_cosine(eta: float, curvatures, staleness, noise=1.0):
    """Predicted stationary cos(g_t, g_{t−1}) = Σ_i E[g_t,i g_{t−1},i] / Σ_i E[g_t,i²] (ratio of expectations).

    eta: step size η; curvatures: the λ_i (array, one per direction; λ_i ≥ 0); staleness: an int s or
    an array of them (then an array of cosines is returned); noise: σ (scalar) or per-direction σ_i.
    In high dimension the measured cosine concentrates on this ratio. nan where some ηλ_i ≥ a*(s)
    (no stationary state: the run diverges). s = 0 gives −Σ w_i ηλ_i/2 (see ``cosine_sync_closed_form``).
    """
    a = eta * np.atleast_1d(np.asarray(curvatures, dtype=float))
    noise_sq = np.broadcast_to(np.asarray(noise, dtype=float) ** 2, a.shape)
    if np.any(a < 0):
        raise ValueError("predicted_cosine needs curvatures >= 0 (negative curvature has no stationary state)")
    stalenesses = np.atleast_1d(np.asarray(staleness, dtype=int))
    out = np.empty(stalenesses.shape)
    for k, s in enumerate(stalenesses):
        if a.max() >= stability_boundary_closed_form(int(s)):  # no stationary state: skip the Lyapunov solves
            out[k] = np.nan
            continue
        lag_one, second = gradient_moments(a, int(s))
        out[k] = (noise_sq * lag_one).sum() / (noise_sq * second).sum()
    return float(out[0]) if np.ndim(staleness) == 0 else out


def cosine_at_boundary(staleness):
    """cos(π/(2s+1)): the limit of the predicted cosine as the top ηλ approaches a*(s) from below.

    The top direction's variance blows up and is carried by the root pair e^{±iπ/(2s+1)}, so its lag-one
    autocorrelation → cos(π/(2s+1)): −1 at s = 0 (sign flips at a = 2), 0.5 at s = 1, → 1 as s grows.
    """
    return np.cos(np.pi / (2.0 * np.asarray(staleness, dtype=float) + 1.0))


def cosine_sync_closed_form() -> dict:
    """Sympy: at s = 0 one direction has P̃ = 1/(a(2−a)), E[g²] = 2σ²/(2−a), E[g g₋₁] = −aσ²/(2−a); cos = −a/2.

    So synchronous SGD on the noisy quadratic has negative consecutive cosine, −Σ_i w_i a_i/2 with
    weights w_i ∝ σ_i²/(2 − a_i): near zero for small steps, → −1 only at the boundary a → 2.
    """
    a, sigma, p = sp.symbols("a sigma P", positive=True)
    variance = sp.solve(sp.Eq(p, (1 - a) ** 2 * p + 1), p)[0]  # P̃ = (1−a)²P̃ + 1
    second = sp.simplify(sigma**2 * (a**2 * variance + 1))
    lag_one = sp.simplify(sigma**2 * (a**2 * (1 - a) * variance - a))
    return {"variance": sp.simplify(variance), "second": second, "lag_one": lag_one,
            "cosine": sp.simplify(lag_one / second), "a": a, "sigma": sigma}


# ---------------------------------------------------------------------------------------------
# Independent Monte Carlo (numpy), used by the checks
# ---------------------------------------------------------------------------------------------


def simulate_cosine(eta: float, curvatures, staleness: int, noise=1.0, steps: int = 2000, burn_in: int = 500,
                    seed: int = 0) -> dict:
    """Run x_{t+1} = x_t − η(Λ x_{t−s} + σξ_t) from x = 0 and measure consecutive-gradient cosines.

    Returns {"mean_cosine": average over the measured steps of cos(g_t, g_{t−1}),
    "ratio_cosine": Σ_t⟨g_t, g_{t−1}⟩ / Σ_t ‖g_t‖², "snr": Σ_t‖Λx_{t−s}‖² / Σ_t‖σξ_t‖²}. No Lyapunov solve
    is used here.
    """
    rng = np.random.default_rng(seed)
    curvatures = np.asarray(curvatures, dtype=float)
    noise = np.broadcast_to(np.asarray(noise, dtype=float), curvatures.shape)
    history = np.zeros((staleness + 1, curvatures.size))  # row (t mod (s+1)) holds x_t
    prev_grad = None
    cosines, dots, squares, signal_sq, noise_sq = [], 0.0, 0.0, 0.0, 0.0
    for t in range(burn_in + steps):
        stale_x = history[(t - staleness) % (staleness + 1)] if t >= staleness else history[0] * 0.0
        signal, fresh_noise = curvatures * stale_x, noise * rng.standard_normal(curvatures.size)
        grad = signal + fresh_noise
        history[(t + 1) % (staleness + 1)] = history[t % (staleness + 1)] - eta * grad
        if t >= burn_in:
            dot = float(grad @ prev_grad)
            cosines.append(dot / np.sqrt(float(grad @ grad) * float(prev_grad @ prev_grad)))
            dots += dot
            squares += float(grad @ grad)
            signal_sq += float(signal @ signal)
            noise_sq += float(fresh_noise @ fresh_noise)
        prev_grad = grad
    return {"mean_cosine": float(np.mean(cosines)), "ratio_cosine": dots / squares, "snr": signal_sq / noise_sq}


def check_cosine_against_simulation(settings, dim: int = 1000, steps: int = 2000, burn_in: int = 500,
                                    seed: int = 0) -> list[dict]:
    """For each (eta, spectrum_name, staleness, noise) in settings: predicted vs simulated cosine at d = dim.

    spectrum_name is one of ``spectrum(name, dim)``. Returns rows with both numbers and |difference|.
    """
    rows = []
    for k, (eta, name, staleness, noise) in enumerate(settings):
        curvatures = spectrum(name, dim)
        predicted = predicted_cosine(eta, curvatures, staleness, noise)
        simulated = simulate_cosine(eta, curvatures, staleness, noise, steps, burn_in, seed + k)
        rows.append({"eta": eta, "spectrum": name, "staleness": staleness, "noise": noise,
                     "top_a_over_boundary": eta * curvatures.max() / float(stability_boundary_closed_form(staleness)),
                     "predicted": predicted, "simulated": simulated["mean_cosine"],
                     "simulated_ratio": simulated["ratio_cosine"],
                     "abs_error": abs(predicted - simulated["mean_cosine"])})
    return rows


MC_SETTINGS = [(0.5, "log", 0), (0.3, "uniform", 1), (0.32, "random", 2), (0.9, "spiked", 1), (0.9, "spiked", 4),
               (0.85, "spiked", 8), (0.9, "uniform", 2), (0.95, "log", 4), (0.97, "uniform", 1)]
"""(fraction of a*(s) taken by the top ηλ, spectrum name, staleness) of the Monte-Carlo check, far to close to
the boundary; used by the tests and by ``python -m theory.tables cosine``."""


def spectrum(name: str, dim: int) -> np.ndarray:
    """Named test spectra with λ_max = 1: "log" (log-spaced 1e-2..1), "uniform" (0.05..1), "spiked"
    (90% at 0.05, 10% at 1), "random" (fixed-seed uniform(0, 1) with λ_max set to 1)."""
    if name == "log":
        return np.logspace(-2, 0, dim)
    if name == "uniform":
        return np.linspace(0.05, 1.0, dim)
    if name == "spiked":
        out = np.full(dim, 0.05)
        out[: max(1, dim // 10)] = 1.0
        return out
    if name == "random":
        values = np.random.default_rng(1234).uniform(0.0, 1.0, dim)
        return values / values.max()
    raise ValueError(f"unknown spectrum {name!r}")


# ---------------------------------------------------------------------------------------------
# Stale-data model for a softmax policy
# ---------------------------------------------------------------------------------------------

PARAMETRIZATIONS = ("tabular", "loglinear", "tanh")


def policy_logits(theta, features, parametrization: str):
    """Logits and their Jacobian d logits / d θ for the three toy parametrizations.

    tabular: logits = θ (K = p); loglinear: Φθ; tanh: Φ tanh(θ) (a non-log-linear, "network-like" map).
    """
    theta = np.asarray(theta, dtype=float)
    if parametrization == "tabular":
        return theta.copy(), np.eye(theta.size)
    if parametrization == "loglinear":
        return features @ theta, features
    if parametrization == "tanh":
        return features @ np.tanh(theta), features * (1.0 - np.tanh(theta) ** 2)[None, :]
    raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}")


def softmax(logits):
    z = np.exp(logits - logits.max())
    return z / z.sum()


def expected_reward(theta, rewards, features=None, parametrization: str = "tabular") -> float:
    """J(θ) = Σ_a π_θ(a) r_a."""
    return float(softmax(policy_logits(theta, features, parametrization)[0]) @ rewards)


def stale_data_gradient(theta, theta_behaviour, rewards, features=None, parametrization: str = "tabular",
                        baseline: str = "mean", importance: bool = False) -> np.ndarray:
    """Expected REINFORCE direction at θ on actions sampled from the behaviour policy π_{θ_b} (exact sum).

    G(θ; θ_b) = Σ_a π_b(a) w(a) (r_a − b) ∇_θ log π_θ(a), with b = E_{π_b}[r] ("mean": the large-group
    limit of GRPO's group mean) or 0 ("none"), and w = π_θ/π_b when importance=True, else 1.
    """
    logits, jac = policy_logits(theta, features, parametrization)
    pi = softmax(logits)
    pi_b = softmax(policy_logits(theta_behaviour, features, parametrization)[0])
    weight = pi / pi_b if importance else np.ones_like(pi)
    base = float(pi_b @ rewards) if baseline == "mean" else 0.0
    if baseline not in ("mean", "none"):
        raise ValueError(f"baseline must be 'mean' or 'none', got {baseline!r}")
    coef = pi_b * weight * (rewards - base)  # per action
    # ∇_θ log π_θ(a) = Jᵀ(e_a − π): sum over actions of coef_a (e_a − π)
    return jac.T @ (coef - coef.sum() * pi)


def numeric_policy_gradient(theta, rewards, features=None, parametrization: str = "tabular",
                            step: float = 1e-6) -> np.ndarray:
    """∇J(θ) by central finite differences of J (independent of the score-function formula)."""
    theta = np.asarray(theta, dtype=float)
    grad = np.empty_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = step
        grad[i] = (expected_reward(theta + e, rewards, features, parametrization)
                   - expected_reward(theta - e, rewards, features, parametrization)) / (2 * step)
    return grad


def check_stale_data_reduction(trials: int = 20, actions: int = 6, dim: int = 4, seed: int = 0) -> dict:
    """Max deviations, over random (θ_t, θ_b, r), of the stale-data gradient from the stale/fresh gradient.

    Keys: "<parametrization>/<baseline>/<is|nois>" → max_k ‖G(θ_t; θ_b) − target‖ / ‖target‖, where target
    is ∇J(θ_b) without importance weights (does stale data = stale gradient?) and ∇J(θ_t) with them;
    and "none_formula": max error of G = ∇J(θ_b) + (π_b·r)·Jᵀ(π_b − π_t) (tabular, no baseline).
    """
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {}
    for parametrization in PARAMETRIZATIONS:
        for baseline in ("mean", "none"):
            for importance in (False, True):
                worst = 0.0
                for _ in range(trials):
                    p = actions if parametrization == "tabular" else dim
                    features = rng.standard_normal((actions, p))
                    theta, theta_b = rng.standard_normal(p), rng.standard_normal(p)
                    rewards = rng.uniform(0.0, 1.0, actions)
                    target_theta = theta if importance else theta_b
                    target = numeric_policy_gradient(target_theta, rewards, features, parametrization)
                    got = stale_data_gradient(theta, theta_b, rewards, features, parametrization, baseline, importance)
                    worst = max(worst, float(np.linalg.norm(got - target) / np.linalg.norm(target)))
                out[f"{parametrization}/{baseline}/{'is' if importance else 'nois'}"] = worst
    worst = 0.0
    for _ in range(trials):
        theta, theta_b = rng.standard_normal(actions), rng.standard_normal(actions)
        rewards = rng.uniform(0.0, 1.0, actions)
        pi, pi_b = softmax(theta), softmax(theta_b)
        predicted = numeric_policy_gradient(theta_b, rewards) + float(pi_b @ rewards) * (pi_b - pi)
        got = stale_data_gradient(theta, theta_b, rewards, baseline="none")
        worst = max(worst, float(np.linalg.norm(got - predicted)))
    out["none_formula"] = worst
    return out


# ---------------------------------------------------------------------------------------------
# Exact per-direction cosine (ARMA form), its series in a, and the SNR law
# ---------------------------------------------------------------------------------------------


@functools.cache  # the result depends on s only, and figures and checks ask for the same s again
def gradient_autocovariance_symbolic(staleness: int) -> dict:
    """Sympy: exact (E[g_t²], E[g_t g_{t−1}]) / σ² of one direction as rational functions of a = ηλ.

    Derivation: x_{t−s} − x_{t−s−1} = −η g_{t−s−1}, so the gradient itself is the ARMA process
    g_t − g_{t−1} + a g_{t−s−1} = σ(ξ_t − ξ_{t−1}). Multiplying by g_{t−k} and taking expectations gives,
    with γ_k = E[g_t g_{t−k}]/σ², ψ_j = E[g_t ξ_{t−j}]/σ (ψ_0 = 1, ψ_1 = −a·[s = 0]):
    γ_k − γ_{k−1} + a γ_{|k−s−1|} = [k = 0](1 − ψ_1) − [k = 1] for k = 0..s+1, a linear system in γ_0..γ_{s+1}.
    Independent of the Lyapunov solve of ``gradient_moments``. Returns {"second": γ_0, "lag_one": γ_1,
    "cosine": γ_1/γ_0, "snr": γ_0 − 1 (the signal λ²E[x_{t−s}²]/σ²), "a": a}.
    """
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    a = sp.Symbol("a", positive=True)
    gammas = sp.symbols(f"gamma0:{staleness + 2}")
    psi_1 = -a if staleness == 0 else 0
    equations = [sp.Eq(gammas[k] - gammas[abs(k - 1)] + a * gammas[abs(k - staleness - 1)],
                       (1 - psi_1) if k == 0 else (-1 if k == 1 else 0)) for k in range(staleness + 2)]
    solution = sp.solve(equations, gammas, dict=True)[0]
    # cancel: each a rational function p/q in lowest terms (what simplify finds here, without its costly search)
    second, lag_one = sp.cancel(solution[gammas[0]]), sp.cancel(solution[gammas[1]])
    return {"second": second, "lag_one": lag_one, "cosine": sp.cancel(lag_one / second),
            "snr": sp.cancel(second - 1), "a": a}


def cosine_s1(a=None):
    """Per-direction stationary cosine at s = 1 in closed form: cos = +a/2, the mirror of −a/2 at s = 0.

    Weight formula: E[g²]/σ² = 2/((1 − a)(2 + a)) (``weight``, from ``gradient_autocovariance_symbolic(1)``),
    so the predicted cosine at s = 1 is Σ_i w_i a_i/2 with w_i ∝ σ_i²·2/((1 − a_i)(2 + a_i)).
    With a = None returns the sympy dict {"cosine", "weight", "a"}; with a number (or array), the cosine
    a/2 evaluated from the derived expression.
    """
    derived = gradient_autocovariance_symbolic(1)
    if a is None:
        return {"cosine": derived["cosine"], "weight": derived["second"], "a": derived["a"]}
    return sp.lambdify(derived["a"], derived["cosine"], "numpy")(np.asarray(a, dtype=float))


def cosine_series(staleness: int, order: int = 2) -> sp.Expr:
    """Series in a of the per-direction stationary cosine for s ≥ 1, through a^order (O-term dropped).

    Result (derived for each s from ``gradient_autocovariance_symbolic``): a/2 + (s−1)a²/2 + s(s−1)a³/4 + O(a⁴).
    Exact at s = 1 (cos = a/2); at s = 2 the exact form is a/(2(1 − a)). The symbol is a = ηλ.
    """
    if staleness < 1:
        raise ValueError(f"cosine_series is for staleness >= 1 (s = 0 is exactly -a/2), got {staleness}")
    derived = gradient_autocovariance_symbolic(staleness)
    return _rational_taylor(derived["cosine"], derived["a"], order)


def _rational_taylor(expr: sp.Expr, a: sp.Symbol, order: int) -> sp.Expr:
    """The Taylor polynomial of the rational function ``expr`` at a = 0 through a^order, by exact power-series
    division of its numerator by its denominator (c_k = (n_k − Σ_{j≥1} d_j c_{k−j}) / d_0): the polynomial
    ``sp.series`` gives, without its general machinery. Falls back to ``sp.series`` where the denominator is 0 at 0."""
    numerator, denominator = sp.fraction(sp.cancel(sp.together(expr)))
    num = sp.Poly(numerator, a).all_coeffs()[::-1]
    den = sp.Poly(denominator, a).all_coeffs()[::-1]
    if den[0] == 0:
        return sp.expand(sp.series(expr, a, 0, order + 1).removeO())
    coefficients: list[sp.Expr] = []
    for k in range(order + 1):
        lower = sum((den[j] * coefficients[k - j] for j in range(1, min(k, len(den) - 1) + 1)), sp.Integer(0))
        coefficients.append(((num[k] if k < len(num) else 0) - lower) / den[0])
    return sp.expand(sum(c * a**k for k, c in enumerate(coefficients)))


def snr(eta: float, curvatures, staleness: int, noise=1.0) -> float:
    """Stationary gradient signal-to-noise ratio SNR = Σ_i E[(λ_i x_{t−s,i})²] / Σ_i E[σ_i²ξ²] = Σ σ_i² SNR_i / Σ σ_i².

    SNR_i = a_i² P̃_ss = E[g_i²]/σ_i² − 1 from the Lyapunov solve; nan where some ηλ_i ≥ a*(s).
    Proposition (``check_snr_law``): the predicted cosine satisfies cos = −SNR/(1+SNR) at s = 0 and
    cos ≤ SNR/(1+SNR) for s ≥ 1. Proof: at s = 0, SNR_i = a/(2−a) and cos_i = −a/2 = −SNR_i/(1+SNR_i), and
    both sides aggregate with the same weights σ_i²E[g_i²]. For s ≥ 1, ξ_{t−1} does not enter x_{t−s}, so
    E[g_t g_{t−1}] = λ² Cov(x_{t−s}, x_{t−s−1}) ≤ λ² Var(x) = signal (Cauchy–Schwarz); summing over directions,
    cos = Σ lag / Σ E[g²] ≤ Σ signal / (Σ signal + Σ noise) = SNR/(1+SNR).
    """
    a = eta * np.atleast_1d(np.asarray(curvatures, dtype=float))
    if np.any(a < 0):
        raise ValueError("snr needs curvatures >= 0")
    noise_sq = np.broadcast_to(np.asarray(noise, dtype=float) ** 2, a.shape)
    second = gradient_moments(a, int(staleness))[1]
    if np.any(np.isnan(second)):
        return float("nan")
    return float((noise_sq * (second - 1.0)).sum() / noise_sq.sum())


def check_snr_law(spectra: int = 120, seed: int = 0) -> dict:
    """The SNR proposition on random spectra: random d, λ_i, σ_i, s ∈ 0..16, ηλ_max ∈ (0.05, 0.98)·a*(s).

    Returns {"sync_max_error": max |cos + SNR/(1+SNR)| over the s = 0 cases, "async_max_excess":
    max (cos − SNR/(1+SNR)) over s ≥ 1 (≤ 0 if the proposition holds), "cases": (sync, async) counts}.
    """
    rng = np.random.default_rng(seed)
    sync_err, excess, counts = 0.0, -np.inf, [0, 0]
    for _ in range(spectra):
        dim = int(rng.integers(1, 60))
        staleness = int(rng.integers(0, 17)) if rng.random() < 0.8 else 0
        curvatures = rng.uniform(0.0, 1.0, dim) ** rng.uniform(0.5, 4.0)
        noise = rng.uniform(0.1, 3.0, dim)
        eta = rng.uniform(0.05, 0.98) * float(stability_boundary_closed_form(staleness)) / curvatures.max()
        value = snr(eta, curvatures, staleness, noise)
        law = value / (1.0 + value)
        cos = predicted_cosine(eta, curvatures, staleness, noise)
        if staleness == 0:
            sync_err, counts[0] = max(sync_err, abs(cos + law)), counts[0] + 1
        else:
            excess, counts[1] = max(excess, cos - law), counts[1] + 1
    return {"sync_max_error": sync_err, "async_max_excess": float(excess), "cases": tuple(counts)}


ANISOTROPIC_SETTINGS = [(0.9, "log", 0), (0.9, "log", 1), (0.8, "uniform", 2), (0.9, "random", 4), (0.8, "log", 8)]
"""(ηλ_max / a*(s), spectrum, s) of the anisotropic Monte-Carlo check."""


def anisotropic_noise(curvatures) -> np.ndarray:
    """σ_i = 0.2 + 2λ_i/λ_max: noise grows with curvature, so the σ_i weights move the cosine visibly."""
    curvatures = np.asarray(curvatures, dtype=float)
    return 0.2 + 2.0 * curvatures / curvatures.max()


def check_anisotropic_cosine(dim: int = 2000, steps: int = 3000, burn_in: int = 1000, seed: int = 0) -> list[dict]:
    """Predicted cosine and SNR with per-direction σ_i (``anisotropic_noise``) against Monte Carlo at d = dim.

    Rows: setting, "predicted", "simulated" (mean per-step cosine), "abs_error", "isotropic_predicted" (the
    prediction if the σ_i weights were ignored, to show the check can tell), "snr" and "snr_simulated".
    """
    rows = []
    for k, (fraction, name, staleness) in enumerate(ANISOTROPIC_SETTINGS):
        curvatures = spectrum(name, dim)
        eta = fraction * float(stability_boundary_closed_form(staleness))
        noise = anisotropic_noise(curvatures)
        predicted = predicted_cosine(eta, curvatures, staleness, noise)
        simulated = simulate_cosine(eta, curvatures, staleness, noise, steps, burn_in, seed + k)
        rows.append({"fraction": fraction, "spectrum": name, "staleness": staleness, "predicted": predicted,
                     "simulated": simulated["mean_cosine"], "abs_error": abs(predicted - simulated["mean_cosine"]),
                     "isotropic_predicted": predicted_cosine(eta, curvatures, staleness, 1.0),
                     "snr": snr(eta, curvatures, staleness, noise), "snr_simulated": simulated["snr"]})
    return rows


def series_cosine(eta: float, curvatures, staleness, noise=1.0, order: int = 2):
    """Predicted cosine with each direction's cosine replaced by ``cosine_series`` (s ≥ 1) or −a/2 (s = 0).

    Aggregated with the exact weights σ_i²E[g_i²] of ``gradient_moments``, so it differs from
    ``predicted_cosine`` only by the truncation of the series: the small-step curve of fig2. Array in, array out.
    """
    a = eta * np.atleast_1d(np.asarray(curvatures, dtype=float))
    noise_sq = np.broadcast_to(np.asarray(noise, dtype=float) ** 2, a.shape)
    symbol = sp.Symbol("a", positive=True)
    stalenesses = np.atleast_1d(np.asarray(staleness, dtype=int))
    out = np.empty(stalenesses.shape)
    for k, s in enumerate(stalenesses):
        weights = noise_sq * gradient_moments(a, int(s))[1]
        per_direction = -a / 2 if s == 0 else sp.lambdify(symbol, cosine_series(int(s), order), "numpy")(a)
        out[k] = np.nan if np.any(np.isnan(weights)) else float((weights * per_direction).sum() / weights.sum())
    return float(out[0]) if np.ndim(staleness) == 0 else out


def snr_bound(eta: float, curvatures, staleness, noise=1.0):
    """SNR/(1+SNR) at each staleness (``snr``): the upper bound on the predicted cosine for s ≥ 1 (−cos at s = 0)."""
    values = np.array([snr(eta, curvatures, int(s), noise) for s in np.atleast_1d(staleness)])
    out = values / (1.0 + values)
    return float(out[0]) if np.ndim(staleness) == 0 else out
