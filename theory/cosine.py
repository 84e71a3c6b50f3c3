"""Predicted stationary cosine between consecutive gradients under staleness (noisy quadratic).

f(x) = ½ Σ λ_i x_i², stale-gradient model g_t = Λ x_{t−s} + σ ξ_t, update x_{t+1} = x_t − η g_t. Per
eigen-direction the augmented state (x_t, …, x_{t−s}) is a linear system driven by noise; its
stationary covariance (discrete Lyapunov solve) gives E[g_t g_{t−1}] and E[g_t²]. Also the
stale-data model for a softmax policy and when it reduces to the same structure.
``predicted_cosine`` is the curve of ``fig2_cosine_vs_staleness``.
"""

from __future__ import annotations

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
    for k, value in enumerate(unique_a):
        if not 0.0 < value < boundary:
            continue
        p = unit_noise_covariance(value, staleness)
        m = companion_matrix(value, staleness)
        idx = inverse == k
        second[idx] = value**2 * p[staleness, staleness] + 1.0
        lag_one[idx] = value**2 * (m @ p)[staleness, staleness] - (value if staleness == 0 else 0.0)
    return lag_one, second


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
        lag_one, second = gradient_moments(a, int(s))
        out[k] = np.nan if np.any(np.isnan(second)) else (noise_sq * lag_one).sum() / (noise_sq * second).sum()
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
    "ratio_cosine": Σ_t⟨g_t, g_{t−1}⟩ / Σ_t ‖g_t‖²}. No Lyapunov solve is used here.
    """
    rng = np.random.default_rng(seed)
    curvatures = np.asarray(curvatures, dtype=float)
    noise = np.broadcast_to(np.asarray(noise, dtype=float), curvatures.shape)
    history = np.zeros((staleness + 1, curvatures.size))  # row (t mod (s+1)) holds x_t
    prev_grad = None
    cosines, dots, squares = [], 0.0, 0.0
    for t in range(burn_in + steps):
        stale_x = history[(t - staleness) % (staleness + 1)] if t >= staleness else history[0] * 0.0
        grad = curvatures * stale_x + noise * rng.standard_normal(curvatures.size)
        history[(t + 1) % (staleness + 1)] = history[t % (staleness + 1)] - eta * grad
        if t >= burn_in:
            dot = float(grad @ prev_grad)
            cosines.append(dot / np.sqrt(float(grad @ grad) * float(prev_grad @ prev_grad)))
            dots += dot
            squares += float(grad @ grad)
        prev_grad = grad
    return {"mean_cosine": float(np.mean(cosines)), "ratio_cosine": dots / squares}


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
