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
# # 2. The theory: stability boundary, predicted cosine and its SNR law, convergence bound, GAC's stability region
#
# **You will learn** to derive the stability boundary $a^*(s)$ with sympy and check it numerically, to predict the
# stationary consecutive-gradient cosine and its bound $\mathrm{SNR}/(1+\mathrm{SNR})$, to read GAC-SGD's convergence
# bound against measured runs, and how far GAC's projection moves the stability boundary.
# **Prerequisites:** notebook 1; linear recursions and their characteristic polynomial; a little probability
# (stationary variance). **Time:** 40 minutes (the cells run in about a minute). Claims shown: the theory rows of
# [Results: the SNR law](../RESULTS.md#the-snr-law) (the boundary, the SNR law, the bound); full statements and proofs in
# `theory/README.md`. The paper: [arXiv:2603.01501](https://arxiv.org/abs/2603.01501).
#
# Each result lives in `theory/` as a function with a `check_*` beside it; this notebook calls them.
# Model (stale-gradient, one eigen-direction of a quadratic): $x_{t+1} = x_t - a\,x_{t-s} - \eta\sigma\xi_t$, $a = \eta\lambda$.

# %%
import matplotlib.pyplot as plt
import numpy as np
import sympy as sp
import torch
from IPython.display import Math, display

from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic
from theory import convergence, cosine, gac_stability, stability

torch.set_num_threads(1)

# %% [markdown]
# ## 1. The stability boundary $a^*(s)$
#
# Substituting $x_t = z^t$ into the recursion gives the characteristic polynomial (derived by sympy in
# `stability.characteristic_polynomial`, not typed in):

# %%
for s in range(4):
    display(Math(rf"s = {s}:\quad p_s(z) = {sp.latex(stability.characteristic_polynomial(s))}"))

# %% [markdown]
# Stability is lost when a root crosses $|z| = 1$. On $z = e^{i\omega}$, $a = -e^{i\omega s}(e^{i\omega} - 1)$ must be real and
# positive: its imaginary part factors as $2\cos(\omega(2s+1)/2)\sin(\omega/2)$, first zero at $\omega = \pi/(2s+1)$, and its
# modulus is $2\sin(\omega/2)$. `stability.boundary_derivation` holds these steps; `check_boundary_symbolic` verifies
# the identities for general $s$ and that $p_s(e^{i\pi/(2s+1)}) = 0$ exactly at $a = a^*(s)$ for small $s$:

# %%
d = stability.boundary_derivation()
display(Math(r"\mathrm{Im} = " + sp.latex(d["imag_part"]) + " = " + sp.latex(d["product_form"])))
display(Math(r"a^*(s) = " + sp.latex(d["a_star"])))
print("symbolic check (s <= 3):", stability.check_boundary_symbolic(3))

# %% [markdown]
# The numeric check is independent of the closed form: bisection on the spectral radius of the companion matrix.

# %%
print(f"{'s':>3}{'closed form':>14}{'bisection on roots':>20}{'abs diff':>10}")
for s in (0, 1, 2, 4, 8, 16, 32):
    closed, numeric = float(stability.stability_boundary_closed_form(s)), stability.stability_boundary(s)
    print(f"{s:>3}{closed:>14.10f}{numeric:>20.10f}{abs(closed - numeric):>10.1e}")

# %% [markdown]
# ## 2. Bounded-random staleness: the mean-square boundary
#
# If $s_t \sim U\{0..s_{\max}\}$ i.i.d., the second moments evolve linearly with $\mathbb E[A_{s_t} \otimes A_{s_t}]$;
# `mean_square_boundary_random` bisects on its spectral radius (no closed form claimed). Compare with the fixed-delay
# boundary at $s_{\max}$:

# %%
s_grid = np.arange(0, 9)
fixed = stability.stability_boundary_closed_form(s_grid)
random_ms = np.array([stability.mean_square_boundary_random(int(s), tol=1e-7) for s in s_grid])
for s, f, r in zip(s_grid, fixed, random_ms, strict=True):
    print(f"s_max = {s}:  a*(s_max) = {f:.4f}   mean-square boundary, s_t ~ U(0..s_max) = {r:.4f}")
