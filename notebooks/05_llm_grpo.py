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
# # 5. A small LLM trained with GRPO: sync, stale rollouts, and GAC
#
# **You will learn** what staleness costs a GRPO run at LLM scale, whether the paper's signature (consecutive gradients
# that stay aligned) appears there, and whether GAC closes the gap — read off the package's committed testbed runs
# (8 warm starts × 2 seeds), with intervals over warm starts. **Prerequisites:** notebooks 1–3 (the stale-aligned
# effect, the bound cos ≤ SNR/(1+SNR), GAC's projection). **Time:** 10 minutes to read; the tiny run at the end takes
# about a minute on a CPU.
# Claims shown: the LLM rows of the README's table ([Results: the testbed](../RESULTS.md#the-llm-testbed),
# [Results: verdict](../RESULTS.md#verdict)); the paper: [arXiv:2603.01501](https://arxiv.org/abs/2603.01501).
#
# The model is a Qwen3-architecture transformer (0.6M parameters, built from a config in code, nothing downloaded) that
# learns 2-digit addition with GRPO: 16 prompts × 8 samples per step, group-normalised advantages, the clipped
# importance ratio against the behaviour policy, one AdamW update per step, 200 steps at one shared step size (3e-4).
# In the asynchronous runs the rollouts of step $t$ come from the policy of step $t-s$.

# %% [markdown]
# ## The testbed: warm starts, then RL
#
# RL needs a model that already solves some problems (a reward of 0 everywhere gives no gradient), so every run starts
# from a **warm start**: supervised training on 512 problems until the held-out accuracy stops improving (a plateau),
# accepted only if it lands in [0.1, 0.5] — else retrained from the next seed of its stream. Held-out accuracy is
# greedy exact match on 997 distinct problems (the whole held-out split; standard error ≤ 0.016), before and after RL.
#
# Where a warm start lands is chaotic: the same seed trained on another CPU lands elsewhere (`docs/data/warm_starts.csv`
# has three machines' values), so a conclusion counts only as a statement over many warm starts. The cell below loads
# the committed runs (`docs/data/llm_figures_runs.csv`, one row per run, and `docs/data/llm_figures_steps.csv`, one row
# per step; made by `python -m experiments.llm_figures docs/data/llm_figures_runs.csv --profile full` and
# `python -m paper_figs.llm_testbed --compute`).

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments import llm_figures
from paper_figs import fig1_cosine, fig3_divergence, llm_testbed
from sim.schema import LEGACY_LLM_COLUMNS


data = Path("..") / "docs" / "data"
data = data if data.exists() else Path("docs") / "data"
runs_table = pd.read_csv(data / "llm_figures_runs.csv").rename(columns=LEGACY_LLM_COLUMNS)
steps_table = pd.read_csv(data / "llm_figures_steps.csv").rename(columns=LEGACY_LLM_COLUMNS)
starts = runs_table.groupby("warm_seed").start_accuracy.first()
print(f"{runs_table.warm_seed.nunique()} warm starts, held-out accuracy {starts.min():.2f}-{starts.max():.2f}; "
      f"{len(runs_table)} runs, {int(runs_table.nonfinite.sum())} non-finite")
summary = llm_figures.paired_summary(runs_table)
display(summary.round(3))

# %% [markdown]
# Each row is one arm: `gain` is the held-out accuracy gained over the 200 RL steps, `minus_sync` the final
# accuracy minus sync's on the same warm start and seed (a paired difference, which removes most of the warm start's
# variance); `[low, high]` are 95 % intervals over the warm starts. **Exercise for the eye:** which arms' `minus_sync`
# intervals exclude 0?

# %%
fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
fig3_divergence.plot_llm(axes, llm_testbed.rows_of(steps_table, "fig3"))
plt.tight_layout()
plt.show()

# %% [markdown]
# Sync climbs fastest; naive async at $s = 16$ climbs more slowly but does **not** diverge at this step size; GAC
# on the raw gradient (where the paper places it) and GAC on AdamW's update both stay with naive async. The cosine
# panel below shows why GAC has little to act on here.

# %%
fig, ax = plt.subplots(figsize=(5, 3.4))
fig1_cosine.plot_llm(ax, llm_figures.with_run_means(
    [r for r in llm_testbed.rows_of(steps_table, "fig1") if not r["final_eval"]]))
plt.show()

# %% [markdown]
# The consecutive-gradient cosine stays near 0 at every staleness — at or below the theory's bound SNR/(1+SNR)
# at the measured half-batch SNR (dashed). The LLM gradient at this batch is noise-dominated, so stale gradients
# cannot stay aligned (notebook 2's bound), and a GAC that removes the aligned part removes almost nothing. What
# staleness costs here is the stale data itself (drift from the behaviour policy, `kl_behaviour` in the run table),
# not an aligned overshoot.

