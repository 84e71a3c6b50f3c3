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
# # 4. Policy gradient on a bandit with stale data
#
# **You will learn** the stale-*data* model of asynchronous RL (rollouts from an old policy, gradient at the new one),
# how GRPO-style advantages and importance weights enter it, and why staleness hurts a Gaussian-policy bandit but not a
# saturating softmax bandit. **Prerequisites:** notebooks 1 and 3; the policy gradient (REINFORCE) and importance
# sampling. **Time:** 25 minutes (the cells run in about 30 s). Claims shown: "consecutive gradients stay aligned under
# staleness — where the signal dominates the noise" and "with the step size tuned, TIS wins on stale data"
# ([Results: alignment in the toys](../RESULTS.md#alignment-in-the-toys)). The paper:
# [arXiv:2603.01501](https://arxiv.org/abs/2603.01501).
#
# Asynchronous RL does not delay the *gradient*; it delays the *data*. At step $t$ the learner holds $\theta_t$, but the
# batch was sampled from the behaviour policy $\pi_{\theta_{t-s}}$, and the policy gradient is taken at $\theta_t$ on those samples
# (the **stale-data model**). `sim.bandit.run_bandit` does this GRPO-style: $B$ groups of $G$ samples, advantages
# $A_i = (r_i - \bar r_{\text{group}})/\mathrm{std}_{\text{group}}$, loss $-\frac{1}{BG}\sum_i w_i A_i \log\pi_\theta(a_i)$, with sample weights
#
# * $w_i = 1$ for `naive` (naive async), `gac` and `lr_scale`;
# * $w_i = \min(\pi_\theta/\pi_b, C)$ for `tis` (truncated importance sampling, $C = 2$);
# * the M2PO mask times $\pi_\theta/\pi_b$ for `m2po` (drops the samples with the largest $(\log r)^2$ until the batch's second
#   moment of $\log r$ is at most 0.04).
#
# `gac` projects out the part of the gradient along the previous raw gradient when their cosine exceeds $\tau = 0$;
# `lr_scale` divides the step by $1 + s$. Two bandits, same batch size $B = 8$, $G = 32$, 400 steps, 4 seeds:
# a Gaussian policy on a concave quadratic reward, and a 10-armed softmax bandit with Bernoulli rewards.

# %%
import matplotlib.pyplot as plt
import torch

from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit
from sim.grid import setting

torch.set_num_threads(1)
GROUPS, GROUP_SIZE, STEPS, SEEDS = 8, 32, 400, 4
STALENESS = (0, 2, 4, 8, 16)
METHODS = ("tis", "m2po", "gac", "lr_scale")
COMPARE_AT = 8


def run(problem, lr):
    # naive async over staleness, then every method at s = COMPARE_AT; all settings in one vectorized run
    settings = [setting("naive", s, lr) for s in STALENESS] + [setting(m, COMPARE_AT, lr) for m in METHODS]
    return run_bandit(problem, settings, STEPS, SEEDS, seed=0, groups=GROUPS, group_size=GROUP_SIZE, record_every=5)


def table(result):
    optimum = result.meta["optimal_reward"]
    sync_gap = None
    print(f"initial reward gap J* - J = {optimum - result.meta['initial_reward']:.3g}")
    print(f"{'run':<14}{'mean cos':>10}{'final gap (median)':>20}{'gap / sync':>12}{'KL(pi_b||pi)':>14}{'mean w':>8}"
          f"{'entropy':>9}{'diverged':>10}")
    for i, s in enumerate(result.settings):
        rows = result.rows_of(i)
        gap = (optimum - result.summary["final_objective"][rows]).median().item()
        sync_gap = gap if sync_gap is None else sync_gap
        kl = result.traces["kl_behaviour"][-1, rows].mean().item()
        weight = result.traces["mean_weight"][-1, rows].mean().item()
        entropy = result.traces["entropy"][-1, rows].mean().item()  # of the current policy, last recorded step
        print(f"{s.name + f' s={s.staleness}':<14}{result.summary['mean_cos_prev'][rows].mean().item():>10.3f}"
              f"{gap:>20.3g}{gap / sync_gap:>12.2f}{kl:>14.3g}{weight:>8.3f}{entropy:>9.3g}"
              f"{int(result.summary['diverged'][rows].sum()):>7}/{SEEDS}")


def plot(result, title):
    optimum = result.meta["optimal_reward"]
    steps = result.steps.numpy()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    for i, s in enumerate(result.settings):
        rows = result.rows_of(i)
        label = f"{s.name} s={s.staleness}"
        style = "-" if s.method == "naive" else "--"
        gap = (optimum - result.traces["objective"][:, rows]).median(dim=1).values
        cos = result.traces["cos_prev"][:, rows].median(dim=1).values
        axes[0].plot(steps, cos, style, lw=1, label=label)
        axes[1].plot(steps, gap, style, lw=1, label=label)
    axes[0].set(title=title, xlabel="step", ylabel="cos(g_t, g_{t−1}), median", ylim=(-1, 1.05))
    axes[1].set(title=title, xlabel="step", ylabel="reward gap J* − J, median", yscale="log")
    axes[1].legend(fontsize=6, ncol=2)
    plt.show()