fig, ax = plt.subplots(figsize=(4.5, 3))
ax.plot(s_grid, fixed, "o-", label="fixed s: a*(s)")
ax.plot(s_grid, random_ms, "s-", label="random s_t ~ U{0..s}: mean-square")
ax.set(xlabel="s (or s_max)", ylabel="largest stable a = ηλ", yscale="log")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 3. The predicted stationary cosine
#
# With noise the per-direction state has a stationary covariance (discrete Lyapunov equation), which gives
# $\mathbb E[g_t g_{t-1}]$ and $\mathbb E[g_t^2]$; `cosine.predicted_cosine` sums them over the spectrum. At $s = 0$ sympy gives a
# closed form per direction:

# %%
sync = cosine.cosine_sync_closed_form()
display(Math(r"s = 0:\quad \tilde P = " + sp.latex(sync["variance"]) + r",\quad \cos = " + sp.latex(sync["cosine"])))

# %% [markdown]
# Now the curve against simulation: noisy quadratic (`sim.quadratic`, $d = 100$, $\lambda$ log-spaced over $[0.01, 1]$,
# started at $x_0 = 0.01\cdot\mathbf 1$ so that the noise dominates from the start), step size $\eta\lambda_{\max} = r\,a^*(s)$,
# mean cosine over steps 300–999, 4 seeds. Lines: `predicted_cosine` at integer $s$; dashed: the boundary limit
# $\cos(\pi/(2s+1))$ (`cosine.cosine_at_boundary`).

# %%
problem = QuadraticProblem(dim=100, condition_number=100.0, curvature_max=1.0, noise=0.1, init_scale=0.01)
curvatures = problem.curvatures().numpy()
stalenesses, fractions = (0, 1, 2, 4, 8, 16), (0.3, 0.6, 0.9)
settings = [setting("naive", s, r * float(stability.stability_boundary_closed_form(s)))
            for r in fractions for s in stalenesses]
result = run_quadratic(problem, settings, steps=1000, seeds=4, warmup=300, record_every=1000)

fig, ax = plt.subplots(figsize=(5, 3.2))
grid = np.arange(17)
ax.plot(grid, cosine.cosine_at_boundary(grid), "k--", lw=1, label="cos(π/(2s+1))")
print(f"{'r':>4}{'s':>4}{'predicted':>11}{'simulated (mean ± std over seeds)':>36}")
for k, r in enumerate(fractions):
    theory_line = [cosine.predicted_cosine(r * float(stability.stability_boundary_closed_form(s)), curvatures, int(s))
                   for s in grid]
    line, = ax.plot(grid, theory_line, lw=1)
    means, stds = [], []
    for j, s in enumerate(stalenesses):
        runs = result.summary["mean_cos_prev"][result.rows_of(k * len(stalenesses) + j)]
        means.append(runs.mean().item())
        stds.append(runs.std().item())
        predicted = cosine.predicted_cosine(settings[k * len(stalenesses) + j].lr, curvatures, s)
        print(f"{r:>4}{s:>4}{predicted:>11.3f}{means[-1]:>25.3f} ± {stds[-1]:.3f}")
    ax.errorbar(stalenesses, means, yerr=stds, fmt="o", ms=3, color=line.get_color(), label=f"r = {r}")
ax.set(xscale="symlog", xticks=stalenesses, xticklabels=[str(s) for s in stalenesses], xlabel="staleness s",
       ylabel=r"stationary $\cos(g_t, g_{t-1})$", ylim=(-1.05, 1.05))
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# The simulated points sit on the predicted values (the table prints both). The stationary cosine is modest here; the
# boundary limit $\cos(\pi/(2s+1))$ is reached only as the top $\eta\lambda$ approaches $a^*(s)$, because only the top direction's
# variance blows up there and it is one of 100 directions. The prediction as a function of $r = \eta\lambda_{\max}/a^*(s)$:

# %%
for s in (1, 4, 8):
    a_star = float(stability.stability_boundary_closed_form(s))
    values = [cosine.predicted_cosine(r * a_star, curvatures, s) for r in (0.5, 0.9, 0.99, 0.999, 0.9999)]
    print(f"s = {s}: predicted at r = 0.5, 0.9, 0.99, 0.999, 0.9999: "
          + ", ".join(f"{v:.3f}" for v in values) + f"   limit cos(π/(2s+1)) = {float(cosine.cosine_at_boundary(s)):.3f}")

# %% [markdown]
# ### Exact forms, the small-step series, and the SNR law
#
# The gradient of one direction is itself an ARMA process, $g_t - g_{t-1} + a\,g_{t-s-1} = \sigma(\xi_t - \xi_{t-1})$ (because
# $x_{t-s} - x_{t-s-1} = -\eta g_{t-s-1}$), so its autocovariances solve a small linear system exactly
# (`cosine.gradient_autocovariance_symbolic`, no Lyapunov solve). At $s = 1$ the cosine is the mirror image of $s = 0$,
# and for small steps every $s \ge 1$ starts at $+a/2$; staleness enters at second order:

# %%
s1 = cosine.cosine_s1()
display(Math(r"s = 1:\quad \cos = " + sp.latex(s1["cosine"]) + r",\qquad \mathbb E[g^2]/\sigma^2 = " + sp.latex(sp.factor(s1["weight"]))))
for s in (2, 4, 8):
    display(Math(rf"s = {s}:\quad \cos = " + sp.latex(cosine.cosine_series(s, order=3)) + r" + O(a^4)"))

# %% [markdown]
# **The SNR law.** Let $\mathrm{SNR} = \sum_i \mathbb E[(\lambda_i x_{t-s,i})^2] / \sum_i \sigma_i^2$ be the stationary signal-to-noise ratio of
# the gradient (`cosine.snr`). Then $\cos = -\mathrm{SNR}/(1+\mathrm{SNR})$ exactly at $s = 0$, and $\cos \le \mathrm{SNR}/(1+\mathrm{SNR})$ for every
# $s \ge 1$ (for $s \ge 1$ the fresh noise $\xi_{t-1}$ does not enter $x_{t-s}$, so the lag-one term is a covariance of $x$ and
# Cauchy–Schwarz bounds it by the signal). A consecutive cosine near 1 therefore needs a high SNR: staleness alone
# cannot make it out of noise. Random spectra, random per-direction noise $\sigma_i$, random $s$ and step sizes:

# %%
rng = np.random.default_rng(1)
points = []
for _ in range(150):
    dim, s = int(rng.integers(1, 40)), int(rng.integers(0, 13))
    lam, sig = rng.uniform(0, 1, dim) ** rng.uniform(0.5, 4), rng.uniform(0.1, 3, dim)
    eta = rng.uniform(0.05, 0.98) * float(stability.stability_boundary_closed_form(s)) / lam.max()
    value = cosine.snr(eta, lam, s, sig)
    points.append((value / (1 + value), cosine.predicted_cosine(eta, lam, s, sig), s))
law, cos_values, stale = map(np.array, zip(*points, strict=True))
fig, ax = plt.subplots(figsize=(4.5, 3.2))
ax.plot([0, 1], [0, 1], "k-", lw=0.8, label="SNR/(1+SNR)")
ax.plot([0, 1], [0, -1], "k--", lw=0.8, label="−SNR/(1+SNR)")
ax.scatter(law[stale == 0], cos_values[stale == 0], s=8, label="s = 0")
ax.scatter(law[stale > 0], cos_values[stale > 0], s=8, label="s ≥ 1")
ax.set(xlabel="SNR/(1+SNR)", ylabel=r"predicted $\cos(g_t, g_{t-1})$")
ax.legend(fontsize=7)
plt.show()
print("check_snr_law:", cosine.check_snr_law(spectra=120, seed=0))

