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
# # 3. GAC: the projection geometry, its modes, the ablation
#
# **You will learn** what GAC's projection removes from a gradient and what it keeps, how its modes (project, cap,
# skip) and references (previous gradient, EMA) differ, and what each does to a stale run on the noisy quadratic.
# **Prerequisites:** notebook 1; vectors, dot products and projections. **Time:** 20 minutes (the cells run in a few
# seconds). Claims shown: "GAC keeps stale runs stable" and "GAC matches sync at high staleness" (not reproduced)
# ([Results: GAC keeps runs finite](../RESULTS.md#gac-keeps-runs-finite),
# [Results: verdict](../RESULTS.md#verdict)). The paper: [arXiv:2603.01501](https://arxiv.org/abs/2603.01501).
#
# Gradient Alignment Control looks at two vectors: the current raw gradient $g$ and a reference direction $d$
# (the previous raw gradient, or an EMA of past ones). With $c = \cos(g, d)$ and threshold $\tau$:
#
# * $c \le \tau$: **keep** — $g$ passes untouched (one-directional: anti-aligned gradients are never touched);
# * $c > \tau$, mode **project**: $g' = g - \langle g, \hat d\rangle \hat d$ — the whole parallel part is removed;
# * $c > \tau$, mode **cap**: $g' = g_\perp + \gamma g_\parallel$ with $\gamma = \tau\sqrt{1-c^2} / (c\sqrt{1-\tau^2})$, so that $\cos(g', d) = \tau$ exactly;
# * $c > \tau_{skip}$: **skip** — no update at all.
#
# Everything below calls the library (`gac.control`, batched over leading dimensions); nothing is re-implemented here.

# %%
import math

import matplotlib.pyplot as plt
import torch

import gac

d = torch.tensor([1.0, 0.0])
g = torch.tensor([0.9, 0.35])  # cos(g, d) ≈ 0.93
tau = 0.5
projected = gac.control(g, d, gac.GACConfig(threshold=tau, mode="project"))
capped = gac.control(g, d, gac.GACConfig(threshold=tau, mode="cap"))
print(f"cos(g, d) = {gac.alignment(g, d).item():.3f}")
print(f"project: g' = {projected.grad.tolist()}, cos(g', d) = {gac.alignment(projected.grad, d).item():.3f}")
print(f"cap:     g' = {[round(v, 3) for v in capped.grad.tolist()]}, cos(g', d) = "
      f"{gac.alignment(capped.grad, d).item():.3f}, gamma = {capped.parallel_scale.item():.3f}")

# %%
fig, ax = plt.subplots(figsize=(4, 3))
for vec, name, color in [(d, "reference d", "gray"), (g, "raw g", "black"),
                         (projected.grad, "project", "tab:blue"), (capped.grad, "cap (τ = 0.5)", "tab:orange")]:
    ax.annotate("", xy=vec.tolist(), xytext=(0, 0), arrowprops=dict(arrowstyle="->", color=color, lw=2))
    ax.plot([], [], color=color, label=name)
ax.set(xlim=(-0.1, 1.1), ylim=(-0.1, 0.5), aspect="equal", xlabel="along d", ylabel="orthogonal to d")
ax.legend(loc="upper left", fontsize=8)
plt.show()

# %% [markdown]
# The orthogonal part is kept whole in both modes; only the component along $d$ shrinks. The parallel scale
# $\gamma$ of cap mode, as a function of the measured cosine, for a few thresholds (computed by `gac.control` on a
# batch of synthetic gradients with a prescribed cosine):

# %%
cosines = torch.linspace(0.0, 0.999, 400, dtype=torch.float64)
batch_g = torch.stack([cosines, (1 - cosines**2).sqrt()], dim=-1)  # unit vectors at angle acos(c) to d
batch_d = torch.tensor([1.0, 0.0], dtype=torch.float64).expand_as(batch_g)
fig, ax = plt.subplots(figsize=(4, 2.6))
for tau in (0.1, 0.3, 0.5, 0.7):
    out = gac.control(batch_g, batch_d, gac.GACConfig(threshold=tau, mode="cap"))
    ax.plot(cosines, out.parallel_scale, label=f"τ = {tau}")
ax.set(xlabel="cos(g, d)", ylabel="parallel scale γ", title="cap mode: γ = 1 below τ, falls to 0 at c = 1")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## The modes on a stale noisy quadratic
#
# `sim.quadratic.run_quadratic` runs delayed SGD ($s = 8$) on a noisy quadratic whose step size synchronous SGD
# handles well; the stale run diverges. Each variant is one grid setting (`sim.grid.setting`, method "gac" with its
# `GACConfig` fields), all run together on the same noise:

