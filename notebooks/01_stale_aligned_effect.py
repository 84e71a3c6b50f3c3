# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1. The stale-aligned effect on a noisy quadratic
#
# **You will learn** how a delay turns descent into overshoot, where the step-size boundary $a^*(s)$ lies, what the
# consecutive-gradient cosine signature looks like, and in which phase of training it is strong.
# **Prerequisites:** [notebook 0](00_start_here.ipynb); gradient descent on a quadratic. **Time:** 20 minutes (the
# cells run in about 15 s). Claims shown: "staleness destabilizes where delayed-GD theory says" and "consecutive
# gradients stay aligned under staleness" ([Results: alignment in the toys](../RESULTS.md#alignment-in-the-toys));
# the paper: [arXiv:2603.01501](https://arxiv.org/abs/2603.01501).
#
# In asynchronous training the update at step $t$ uses a gradient computed at an older iterate,
# $x_{t-s}$ (staleness $s$). On the quadratic $f(x) = \tfrac12 \sum_i \lambda_i x_i^2$ with noisy
# gradients this is the **stale-gradient model**
#
# $$g_t = \Lambda x_{t-s} + \sigma \xi_t, \qquad x_{t+1} = x_t - \eta\, g_t .$$
#
# This notebook shows, in three steps, what staleness does: (1) on one direction without noise, the iterate
# overshoots, and beyond a step-size boundary it diverges; (2) in 200 dimensions with noise, stale runs have
# consecutive gradients that point the same way (cosine near 1) while synchronous runs do not, and the aligned
# runs diverge; (3) where the near-1 cosines come from: the phase where the gradient signal dominates the noise.
# Everything is computed by `theory/` and `sim/`; this notebook only calls and plots.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic
from theory.stability import companion_matrix, spectral_radius, stability_boundary_closed_form

torch.set_num_threads(1)  # tiny problems: one thread is enough and leaves the other cores free

# %% [markdown]
# ## 1. One direction: delay turns descent into overshoot
#
# Take one eigen-direction, no noise, $a = \eta\lambda = 0.3$: $x_{t+1} = x_t - a\,x_{t-s}$. The state
# $(x_t, \dots, x_{t-s})$ evolves by the companion matrix of $z^{s+1} - z^s + a$ (`theory.stability.companion_matrix`);
# its spectral radius $\rho$ decides decay ($\rho < 1$) or growth. The closed-form boundary is
# $a^*(s) = 2\sin\big(\pi / (2(2s+1))\big)$. We start from $x = 1$ everywhere (the first $s$ steps use $x_0$).

# %%
a, horizon = 0.3, 80
fig, ax = plt.subplots(figsize=(6, 3))
print(f"a = {a}")
print(f"{'s':>3}{'a*(s)':>8}{'rho':>8}{'min x_t':>10}{'|x_80|':>10}")
for s in (0, 2, 4, 8):
    m = companion_matrix(a, s)
    state, xs = np.ones(s + 1), [1.0]
    for _ in range(horizon):
        state = m @ state
        xs.append(state[0])
    xs = np.array(xs)
    print(f"{s:>3}{float(stability_boundary_closed_form(s)):>8.3f}{float(spectral_radius(a, s)):>8.3f}"
          f"{xs.min():>10.3f}{abs(xs[-1]):>10.3g}")
    ax.plot(xs, label=f"s = {s}")
ax.axhline(0, color="gray", lw=0.6)
ax.set(xlabel="step t", ylabel="x_t", ylim=(-3, 3), title="x_{t+1} = x_t − 0.3 x_{t−s} (no noise)")
ax.legend()
plt.show()

# %% [markdown]
# Read the table: synchronous descent ($s = 0$) never goes below 0 (min $x_t$ = 0 up to rounding). With delay the
# iterate crosses the optimum and keeps going, because the next $s$ updates were computed before the crossing and
# all push the same way: they are *aligned*. At $s = 2$ and $s = 4$, $a = 0.3$ is below $a^*(s)$, $\rho < 1$ and the
# oscillation dies out; at $s = 8$, $a > a^*(8)$, $\rho > 1$ and it grows without bound.

