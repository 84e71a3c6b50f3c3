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
# # 0. Start here: the story in ten minutes
#
# **You will learn** what the GAC paper claims (stale gradients stay aligned, overshoot and diverge; removing the
# aligned part fixes it), what its two central figures look like when this package reproduces them, and which
# claims held here and which did not. **Prerequisites:** gradient descent and what a policy gradient is; no code
# needed. **Time:** 10 minutes to read; the cells run in a few seconds.
#
# The paper: Xu, Su, Tian, Diao, Qian, Wu, *GAC: Stabilizing Asynchronous RL Training for LLMs via Gradient Alignment
# Control*, [arXiv:2603.01501](https://arxiv.org/abs/2603.01501) (2026). Every number this course quotes comes from
# [RESULTS.md](../RESULTS.md) (with its setting and interval) or is computed in the notebook in front of you.

# %% [markdown]
# ## The story
#
# In asynchronous RL the learner updates $\theta_t$ with rollouts sampled by an older policy $\theta_{t-s}$: the data
# is $s$ steps stale. The paper reports three things:
#
# 1. **The signature.** Consecutive gradients then stay *aligned*: $\cos(g_t, g_{t-1})$ stays high, where synchronous
#    training gives near-orthogonal gradients.
# 2. **The failure.** Aligned steps add up like a momentum nobody configured; the sum overshoots and training diverges.
# 3. **The fix, GAC.** Measure that cosine; when it is above a threshold, remove (or shrink) the part of the current
#    gradient along the previous one. With GAC, asynchronous GRPO matches synchronous training at staleness $s \ge 8$.
#
# The mechanism fits in one line. On one direction of a quadratic, with step $a = \eta\lambda$, delayed gradient descent
# is $x_{t+1} = x_t - a\,x_{t-s}$: each update was computed $s$ steps ago, so after the iterate crosses the optimum the
# next $s$ updates still push the same way.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from course import solutions
from course.build import ROOT, findings_section

fig, ax = plt.subplots(figsize=(6, 2.8))
for staleness in (0, 4, 8):
    ax.plot(solutions.delayed_iterate(0.3, staleness, 60), label=f"s = {staleness}")
ax.axhline(0, color="gray", lw=0.6)
ax.set(xlabel="step $t$", ylabel="$x_t$", ylim=(-3, 3), title=r"$x_{t+1} = x_t - 0.3\,x_{t-s}$")
ax.legend()
plt.show()

# %% [markdown]
# Synchronous descent ($s = 0$) glides to 0; at $s = 4$ the iterate overshoots and rings down; at $s = 8$ the same
# step size makes it grow without bound. Delayed-GD theory says exactly where: the step must stay below
# $a^*(s) = 2\sin\big(\pi/(2(2s+1))\big)$ (notebook 2 derives it).

# %% [markdown]
# ## The paper's two figures, reproduced here
#
# **Figure 1 — the signature: consecutive-gradient cosine over training, sync vs staleness $s$** (quadratic, bandit
# and LLM panels; `python -m paper_figs fig1_cosine`):
#
# ![fig1: consecutive-gradient cosine](../docs/figures/fig1_cosine.png)
#
# Where the gradient's signal dominates its noise the signature is strong: in the Gaussian bandit the mean cosine grows
# from slightly negative in sync to near 1 at $s = 16$ ([Results: alignment in the toys](../RESULTS.md#alignment-in-the-toys)).
# In the small LLM it is weak. The LLM testbed's version (8 warm starts × 2 seeds, 200 GRPO steps;
# `python -m paper_figs.llm_testbed`):
#
# ![fig1, LLM testbed](../docs/figures/fig1_cosine_llm_testbed.png)
#
# **Figure 3 — the failure and the fix: objective and gradient norm over training, sync vs naive async vs async + GAC**
# (`python -m paper_figs fig3_divergence`):
#
# ![fig3: divergence](../docs/figures/fig3_divergence.png)
#
# and the LLM testbed's version:
#
# ![fig3, LLM testbed](../docs/figures/fig3_divergence_llm_testbed.png)

# %% [markdown]
# ## What this package found
#
# The README's findings table, read from the README itself (so it is the current one). "Reproduced" rows: staleness
# destabilizes where theory says, and GAC keeps stale runs finite. "Not reproduced": GAC does not match synchronous
# training, and in the small LLM the gradient is so noisy that the aligned-gradient signature is weak — as the bound
# $\cos \le \mathrm{SNR}/(1+\mathrm{SNR})$ of notebook 2 predicts. Details: [Results: verdict](../RESULTS.md#verdict).

# %%
display(Markdown(findings_section((ROOT / "README.md").read_text(), link_prefix="../")))

# %% [markdown]
# ## The path through the course
#
# | notebook | question | time |
# |---|---|---|
# | 1. the stale-aligned effect | what does staleness do to gradient descent on a noisy quadratic? | 20 min |
# | 2. the theory | where exactly is the stability boundary, and how large can the cosine be? | 40 min |
# | 3. GAC's geometry | what does the projection remove, and what do its modes do on a stale run? | 20 min |
# | 4. bandits | stale *data* rather than stale gradients: when does staleness hurt a policy gradient? | 25 min |
# | 5. a small LLM | does any of it show in GRPO on a transformer? | 10 min |
#
# Each notebook has exercises: you fill in a function and a check cell compares it with the solution. The solutions
# and their discussion are on [the Solutions page](../course/solutions.md) (the code: `course/solutions.py`, which
# the test suite checks against independent computations).

# %% [markdown]
# ## Exercise 0.1 — predict, then measure: the largest stable step at staleness 8
#
# The paper's experiments use staleness $s \ge 8$. **Predict** the largest step $a = \eta\lambda$ at which
# $x_{t+1} = x_t - a\,x_{t-8}$ still decays: is it closer to 2 (the synchronous limit), 1, or 0.2? Write your guess
# below, then **measure** it: fill in `measured_stability_boundary` by iterating the recursion for a grid of steps (no
# theory allowed; `solutions.grows(a, s)` tells whether one step grows, if you want a start). Then run the check cell.

# %%
from course import exercises

my_prediction = None  # your guess for the largest stable a at s = 8


def measured_stability_boundary(staleness):
    """The largest step a on the grid 0.005, 0.010, …, 2.0 at which x_(t+1) = x_t − a·x_(t−s) does not grow."""
    raise NotImplementedError  # your code here


# %%
exercises.check(measured_stability_boundary, solutions.measured_stability_boundary, [(8,), (0,)])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 0.1](../course/solutions.md#exercise-01).

# %% [markdown]
# ## Exercise 0.2 — what does staleness cost the small LLM?
#
# The testbed's committed runs (`docs/data/llm_figures_runs.csv`, loaded below as `runs_table`, one row per run) hold
# each run's final held-out accuracy. Fill in `paired_gap(runs, arm)`: the arm's final accuracy minus sync's *on the
# same warm start and RL seed*, averaged over the two seeds of each warm start, then the mean over the 8 warm starts
# with a 95 % t-interval, as `(mean, low, high)`. Compare with [the testbed's table](../RESULTS.md#the-llm-testbed).

# %%
runs_table = pd.read_csv(ROOT / "docs" / "data" / "llm_figures_runs.csv")


def paired_gap(runs, arm):
    """(mean, low, high): ``arm`` minus sync, paired on warm start and seed, 95 % t-interval over warm starts."""
    raise NotImplementedError  # your code here


# %%
exercises.check(paired_gap, solutions.paired_gap, [(runs_table, "naive s=16")])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 0.2](../course/solutions.md#exercise-02).
# Next: [notebook 1](01_stale_aligned_effect.ipynb).

