"""fig5_llm_grpo: GRPO on a small Qwen3 model with stale rollouts — reward curves of every method, the
final held-out accuracy table (mean ± sample std over seeds), the step size × staleness regime map of naive
async, and whether the consecutive-gradient cosine predicts the outcome. Runs come from the shared
LLM sweep (experiments/llm.py), cached with fig1/fig3's LLM panels.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import spearmanr

from experiments.aggregate import centered_mean, seed_mean
from experiments.llm import aggregate, run_unit, summary_rows, sweep
from experiments.profiles import lookup
from paper_figs.common import Results, apply_style, label_words, method_color, save_figure
from runtime.cache import Unit
from runtime.files import write_records

NAME = "fig5_llm_grpo"


def _markdown(table: list[dict]) -> str:
    lines = ["| method | s | lr | ratio to | seeds | final held-out acc (mean ± sample std) | min..max | Δ vs start "
             "| cos_prev "
             "| diverged |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['method']} | {r['staleness']} | {r['lr']:g} | {r['ratio_to']} | {r['seeds']} | "
                     f"{r['final_mean']:.3f} ± {r['final_std']:.3f} | {r['final_min']:.3f}..{r['final_max']:.3f} | "
                     f"{r['delta_mean']:+.3f} | {r['cos_prev_mean']:.3f} | {r['diverged']} |")
    return "\n".join(lines)


def plot_reward_curves(ax_curve, ax_small, records: list[dict], p: dict) -> None:
    """(a) reward over steps at the main and the smallest step size."""
    high, main_lr, small_lr = p.high_staleness, p.main_lr, p.small_lrs[0]
    shown = [("sync", 0, main_lr, "-", "proximal"), ("naive", high, main_lr, "-", "proximal"),
             ("gac", high, main_lr, "-", "proximal"), ("tis", high, main_lr, "-", "proximal"),
             ("m2po", high, main_lr, "-", "proximal"), ("bapo", high, main_lr, "-", "proximal"),
             ("gac", 0, main_lr, "--", "proximal"),
             ("naive", high, main_lr, "-.", "behaviour")]
    tiny_lr = p.small_lrs[-1]
    shown_small = [("sync", 0, tiny_lr, "-", "proximal"), ("naive", high, tiny_lr, "-", "proximal"),
                   ("gac", high, tiny_lr, "-", "proximal"), ("naive", high, small_lr, ":", "proximal")]
    for ax, lines, lr_title, letter in ((ax_curve, shown, main_lr, "a"), (ax_small, shown_small, tiny_lr, "b")):
        for method, s, lr, style, ratio_to in lines:
            steps, mean, _ = seed_mean(records, "objective", method=method, staleness=s, lr=lr, ratio_to=ratio_to)
            if len(steps):
                label = "sync" if method == "sync" else f"{label_words(method)}, s = {s}" + (
                    "" if lr == lr_title else f", step {lr:g}")
                label += r", ratio to $\pi_b$" if ratio_to == "behaviour" else ""
                ax.plot(steps, centered_mean(mean, 15), color=method_color(method), ls=style, label=label)
        ax.set(xlabel="RL step", ylabel="mean reward\n(seed mean, smoothed)",
               title=f"({letter}) reward, AdamW step size {lr_title:g}")
        ax.legend(ncol=2, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.3))  # below, not on a curve


def plot_accuracy_bars(ax_table, table: list[dict], runs: list[dict], p: dict) -> None:
    """(b) final held-out accuracy per setting, with the warm start's accuracy."""
    high, main_lr = p.high_staleness, p.main_lr
    bars = [r for r in table if (r["lr"] == main_lr and r["staleness"] in (0, high) and r["method"] != "lr_scale")
            or ("control_small_step" in r["roles"]) or ("gac_small_step" in r["roles"])]
    bars = sorted(bars, key=lambda r: (r["method"] != "sync", r["staleness"], r["method"], r["ratio_to"], r["lr"]))
    names = []
    for i, r in enumerate(bars):
        whisker = [[r["final_mean"] - r["final_min"]], [r["final_max"] - r["final_mean"]]]
        ax_table.barh(i, r["final_mean"], color=method_color(r["method"]), alpha=0.8)
        ax_table.errorbar(r["final_mean"], i, xerr=whisker, color="black", capsize=2, lw=0.8)
        names.append(("sync" if r["method"] == "sync" else f"{label_words(r['method'])}, s = {r['staleness']}")
                     + ("" if r["lr"] == main_lr else f", step {r['lr']:g}")
                     + (r", ratio to $\pi_b$" if r["ratio_to"] == "behaviour" else ""))
    start = np.nanmean([r["start_accuracy"] for r in runs])
    ax_table.axvline(start, color="grey", ls="--", lw=0.8, label="warm start")
    ax_table.set_yticks(range(len(bars)), names)
    ax_table.invert_yaxis()
    ax_table.set(xlabel="final held-out accuracy\n(bar: seed mean, whisker: min..max)",
                 title=f"(c) final accuracy, step size {main_lr:g} unless noted")
    ax_table.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3))  # below the bars