# %% [markdown]
# ## 2. Many directions with noise: the cosine signature and divergence
#
# `sim.quadratic.run_quadratic` runs the stale-gradient model on a 200-dimensional quadratic with
# $\lambda$ log-spaced over $[0.005, 0.5]$, $\eta = 1$ (so $\eta\lambda_{\max} = 0.5$), noise $\sigma = 0.1$,
# from $x_0 = \mathbf 1$, 4 seeds, and records $\cos(g_t, g_{t-1})$ of consecutive raw gradients (`cos_prev`).
# A diverged run is frozen where it was; its cosines read NaN from then on.

# %%
FLAT = QuadraticProblem(dim=200, condition_number=100, curvature_max=0.5, noise=0.1)
lr, stalenesses = 1.0, (0, 1, 2, 4, 8)
eta_lambda_max = lr * FLAT.curvature_max
grid = run_quadratic(FLAT, [setting("naive", s, lr) for s in stalenesses], steps=300, seeds=4)
cos, loss = grid.traces["cos_prev"], grid.traces["objective"]  # (steps, runs)
print(f"eta * lambda_max = {eta_lambda_max}")
print(f"{'s':>3}{'a*(s)':>8}{'mean cos, steps 1-49':>22}{'mean cos, steps 50-149':>24}{'diverged':>10}")
for i, s in enumerate(stalenesses):
    rows, diverged = grid.rows_of(i), grid.summary["diverged"][grid.rows_of(i)]
    print(f"{s:>3}{float(stability_boundary_closed_form(s)):>8.3f}{cos[1:50, rows].nanmean().item():>22.3f}"
          f"{cos[50:150, rows].nanmean().item():>24.3f}{int(diverged.sum()):>7}/{len(diverged)}")

fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for i, s in enumerate(stalenesses):
    label = "sync" if s == 0 else f"s = {s}"
    axes[0].plot(cos[1:, grid.rows_of(i)].nanmedian(dim=1).values, label=label, lw=1)
    axes[1].plot(loss[:, grid.rows_of(i)].median(dim=1).values, label=label, lw=1)
axes[0].set(xlabel="step", ylabel="cos(g_t, g_{t−1}), median over seeds", ylim=(-1, 1.05))
axes[1].set(xlabel="step", ylabel="loss f(x_t), median over seeds", yscale="log")
axes[0].legend(loc="lower right", fontsize=7)
plt.show()

# %% [markdown]
# The runs whose $\eta\lambda_{\max} = 0.5$ exceeds $a^*(s)$ (here $s = 4$ and $s = 8$) are the ones marked diverged,
# and they are the ones whose consecutive gradients are nearly parallel (the cosine columns); the stable runs'
# cosines stay small. The aligned gradients add up step after step, like a momentum nobody configured.

# %% [markdown]
# ## 3. Where do the near-1 cosines come from?
#
# Below the boundary, is the cosine of a stale run near 1 too? We run `sim.quadratic.run_quadratic` (100 dimensions,
# $\kappa = 100$, $\sigma = 0.1$, $x_0 = \mathbf 1$, 4 seeds) at $\eta\lambda_{\max} = 0.6\,a^*(s)$ for every $s$, so no
# run diverges, and compare the mean cosine over the first 50 steps after the pipeline filled (steps $s+1 \dots s+50$,
# while the gradient signal $\Lambda x$ is still large) with the mean after warm-up (steps 300–999, noise-dominated).