# %% [markdown]
# ## 4. The convergence bound of GAC-SGD (v2, a priori), against measured runs
#
# Assumptions (`theory/README.md` §3): $L$-smooth $f \ge f^*$; delays $s_t \le s$ independent of the noise (so chosen before
# $\xi_t$ is drawn); unbiased noise with $\mathbb E\|\xi\|^2 \le \sigma^2$ and $\mathbb E\langle \hat d, \xi\rangle^2 \le \sigma_\parallel^2$ along the reference;
# GAC in project or cap mode with any threshold. The bound is on the **kept energy**
# $K = \frac1T\sum_t \mathbb E\langle\nabla f, D_t\nabla f\rangle$ and uses nothing measured on the run. The staleness noise is linear in $s$
# (a martingale argument over each staleness window), and GAC's decision bias is paired with the kept energy, which
# leaves a floor of one direction's noise, $4\sigma_\parallel^2$: this floor is real (README §3 has an example where it is attained).
# With $\gamma$ at its optimum (the root of $\varphi = 1$):

# %%
e = convergence.bound_expression()
display(Math(r"K \le " + sp.latex(e["bound"]) + r",\quad A = " + sp.latex(e["A"])))
display(Math(r"\varphi = " + sp.latex(e["phi"]) + r" \le 1"))
settings = [{"kind": kind, "staleness": 8, "eta_fraction": 0.5, "mode": mode, "threshold": tau, "noise_std": 1.0}
            for kind in ("quadratic", "wavy") for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3))]
print(f"{'problem':<10}{'mode':<9}{'bound':>9}{'kept avg_t':>12}{'avg_t |∇f|²':>13}{'bound/kept':>11}")
for r in convergence.check_bound(settings, dim=50, steps=300, seeds=32):
    print(f"{r['kind']:<10}{r['mode']:<9}{r['bound']:>9.3g}{r['measured_kept']:>12.3g}{r['measured_avg']:>13.3g}"
          f"{r['bound_over_kept']:>11.1f}")

# %% [markdown]
# In every row the measured kept energy is below the bound. The full grid (80 settings, both noise levels, fixed and
# random staleness) is figure 7: `python -m paper_figs fig7_bound`.
#
# ## 5. GAC's stability region
#
# In high dimension GAC's projection (τ = 0) removes a coefficient $\rho \approx \langle g_t, g_{t-1}\rangle/\|g_{t-1}\|^2$ of the previous
# gradient, so each mode sees $x_{t+1} = x_t - a(x_{t-s} - \rho\,x_{t-s-1})$. On $z = e^{i\omega}$ the phase condition
# $\omega(s + 3/2) - \pi/2 - \arg(e^{i\omega} - \rho) = 0$ has one root in $(0, \pi]$, and the boundary is
# $a^*_{GAC}(s, \rho) = 2\sin(\omega/2)/|e^{i\omega} - \rho|$ (`gac_stability.gac_stability_boundary`, checked against bisection on the
# companion matrix). On slow modes the filter is a step cut, $z = 1 - a(1-\rho) + O(a^2)$; at the boundary it is not:

# %%
lemma = gac_stability.slow_mode_root_series(2)
display(Math(r"z_{\mathrm{slow}} = 1 + (" + sp.latex(lemma["c1"]) + r")\,a + " + sp.latex(sp.factor(lemma["c2"]))
             + r"\,a^2 + O(a^3)"))
print("semi-closed vs bisection (s <= 8):", gac_stability.check_gac_boundary(max_staleness=8, rhos=(0.0, 0.5, 0.9)))
rhos = np.linspace(0, 0.95, 60)
fig, ax = plt.subplots(figsize=(5, 3.2))
for s in (1, 2, 4, 8):
    line, = ax.plot(rhos, [gac_stability.gac_stability_boundary(s, r) for r in rhos], label=f"s = {s}")
    ax.plot(rhos, float(stability.stability_boundary_closed_form(s)) / (1 - rhos), ls=":", color=line.get_color())
    limit = gac_stability.top_mode_limit(s)
    ax.plot(limit["rho"], limit["a_max"], "o", color=line.get_color())
ax.set(xlabel="removed coefficient ρ", ylabel="largest stable a = ηλ", ylim=(0, 2.2))
ax.legend(fontsize=7, title="solid: a*_GAC, dotted: step cut a*(s)/(1−ρ)", title_fontsize=6)
plt.show()