def plot_regime_maps(fig, ax_map, ax_cosmap, table: list[dict]) -> None:
    """(c, d) naive async over step size × staleness: Δ held-out accuracy and mean cosine."""
    grid = [r for r in table if r["method"] in ("sync", "naive") and r["ratio_to"] == "proximal"]
    lrs = sorted({r["lr"] for r in grid})
    stal = sorted({r["staleness"] for r in grid})
    for ax, key, vmax, title, scale in (
            (ax_map, "delta_mean", 0.4, "(d) naive async: accuracy gained", "Δ held-out accuracy (final − start)"),
            (ax_cosmap, "cos_prev_mean", 0.2, "(e) naive async: gradient alignment",
             r"mean $\cos(g_k, g_{k-1})$")):
        values = np.full((len(lrs), len(stal)), np.nan)
        for r in grid:
            values[lrs.index(r["lr"]), stal.index(r["staleness"])] = r[key]
        image = ax.imshow(values, cmap="RdBu" if key == "delta_mean" else "PuOr_r", vmin=-vmax, vmax=vmax,
                          origin="lower", aspect="auto")
        for i in range(len(lrs)):
            for j in range(len(stal)):
                text = "not\nrun" if np.isnan(values[i, j]) else f"{values[i, j]:+.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=6.5)
        ax.set_xticks(range(len(stal)), [str(s) for s in stal])
        ax.set_yticks(range(len(lrs)), [f"{lr:g}" for lr in lrs])
        ax.set(xlabel="staleness $s$", ylabel="step size (AdamW lr)", title=title)
        fig.colorbar(image, ax=ax, fraction=0.05, label=scale)


def plot_cosine_vs_outcome(ax_cos, runs: list[dict]) -> float:
    """(e) per run: mean cosine over the first half vs Δ accuracy; returns naive async's Spearman ρ."""
    for r in runs:
        ax_cos.scatter(r["cos_prev_first_half"], r["delta_accuracy"], color=method_color(r["method"]),
                       s=8 + r["staleness"], marker="x" if r["diverged"] else "o", alpha=0.7)
    rho = outcome_rho(runs, "cos_prev_first_half")
    ax_cos.set(xlabel=r"mean $\cos(g_k, g_{k-1})$, first half of the run", ylabel="Δ held-out accuracy (final − start)",
               title=f"(f) every run (dot size: s); naive async: Spearman ρ = {rho:+.2f}")
    methods = list(dict.fromkeys(r["method"] for r in runs))
    handles = [plt.Line2D([], [], ls="", marker="o", color=method_color(m), label=label_words(m)) for m in methods]
    ax_cos.legend(handles=handles, fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.3))  # the colours
    return rho


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The GRPO runs of the LLM sweep (experiments/llm.py)."""
    return [run_unit(r) for r in sweep(profile, device, dry_run)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    p = lookup("llm_sweep", results.profile)
    pairs = results.runs()
    records = [dict(r, lr=item.args.lr) for item, res in pairs for r in res["records"]]
    run_rows = summary_rows(pairs)
    table = sorted(aggregate(run_rows), key=lambda r: (r["lr"], r["staleness"], r["method"]))

    apply_style()
    fig, axes = plt.subplots(3, 2, figsize=(7.0, 9.6), layout="constrained")  # two to a row at a page's width
    ax_curve, ax_small, ax_table, ax_map, ax_cosmap, ax_cos = axes.ravel()
    plot_reward_curves(ax_curve, ax_small, records, p)
    plot_accuracy_bars(ax_table, table, run_rows, p)
    plot_regime_maps(fig, ax_map, ax_cosmap, table)
    rho = plot_cosine_vs_outcome(ax_cos, run_rows)
    kl_rho = outcome_rho(run_rows, "kl_behaviour_mean")
    fig.suptitle(f"What tracks a stale run's outcome? Spearman ρ with Δ accuracy over the naive-async runs: "
                 f"drift from the behaviour policy (KL to $\\pi_b$) {kl_rho:+.2f}, early gradient cosine {rho:+.2f}",
                 fontsize=7)

    paths = [write_records(records, out_dir / f"{NAME}.csv"), write_records(run_rows, out_dir / f"{NAME}_runs.csv"),
             write_records(table, out_dir / f"{NAME}_table.csv"), *save_figure(fig, out_dir, NAME)]
    print(_markdown(table))
    print(f"cosine (first half) vs Δ accuracy over naive async runs: Spearman ρ = {rho:+.2f}")
    print(f"mean KL to π_b vs Δ accuracy over the same runs: Spearman ρ = {kl_rho:+.2f}")
    return paths


def outcome_rho(runs: list[dict], key: str) -> float:
    """Spearman ρ of the per-run ``key`` against Δ held-out accuracy over the naive-async runs with the proximal ratio:
    whether the signal (the early cosine of panel (f), the mean KL to the behaviour policy) tells the failing runs
    apart."""
    async_runs = [r for r in runs if r["method"] == "naive" and r["ratio_to"] == "proximal"]
    return spearmanr([r[key] for r in async_runs], [r["delta_accuracy"] for r in async_runs],
                     nan_policy="omit").statistic