# %% [markdown]
# ## The same question at batch SNR ≥ 1
#
# The testbed above is the **low-SNR reference**: at 128 samples per step its batch SNR is far below 1, so the bound
# holds every cosine near 0 whatever the staleness. [Results: alignment at high SNR](../RESULTS.md#alignment-at-high-snr)
# asks the question where the bound leaves room: 256 prompt groups × 8 samples per step with the all-tied groups
# dropped (they carry no gradient), one update per step, and both importance ratios — the behaviour ratio used above
# and the uncorrected one (stale data used as if it were fresh). A run *collapsed* when its held-out accuracy fell
# below half of its best so far. The cell reads the committed runs (check the warm-start count before you conclude).

# %%
highsnr = pd.read_csv(data / "llm_highsnr_runs.csv")
display(highsnr.groupby("arm", sort=False).agg(
    runs=("warm_seed", "size"), warm_starts=("warm_seed", "nunique"), collapsed=("collapsed", "sum"),
    final_accuracy=("final_accuracy", "mean"), cos_prev=("cos_prev", "mean"), cos_bound=("cos_bound", "mean"),
    kl_behaviour=("kl_behaviour", "mean")).round(3))

# %% [markdown]
# Compare `cos_prev` with its cap `cos_bound` in each arm, and the arms with the uncorrected ratio with those with the
# behaviour ratio: which failure does staleness cause here, and which arms avoid it? The answers, with their
# intervals, are in the Results section linked above.

# %% [markdown]
# At the same configuration, how large a step can each staleness take before a run collapses? The follow-up's law says
# stability is set by $s \cdot \eta$: the largest safe step $\eta_{\max}$ should halve each time $s$ doubles, so
# $s \cdot \eta_{\max}$ stays flat. The committed search ([Results: staleness and step
# size](../RESULTS.md#staleness-and-step-size)) gives, per method and $s$, the largest step without a collapse on 2 of
# 3 warm starts:

# %%
law = pd.read_csv(data / "staleness_lr_highsnr.csv")
law["s_times_step"] = law.staleness * law.max_stable_lr
display(law.pivot(index="staleness", columns="method", values=["max_stable_lr", "s_times_step"]))

# %% [markdown]
# Which column stays flat, and what does that say about GAC: does it change the law, or only the step?

# %% [markdown]
# ## The mechanics: a run you can make here
#
# The rest of this notebook makes a run on your machine. It **loads the quick sweep's runs** (those behind the
# committed table `docs/data/fig5_llm_grpo.csv`) when they are in this checkout's run cache — the figures no longer
# compute them: fig5's quick profile draws the committed table; otherwise it makes **a tiny run** (a 19k-parameter
# model on 1-digit addition, about a minute) that shows what is recorded and how to read it, not the testbed's numbers.

# %%
import os
import tempfile
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from experiments import llm, profiles
from runtime.cache import lookup
from sim.llm.train import Args, run_records

quick = llm.sweep("quick")
cached = [(item, lookup("llm_grpo", llm.run_key(item.args))) for item in quick]
testing = bool(os.environ.get("GAC_LAB_NOTEBOOK_TEST"))  # the test suite: every cell, a smaller tiny run
use_cache = all(result is not None for _, result in cached) and not testing
print("using the cached quick sweep" if use_cache else "no complete cached sweep here: tiny run")

# %% [markdown]
# ## The runs
#
# From the cache: the figure's runs (0.6M-parameter model, 2-digit addition, 80 RL steps × 16 prompts × 8 samples,
# 2 updates per step, 3 seeds). Tiny run: sync, naive async at $s = 4$, and async + GAC at $s = 4$, one seed each,
# 40 steps — a 19k-parameter model on 1-digit addition is fragile under RL, so one seed of it says little about
# which method is better; it shows what is recorded and how to read it.
# Every run returns the per-step record of DESIGN.md (`objective` is the mean reward; `cos_prev` the cosine between
# consecutive raw gradients; `accuracy` the held-out accuracy every few steps).

# %%
if use_cache:
    results = {(item.args.run_method, item.args.staleness, item.args.lr, item.args.seed, item.args.ratio_to): result
               for item, result in cached}
    lr = profiles.lookup("llm_sweep", "quick").main_lr
    shown = {"sync": ("sync", 0, lr), "naive s=16": ("naive", 16, lr), "gac s=16": ("gac", 16, lr),
             "tis s=16": ("tis", 16, lr)}
    runs = {name: [results[(m, s, l, seed, "proximal")] for seed in profiles.lookup("llm_sweep", "quick").seeds]
            for name, (m, s, l) in shown.items()}
