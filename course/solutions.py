"""Solutions of the notebooks' exercises, one function per exercise (the notebook's check cell compares the learner's
function with it; the site's Solutions page, course/solutions.md, shows its code). Each is tested in
tests/test_course.py against a computation that does not share its code: a closed form of theory/, the library
(gac.control), torch.distributions, or the package's own summary of the same data.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pandas as pd
import torch
from scipy import stats

from sim.bandit import GaussianBandit, run_bandit
from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic

# --- 00 start here and 01: the delayed recursion x_{t+1} = x_t − a x_{t−s} --------------------------------------


def delayed_iterate(a: float, staleness: int, steps: int) -> np.ndarray:
    """x_0 … x_steps of the noise-free delayed recursion x_{t+1} = x_t − a·x_{t−s}, x = 1 before and at t = 0."""
    xs = [1.0] * (staleness + 1)  # the first s steps see x_0
    for _ in range(steps):
        xs.append(xs[-1] - a * xs[-1 - staleness])
    return np.array(xs[staleness:])


def grows(a: float, staleness: int, steps: int = 4000) -> bool:
    """Whether the delayed iterate's late envelope is larger than its early one (growth, not decay)."""
    with np.errstate(over="ignore", invalid="ignore"):
        envelope = np.abs(delayed_iterate(a, staleness, steps))
    if not np.isfinite(envelope).all():  # overflowed: it grew
        return True
    half = len(envelope) // 2
    return bool(envelope[half:].max() > envelope[:half].max())


def measured_stability_boundary(staleness: int, a_grid=None) -> float:
    """Exercise 0.1: the largest step a = ηλ on ``a_grid`` whose delayed iterate does not grow, found by iterating
    (no theory used). ``a_grid`` defaults to 0.005 … 2.0 in steps of 0.005."""
    a_grid = np.arange(0.005, 2.0001, 0.005) if a_grid is None else np.asarray(a_grid, dtype=float)
    stable = [a for a in a_grid if not grows(float(a), staleness)]
    return float(max(stable)) if stable else math.nan


def smallest_diverging_staleness(a: float, max_staleness: int = 64) -> int | None:
    """Exercise 1.1: the smallest staleness s at which x_{t+1} = x_t − a·x_{t−s} grows (None up to
    ``max_staleness``)."""
    for staleness in range(max_staleness + 1):
        if grows(a, staleness):
            return staleness
    return None


# --- 01: the noisy quadratic ---------------------------------------------------------------------------------------


def late_cosine(noise: float, staleness: int, fraction: float = 0.6, dim: int = 100, steps: int = 1000,
                seeds: int = 4) -> float:
    """Exercise 1.2: the mean consecutive-gradient cosine after warm-up (steps 300 on) of delayed SGD on the noisy
    quadratic of notebook 1 §3 (κ = 100, λ_max = 1, x_0 = 1) at ηλ_max = ``fraction``·a*(s), noise σ = ``noise``."""
    from theory.stability import stability_boundary_closed_form

    problem = QuadraticProblem(dim=dim, condition_number=100.0, curvature_max=1.0, noise=noise)
    lr = fraction * float(stability_boundary_closed_form(staleness))
    result = run_quadratic(problem, [setting("naive", staleness, lr)], steps=steps, seeds=seeds, warmup=300)
    return float(result.summary["mean_cos_prev"].mean())


# --- 02: the stationary cosine of one direction ---------------------------------------------------------------------


def one_direction_cosine(a: float, staleness: int, chains: int = 256, steps: int = 4000, burn_in: int = 500,
                         seed: int = 0) -> float:
    """Exercise 2.1: the stationary lag-one autocorrelation E[g_t g_{t−1}] / E[g_t²] of the gradient
    g_t = x_{t−s} + ξ_t of one direction (λ = 1, σ = 1, step a), measured on ``chains`` independent chains at once
    (numpy; no Lyapunov solve)."""
    rng = np.random.default_rng(seed)
    history = np.zeros((staleness + 1, chains))  # row t mod (s+1) holds x_t
    previous, lag_one, second = None, 0.0, 0.0
    for t in range(burn_in + steps):
        grad = history[(t - staleness) % (staleness + 1)] + rng.standard_normal(chains)
        history[(t + 1) % (staleness + 1)] = history[t % (staleness + 1)] - a * grad
        if t >= burn_in:
            lag_one += float(grad @ previous)
            second += float(grad @ grad)
        previous = grad
    return lag_one / second