# %% [markdown]
# The dots mark the **self-consistent limit**: GAC's coefficient is itself predicted by a Lyapunov solve that includes the
# filter (`self_consistent_rho`). Near the boundary the top mode dominates and the coefficient tends to $\cos\omega$; with
# $\rho = \cos\omega$ the phase condition gives $\omega = 2\pi/(2s+3)$ and the largest stable step $1/\cos(\pi/(2s+3))$ (`top_mode_limit`).
# Below it, the predicted $\rho^*$ matches the coefficient measured in real `gac.control` runs (spiked spectrum, 1000 dims):

# %%
for row in gac_stability.check_self_consistent_rho(settings=[(2, 1.5), (4, 2.0)], dim=1000, steps=1000, seeds=2):
    print(f"s = {row['staleness']}, ηλ_max = {row['fraction']}·a*(s): ρ* = {row['predicted']:.4f}, "
          f"measured {row['measured']:.4f}, diverged {row['diverged']}")
for s in (1, 2, 4, 8):
    print(f"s = {s}: a*(s) = {float(stability.stability_boundary_closed_form(s)):.3f}, "
          f"mean-field GAC limit 1/cos(π/(2s+3)) = {gac_stability.top_mode_limit(s)['a_max']:.3f}")

# %% [markdown]
# The mean-field limit is a lower bound for real GAC: in runs just above it GAC still stays finite, and it diverges only
# 10–25 % further out (README §5), where the top modes dominate the gradient and GAC acts as a nonlinear controller that the
# constant-ρ model does not describe.

# %% [markdown]
# ## Exercise 2.1 — predict, then measure: the stationary cosine at staleness 0, 1 and 4
#
# Section 3 said: at $s = 0$ one direction's stationary cosine is $-a/2$, at $s = 1$ it is the mirror image, and for small
# steps every $s \ge 1$ starts at $+a/2$. **Predict** the stationary $\cos(g_t, g_{t-1})$ of one direction at $a = 0.1$ for
# $s = 0$, $1$ and $4$. Then **measure** it: fill in `one_direction_cosine` — simulate $g_t = x_{t-s} + \xi_t$,
# $x_{t+1} = x_t - a\,g_t$ on many independent chains and compute $\sum_t g_t g_{t-1} / \sum_t g_t^2$.

# %%
from course import exercises, solutions

my_prediction = {0: None, 1: None, 4: None}  # your predicted cosines at a = 0.1


def one_direction_cosine(a, staleness):
    """The stationary lag-one autocorrelation of g_t = x_(t−s) + ξ_t, x_(t+1) = x_t − a·g_t (λ = σ = 1)."""
    raise NotImplementedError  # your code here


# %%
exercises.check(one_direction_cosine, solutions.one_direction_cosine, [(0.1, 0), (0.1, 1), (0.1, 4)], atol=0.02)

# %% [markdown]
# Solution and discussion: [Solutions, exercise 2.1](../course/solutions.md#exercise-21).

# %% [markdown]
# ## Exercise 2.2 — the SNR law on a spectrum of your own
#
# Fill in `snr_law(eta, curvatures, staleness)`: the predicted stationary cosine (`cosine.predicted_cosine`) and
# $\mathrm{SNR}/(1+\mathrm{SNR})$ (`cosine.snr`) for a spectrum of curvatures, a staleness and a step below
# $a^*(s)/\lambda_{\max}$. Which is larger? At $s = 0$, what is the relation between them?

# %%
spectrum = np.geomspace(0.05, 1.0, 20)


def snr_law(eta, curvatures, staleness):
    """(predicted stationary cosine, SNR/(1+SNR)) of delayed SGD on a quadratic with these curvatures."""
    raise NotImplementedError  # your code here


# %%
exercises.check(snr_law, solutions.snr_law, [(0.8 * float(stability.stability_boundary_closed_form(s)), spectrum, s)
                                             for s in (0, 1, 4, 8)])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 2.2](../course/solutions.md#exercise-22).