else:
    from sim.llm.model import save_model
    from sim.llm.warmstart import WarmStartConfig, train_warm_start

    workdir = tempfile.mkdtemp()
    # the tests' tiny warm start: 50 supervised problems trained to a plateau (tests/data/tiny_warm_start)
    warm_steps, steps = (25, 10) if testing else (100, 40)
    model, info = train_warm_start(WarmStartConfig(size="tiny", digits=1, sft_problems=50, target_accuracy=0.0,
                                                   ceiling_accuracy=1.0, lr=1e-2, batch_size=64, eval_every=25,
                                                   min_steps=warm_steps, max_steps=6 * warm_steps),
                                   log=lambda *a: None)
    save_model(model, Path(f"{workdir}/warm"))
    print(f"warm start: held-out accuracy {info['heldout_accuracy']:.2f}")
    base = Args(size="tiny", model=f"{workdir}/warm", digits=1, steps=steps, prompts_per_step=8, group_size=8,
                minibatches=2, eval_every=steps // 4, eval_problems=64, lr=3e-4, ratio_to="proximal",
                progress=False, out_dir=f"{workdir}/run", on_nonfinite="mark")
    runs = {name: [run_records(replace(base, method=m, staleness=s), log=lambda *a: None)]
            for name, (m, s) in {"sync": ("sync", 0), "naive s=4": ("naive", 4), "gac s=4": ("gac", 4)}.items()}


# %%
def series(results, key):
    """Steps and the seed mean of ``key`` (rows where it was measured)."""
    table = {}
    for result in results:
        for row in result["records"]:
            if row.get(key) is not None and not row.get("nonfinite"):
                table.setdefault(row["step"], []).append(row[key])
    steps = sorted(table)
    return steps, [float(np.mean(table[s])) for s in steps]


colors = {"sync": "black", "naive": "tab:red", "gac": "tab:blue", "tis": "tab:green"}
fig, axes = plt.subplots(1, 3, figsize=(11, 3))
for name, results in runs.items():
    color = colors[name.split()[0]]
    for ax, key in zip(axes, ("objective", "accuracy", "cos_prev")):
        steps, values = series(results, key)
        if key != "accuracy":
            values = np.convolve(values, np.ones(5) / 5, mode="same")
        ax.plot(steps, values, color=color, label=name, marker="o" if key == "accuracy" else None, ms=3)
axes[0].set(xlabel="RL step", ylabel="mean reward (smoothed)")
axes[1].set(xlabel="RL step", ylabel="held-out accuracy")
axes[2].set(xlabel="RL step", ylabel=r"$\cos(g_k, g_{k-1})$ (smoothed)")
axes[2].axhline(0, color="grey", lw=0.6)
axes[0].legend()
plt.tight_layout()
plt.show()

# %%
print(f"{'run':<12}{'final acc':>10}{'mean cos_prev':>15}{'mean KL(behaviour)':>20}")
for name, results in runs.items():
    final = np.mean([r["summary"]["final_accuracy"] for r in results])
    cos = np.nanmean([row["cos_prev"] for r in results for row in r["records"] if row.get("cos_prev") is not None])
    kl = np.nanmean([row["kl_behaviour"] for r in results for row in r["records"]
                     if row.get("kl_behaviour") is not None])
    print(f"{name:<12}{final:>10.3f}{cos:>15.3f}{kl:>20.3f}")

# %% [markdown]
# ## Exercise 5.1 — a paired difference with its interval
#
# The summary table above reports, per arm, `minus_sync` with a 95 % interval over warm starts. Recompute it for
# `gac gradient s=16` from `runs_table` yourself: fill in `paired_gap` — pair each run with sync's run on the same warm
# start and RL seed, average the seeds of each warm start, then take the mean and a t-interval over the warm starts.
# Does GAC close any of naive async's gap?

# %%
from course import exercises, solutions


def paired_gap(runs, arm):
    """(mean, low, high): ``arm`` minus sync, paired on warm start and seed, 95 % t-interval over warm starts."""
    raise NotImplementedError  # your code here


# %%
exercises.check(paired_gap, solutions.paired_gap, [(runs_table, arm) for arm in ("naive s=16", "gac gradient s=16")])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 5.1](../course/solutions.md#exercise-51).

# %% [markdown]
# ## Exercise 5.2 — predict, then measure: the cosine across staleness
#
# The testbed's half-batch probe measures the gradient's SNR, and the theory bounds the consecutive cosine by
# $\mathrm{SNR}/(1+\mathrm{SNR})$ (the `cos_bound` column). **Predict**: as the staleness grows from 0 to 16, does the mean
# consecutive cosine of naive async grow towards 1 (the paper's signature), or stay near 0 under the bound? Then
# **measure** both: fill in `cosine_by_staleness(runs)`, a table indexed by staleness (sync and naive arms) with the
# columns `cos_prev` and `cos_bound`, each the mean over warm starts of the warm start's seed mean.

# %%
my_prediction = None  # "grows towards 1" or "stays under the bound"


def cosine_by_staleness(runs):
    """Per staleness: the mean consecutive cosine and its bound, over warm starts."""
    raise NotImplementedError  # your code here


# %%
exercises.check(cosine_by_staleness, solutions.cosine_by_staleness, [(runs_table,)])

# %% [markdown]
# Solution and discussion: [Solutions, exercise 5.2](../course/solutions.md#exercise-52).

# %% [markdown]
# To run one configuration yourself (CPU; add `--device cuda --size gpu` on a GPU):
#
# ```bash
# python -m sim.llm --method gac --staleness 16 --lr 3e-5 --size small --steps 80 --ratio-to proximal
# python -m sim.llm --help     # every option with a one-line explanation
# ```