# %%
from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic

FLAT = QuadraticProblem(dim=200, condition_number=100, curvature_max=0.5, noise=0.1)
variants = {
    "sync (s=0)": setting("naive", 0, 1.0),
    "naive (s=8)": setting("naive", 8, 1.0),
    "gac project τ=0": setting("gac", 8, 1.0, threshold=0.0),
    "gac project τ=0.3": setting("gac", 8, 1.0, threshold=0.3),
    "gac cap τ=0.3": setting("gac", 8, 1.0, threshold=0.3, mode="cap"),
    "gac cap τ=0.3, skip>0.9": setting("gac", 8, 1.0, threshold=0.3, mode="cap", skip_threshold=0.9),
    "gac project τ=0, EMA ref": setting("gac", 8, 1.0, threshold=0.0, reference="ema", ema_decay=0.9),
}
grid = run_quadratic(FLAT, list(variants.values()), steps=300, seeds=8)
cos, loss = grid.traces["cos_prev"], grid.traces["objective"]  # (steps, runs)
print(f"{'variant':<28}{'mean cos_prev':>14}{'final loss':>12}{'diverged':>10}")
for i, name in enumerate(variants):
    rows, diverged = grid.rows_of(i), grid.summary["diverged"][grid.rows_of(i)]
    print(f"{name:<28}{cos[50:150, rows].nanmean().item():>14.3f}{loss[-1, rows].median().item():>12.3g}"
          f"{int(diverged.sum()):>7}/{len(diverged)}")

# %% [markdown]
# Things to notice in this table (they are measured, not designed in):
#
# * the stale run's consecutive cosine is near 1, sync's near 0 — the signature;
# * projecting at τ = 0 or τ = 0.3 gives nearly the same run here, because nearly every stale gradient is aligned above 0.3;
# * cap keeps more of the parallel part (its measured raw cosine stays higher) and ends at a higher loss;
# * with an EMA reference (β = 0.9) the projection removes the direction of the *average* past gradient, not of the
#   last one, and on this problem that does not stop the divergence.
#
# The systematic version of this comparison — thresholds, modes, references, update space, and the other
# stabilizers, at several staleness levels — is figure 6 (`python -m paper_figs fig6_ablation`).

# %% [markdown]
# ## Exercise 3.1 — the cap mode's parallel scale, by hand
#
# Cap mode keeps $g_\perp$ whole and scales $g_\parallel$ by $\gamma$ so that $\cos(g', d) = \tau$ exactly. Derive
# $\gamma$ as a function of $c = \cos(g, d)$ and $\tau$ (hint: $\tan$ of the angle between $g'$ and $d$ is
# $\|g_\perp\| / (\gamma\|g_\parallel\|)$), fill in `cap_parallel_scale`, and compare it with what `gac.control`
# reported for the example at the top ($c \approx 0.93$, $\tau = 0.5$).

# %%
from course import exercises, solutions


def cap_parallel_scale(cosine, threshold):
    """γ such that g' = g⊥ + γ·g∥ has cos(g', d) = threshold (1 where cosine ≤ threshold)."""
    raise NotImplementedError  # your code here


# %%
exercises.check(cap_parallel_scale, solutions.cap_parallel_scale,
                [(gac.alignment(g, d).item(), 0.5), (0.2, 0.5), (0.6, 0.3)])
print(f"gac.control's parallel scale for the example: {capped.parallel_scale.item():.6f}")

# %% [markdown]
# Solution and discussion: [Solutions, exercise 3.1](../course/solutions.md#exercise-31).

# %% [markdown]
# ## Exercise 3.2 — predict, then measure: how often does GAC act, sync vs stale?
#
# GAC (project, $\tau = 0.3$) acts on a step when $\cos(g_t, g_{t-1}) > 0.3$. **Predict** the fraction of steps on which
# it acts on the flat quadratic above at staleness 0 (sync) and at staleness 8 — all, about half, or none? Then
# **measure** it: fill in `gac_act_fraction` (the `act_fraction` of the run's summary, 4 seeds × 300 steps).

# %%
my_prediction = {0: None, 8: None}  # fraction of steps GAC acts on


def gac_act_fraction(staleness, threshold):
    """The fraction of steps on which GAC (project) acts on the flat quadratic above."""
    raise NotImplementedError  # your code here


# %%
exercises.check(gac_act_fraction, solutions.gac_act_fraction, [(0, 0.3), (8, 0.3)], atol=0.1)

# %% [markdown]
# Solution and discussion: [Solutions, exercise 3.2](../course/solutions.md#exercise-32).