# %% [markdown]
# ## 1. Gaussian policy: staleness hurts
#
# $a \sim \mathcal N(\mu, 0.5^2 I)$ in 10 dimensions, reward $-\tfrac12\sum_i h_i (a_i - 1)^2$ with $h$ log-spaced over $[0.1, 1]$,
# step size 0.2. With the group-mean baseline the stale-data gradient of this policy equals the *stale-gradient* model's
# $\nabla J(\mu_{t-s})$ up to the std normalization (theory/README.md §2), so it behaves like the delayed quadratic.

# %%
gaussian = run(GaussianBandit(dim=10, condition_number=10.0, policy_std=0.5), lr=0.2)
table(gaussian)
plot(gaussian, "Gaussian-policy bandit")

# %% [markdown]
# Read the table from top to bottom: the naive-async rows show the consecutive cosine rising with $s$ and the final reward
# gap growing with it (column *gap / sync*); the KL between behaviour and current policy grows too, because the policy moved
# far from where the data came from. The rows below compare the fixes at $s = 8$ on the same numbers. Importance
# weighting (`tis`) and masking (`m2po`) correct the data's mismatch, so their cosine drops back; GAC leaves the
# data alone and removes the aligned part of each gradient; `lr_scale` shrinks the step. The *gap / sync* column says how
# close each gets to synchronous training on this problem. (The Gaussian policy's standard deviation is fixed, so
# its entropy column is constant.)

# %% [markdown]
# ## 2. Softmax bandit: staleness is harmless here
#
# 10 arms, tabular logits, Bernoulli rewards with fixed success probabilities, step size 1, same batch. The *entropy*
# column is the current policy's entropy at the last step (log 10 ≈ 2.3 for the uniform start); the *KL* column says how
# far the stale behaviour policy is from the current one.

# %%
softmax = run(SoftmaxBandit(arms=10), lr=1.0)
table(softmax)
plot(softmax, "10-armed softmax bandit")

# %% [markdown]
# Here the naive-async rows end at or below synchronous training's gap, with a near-zero entropy (the policy has
# concentrated) and a tiny KL to the behaviour policy: the stale and the current policy sample almost the same actions, so
# there is nothing for a stabilizer to fix. A stabilizer that acts anyway can cost something: compare the *gap / sync*
# column of the `gac` and `lr_scale` rows with naive async at the same $s$. The mechanism of the phenomenon —
# aligned consecutive gradients that overshoot — needs the policy to keep moving while the data lags, which the
# Gaussian bandit has and the saturating softmax bandit does not.
#
# The systematic version over batch sizes (signal-to-noise) and three bandits is `python -m paper_figs figs1_bandit_snr`.

# %% [markdown]
# ## Exercise 4.1 — predict, then measure: the batch size and the signature
#
# The bound of notebook 2 says the consecutive cosine can only be high when the gradient's signal dominates its noise.
# **Predict** how the mean consecutive cosine of naive async at $s = 8$ on the Gaussian bandit changes when each step
# samples 1 group instead of 8 (32 samples instead of 256), and when it samples 32 groups. Then **measure** it: fill in
# `bandit_cosine` with `run_bandit` (groups of 32, step 0.2, 4 seeds × 400 steps).

# %%
from course import exercises, solutions

my_prediction = {1: None, 8: None, 32: None}  # mean cos at s = 8 for 1, 8, 32 groups


def bandit_cosine(groups, staleness):
    """The mean consecutive-gradient cosine of naive async on this bandit with ``groups`` groups per step."""
    raise NotImplementedError  # your code here


# %%
exercises.check(bandit_cosine, solutions.bandit_cosine, [(1, 8), (32, 8)], atol=0.1)

# %% [markdown]
# Solution and discussion: [Solutions, exercise 4.1](../course/solutions.md#exercise-41).

# %% [markdown]
# ## Exercise 4.2 — the KL between the behaviour and the current policy
#
# The table's `KL(pi_b||pi)` column measures how far the policy moved while its data was in flight. Fill in the KL
# divergence $\mathrm{KL}(\pi_b \,\|\, \pi) = \sum_a \pi_b(a)\,(\log\pi_b(a) - \log\pi(a))$ of two softmax policies given by their
# logits; the check evaluates it for a uniform behaviour policy over 10 arms and a current policy that puts logit 3 on
# one arm, both ways round.

# %%
uniform, peaked = torch.zeros(10), torch.zeros(10)
peaked[0] = 3.0


def softmax_kl(behaviour_logits, current_logits):
    """KL(π_b ‖ π) of two softmax policies given by their logits."""
    raise NotImplementedError  # your code here


# %%
exercises.check(softmax_kl, solutions.softmax_kl, [(uniform, peaked), (peaked, uniform)])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 4.2](../course/solutions.md#exercise-42).