# %%
problem = QuadraticProblem(dim=100, condition_number=100.0, curvature_max=1.0, noise=0.1)
stalenesses = (0, 1, 2, 4, 8, 16)
settings = [setting("naive", s, 0.6 * float(stability_boundary_closed_form(s))) for s in stalenesses]
result = run_quadratic(problem, settings, steps=1000, seeds=4, warmup=300, record_every=1)
cos_trace = result.traces["cos_prev"]  # (steps, runs)
early, late = [], []
print(f"{'s':>3}{'eta*lambda_max':>16}{'early cos':>12}{'late cos':>10}{'diverged':>10}")
for i, s in enumerate(stalenesses):
    rows = result.rows_of(i)
    early.append(cos_trace[s + 1: s + 51, rows].nanmean().item())
    late.append(result.summary["mean_cos_prev"][rows].mean().item())
    print(f"{s:>3}{settings[i].lr:>16.3f}{early[-1]:>12.3f}{late[-1]:>10.3f}"
          f"{int(result.summary['diverged'][rows].sum()):>7}/4")

fig, ax = plt.subplots(figsize=(4.5, 3))
ax.plot(stalenesses, early, "o-", label="steps s+1 … s+50 (signal-dominated)")
ax.plot(stalenesses, late, "s-", label="steps 300–999 (noise-dominated)")
ax.set(xscale="symlog", xticks=stalenesses, xticklabels=[str(s) for s in stalenesses], xlabel="staleness s",
       ylabel="mean cos(g_t, g_{t−1})", ylim=(-0.5, 1))
ax.axhline(0, color="gray", lw=0.6)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# In this run the early (signal-dominated) cosine grows with $s$, while after warm-up, when the iterate sits in the
# noise floor, the cosine stays small at every $s$: the stationary noisy regime has modest alignment even at a step
# size that is 60 % of the boundary. Notebook 2 derives that stationary value exactly (`theory.cosine.predicted_cosine`)
# and shows that it approaches $\cos(\pi/(2s+1))$ only as $\eta\lambda_{\max} \to a^*(s)$. The strong alignment of
# asynchronous training is a property of the phase where the gradient dominates the noise, and of runs past the
# boundary — which is where GAC acts (notebook 3).

# %% [markdown]
# ## Exercise 1.1 — predict, then measure: which staleness breaks a = 0.3?
#
# Section 1 used $a = \eta\lambda = 0.3$: stable at $s = 4$, divergent at $s = 8$. **Predict** the smallest staleness
# at which $x_{t+1} = x_t - 0.3\,x_{t-s}$ grows — from the boundary table printed in section 1, or from
# $a^*(s) = 2\sin(\pi/(2(2s+1)))$ — then **measure** it: fill in `smallest_diverging_staleness` by iterating the
# recursion for $s = 0, 1, 2, \dots$ and checking whether the late iterates are larger than the early ones.

# %%
from course import exercises, solutions

my_prediction = None  # the smallest s at which a = 0.3 diverges


def smallest_diverging_staleness(a):
    """The smallest staleness s at which x_(t+1) = x_t − a·x_(t−s) grows (None up to s = 64)."""
    raise NotImplementedError  # your code here


# %%
exercises.check(smallest_diverging_staleness, solutions.smallest_diverging_staleness, [(0.3,), (0.5,), (0.1,)])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 1.1](../course/solutions.md#exercise-11).

# %% [markdown]
# ## Exercise 1.2 — predict, then measure: does more noise change the stationary cosine?
#
# In section 3, after warm-up, the cosine at $s = 4$ and $\eta\lambda_{\max} = 0.6\,a^*(4)$ was small. **Predict**: if
# the gradient noise $\sigma$ were 10 times larger (1.0 instead of 0.1), would the late cosine go down (more noise),
# up, or stay? Then **measure** it: fill in `late_cosine` with `run_quadratic` as in section 3 (4 seeds, 1000 steps,
# the mean `mean_cos_prev` after a warm-up of 300 steps) and compare both noise levels.

# %%
my_prediction = None  # "down", "up" or "same"


def late_cosine(noise, staleness):
    """The mean consecutive-gradient cosine after warm-up of section 3's run at this noise σ and staleness."""
    raise NotImplementedError  # your code here


# %%
exercises.check(late_cosine, solutions.late_cosine, [(0.1, 4), (1.0, 4)], atol=0.05)

# %% [markdown]
# Solution and discussion: [Solutions, exercise 1.2](../course/solutions.md#exercise-12).