def snr_law(eta: float, curvatures, staleness: int) -> tuple[float, float]:
    """Exercise 2.2: (predicted stationary cosine, SNR/(1+SNR)) of delayed SGD on a quadratic with these curvatures."""
    from theory.cosine import predicted_cosine, snr

    ratio = snr(eta, curvatures, staleness)
    return predicted_cosine(eta, curvatures, staleness), ratio / (1.0 + ratio)


# --- 03: GAC ---------------------------------------------------------------------------------------------------------


def cap_parallel_scale(cosine: float, threshold: float) -> float:
    """Exercise 3.1: cap mode keeps g⊥ and scales g∥ by γ so that cos(g', d) = τ: tan(angle') = |g⊥| / (γ|g∥|)
    must equal √(1−τ²)/τ, and |g⊥|/|g∥| = √(1−c²)/c, so γ = τ√(1−c²) / (c√(1−τ²)); γ = 1 (keep) when c ≤ τ."""
    if cosine <= threshold:
        return 1.0
    return threshold * math.sqrt(1 - cosine**2) / (cosine * math.sqrt(1 - threshold**2))


def gac_act_fraction(staleness: int, threshold: float, steps: int = 300, seeds: int = 4, dim: int = 200) -> float:
    """Exercise 3.2: the fraction of steps on which GAC (project mode) acts, on notebook 3's flat quadratic
    (η = 1, η·λ_max = 0.5) at this staleness and threshold τ."""
    problem = QuadraticProblem(dim=dim, condition_number=100, curvature_max=0.5, noise=0.1)
    result = run_quadratic(problem, [setting("gac", staleness, 1.0, threshold=threshold)], steps=steps, seeds=seeds)
    return float(result.summary["act_fraction"].mean())


# --- 04: the bandit ---------------------------------------------------------------------------------------------------


def bandit_cosine(groups: int, staleness: int, steps: int = 400, seeds: int = 4, group_size: int = 32) -> float:
    """Exercise 4.1: the mean consecutive-gradient cosine of naive async on notebook 4's Gaussian bandit (step 0.2)
    with ``groups`` groups of ``group_size`` samples per step (the batch size) at this staleness."""
    problem = GaussianBandit(dim=10, condition_number=10.0, policy_std=0.5)
    result = run_bandit(problem, [setting("naive", staleness, 0.2)], steps, seeds, seed=0, groups=groups,
                        group_size=group_size)
    return float(result.summary["mean_cos_prev"].mean())


def softmax_kl(behaviour_logits: torch.Tensor, current_logits: torch.Tensor) -> torch.Tensor:
    """Exercise 4.2: KL(π_b ‖ π) = Σ_a π_b(a) (log π_b(a) − log π(a)) of two softmax policies (batched over leading
    dimensions)."""
    log_b = torch.log_softmax(behaviour_logits, dim=-1)
    log_p = torch.log_softmax(current_logits, dim=-1)
    return (log_b.exp() * (log_b - log_p)).sum(dim=-1)


# --- 00 and 05: the LLM testbed's committed runs --------------------------------------------------------------------


def paired_gap(runs: pd.DataFrame, arm: str, reference: str = "sync") -> tuple[float, float, float]:
    """Exercises 0.2 and 5.1: ``arm``'s final accuracy minus ``reference``'s on the same warm start and RL seed,
    averaged over seeds within each warm start, then the mean over warm starts with a 95 % t-interval."""
    table = runs.pivot_table(index=["warm_seed", "seed"], columns="arm", values="final_accuracy")
    per_warm_start = (table[arm] - table[reference]).groupby(level="warm_seed").mean().dropna()
    n = len(per_warm_start)
    mean = float(per_warm_start.mean())
    half = float(stats.t.ppf(0.975, n - 1) * per_warm_start.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def cosine_by_staleness(runs: pd.DataFrame) -> pd.DataFrame:
    """Exercise 5.2: per staleness of the naive-async and sync arms, the consecutive cosine and its bound
    SNR/(1+SNR), each the mean over warm starts of the warm start's seed mean."""
    arms = runs[runs.method.isin(["sync", "naive"])]
    per_warm_start = arms.groupby(["staleness", "warm_seed"])[["cos_prev", "cos_bound"]].mean()
    return per_warm_start.groupby(level="staleness").mean()


__all__ = [name for name, value in list(globals().items())
           if inspect.isfunction(value) and value.__module__ == __name__ and not name.startswith("_")]
