"""fig8_tuned: every method at its own best step size against staleness, on the quadratic, the Gaussian bandit
and the LLM. Step sizes are picked on tuning seeds and reported on fresh seeds (experiments/tuning.py); the
tables name the winner at each s (with seed-bootstrap intervals) and each method's robust range of step sizes.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments import tuning
from experiments.llm import run_unit
from paper_figs.common import (
    MIN_BAND_RUNS,
    SIM_TITLES,
    Results,
    apply_style,
    band,
    label_words,
    method_color,
    panel_letters,
    save_figure,
)
from runtime.cache import Unit, unit
from runtime.files import write_records

NAME = "fig8_tuned"
SIMS = ("quadratic", "bandit_gaussian", "llm")
YLABEL = {"quadratic": r"final loss $f(\theta_T)$ (log)", "bandit_gaussian": "final reward gap $J^* - J$ (log)",
          "llm": "final held-out accuracy"}
GAP = {"quadratic": "final loss", "bandit_gaussian": "final J* − J", "llm": "1 − final held-out accuracy"}
"""What the tables' mean, low and high measure on each scale (lower is better)."""
ROBUST_STALENESS = 16
"""The staleness of the per-step-size table (the quadratic's robustness check)."""


TOY_SIMS = ("quadratic", "bandit_gaussian")
TOY_SECONDS = {"quadratic": 10.0, "bandit_gaussian": 25.0}
"""Rough CPU seconds of each toy grid at the quick profile (``Unit.cost``: orders the work, gives the seconds left)."""


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The toy tuning grids (one vectorized, cached unit each) and the LLM tuning grid's GRPO runs."""
    return [*[unit(f"{NAME}/{sim}", tuning.toy_rows, sim, profile, device, spec=f"{NAME}/{sim}",
                   cost=TOY_SECONDS[sim])
              for sim in TOY_SIMS],
            *[run_unit(r) for r in tuning.llm_runs(profile, device, dry_run=dry_run)]]


def scale_tables(results: Results) -> dict[str, tuple[pd.DataFrame, tuning.TuningGrid]]:
    """Per scale: the table of every run and its grid."""
    out = {sim: (pd.DataFrame(results.value(f"{NAME}/{sim}"), columns=list(tuning.COLUMNS)),
                 tuning.toy_grid(sim, results.profile)) for sim in TOY_SIMS}
    out["llm"] = (tuning.llm_table_of(results.runs()), tuning.llm_grid(results.profile))
    return out


def summary_table(sim: str, results: dict[str, pd.DataFrame], grid: tuning.TuningGrid) -> pd.DataFrame:
    """One row per (method, staleness): tuned lr, reported mean and interval, robust range, winner flag."""
    table = results["reported"].merge(results["ranges"], on=["method", "staleness"])
    winners = set(zip(results["winners"]["staleness"], results["winners"]["winner"], strict=True))
    return table.assign(sim=sim, gap=GAP[sim], lr_at_grid_edge=table["lr"].isin([min(grid.lrs), max(grid.lrs)]),
                        winner=[(s, m) in winners for s, m in zip(table["staleness"], table["method"], strict=True)])


def _plot(ax, sim: str, reported: pd.DataFrame, table: pd.DataFrame, reporting_seeds) -> None:
    accuracy = sim == "llm"  # the LLM's gap is 1 − accuracy; plot the accuracy
    value = (lambda v: 1 - v) if accuracy else (lambda v: v)
    finite = reported[np.isfinite(reported["mean"])]
    top = value(finite["high"]).max() if not accuracy else 1.0
    sync = reported[reported["method"] == "sync"].iloc[0]
    ax.axhline(value(sync["mean"]), color=method_color("sync"), lw=0.9, label="sync at its own step size")
    seeds = table[(table["method"] == "sync") & (table["lr"] == sync["lr"]) & table["seed"].isin(list(reporting_seeds))]
    if len(seeds) >= MIN_BAND_RUNS and np.isfinite([sync["low"], sync["high"]]).all():
        band(ax, None, value(sync["low"]), value(sync["high"]), len(seeds), method_color("sync"),
             (0.0, 1.0) if accuracy else (0.0, math.inf), alpha=0.1)
    else:  # too few seeds for a band: each one's sync result, thin
        for gap in seeds["final_gap"]:
            ax.axhline(value(gap), color=method_color("sync"), lw=0.5, alpha=0.5)
    groups = list(reported[reported["staleness"] > 0].groupby("method"))
    for k, (method, rows) in enumerate(groups):
        rows = rows.sort_values("staleness")
        ok = rows[np.isfinite(rows["mean"])]
        mean, low, high = value(ok["mean"]), value(ok["low"]), value(ok["high"])
        shift = 1.04 ** (k - (len(groups) - 1) / 2)  # methods side by side at each s (log axis)
        ax.errorbar(ok["staleness"] * shift, mean, yerr=[np.abs(mean - low), np.abs(high - mean)],
                    color=method_color(method), marker="o", ms=3, capsize=2, label=label_words(method))
        dead = rows[~np.isfinite(rows["mean"])]
        ax.scatter(dead["staleness"], [0.0 if accuracy else 2 * top] * len(dead), marker="x",
                   color=method_color(method))
    ax.set(xscale="log", xlabel="staleness $s$ (log)", ylabel=YLABEL[sim], yscale="linear" if accuracy else "log",
           title=SIM_TITLES.get(sim, sim))
    ax.set_xticks(sorted(reported["staleness"][reported["staleness"] > 0].unique()))
    ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(plt.NullFormatter())  # a one-s panel would label its minor ticks


def _markdown(summary: pd.DataFrame) -> str:
    lines = ["| sim | s | winner (tuned lr) | mean [95% seed interval] | apart from the rest "
             "| robust range per method |",
             "|---|---|---|---|---|---|"]
    for (sim, s), rows in summary[summary["staleness"] > 0].groupby(["sim", "staleness"], sort=False):
        won = rows[rows["winner"]].iloc[0]
        ranges = ", ".join(f"{r.method} {r.robust_range:.3g}" for r in rows.itertuples())
        lines.append(f"| {sim} | {s} | {won['method']} ({won['lr']:g}) | {won['mean']:.4g} [{won['low']:.4g}, "
                     f"{won['high']:.4g}] | {won['separated']} | {ranges} |")
    return "\n".join(lines)


def plot(results: Results, out_dir: Path) -> list[Path]:
    apply_style()
    fig, axes = plt.subplots(1, len(SIMS), figsize=(3.6 * len(SIMS), 3.4), layout="constrained")
    every, summaries, robustness = [], [], None
    for ax, (sim, (table, grid)) in zip(axes, scale_tables(results).items(), strict=True):
        results = tuning.tuned_tables(table, grid)
        won = results["winners"][["staleness", "separated"]]
        summaries.append(summary_table(sim, results, grid).merge(won, on="staleness", how="left"))
        role = np.where(table["seed"].isin(grid.tuning), "tuning", "reporting")
        every.append(table.assign(sim=sim, seeds=role))
        _plot(ax, sim, results["reported"], table, grid.reporting)
        if sim == "quadratic":
            robustness = tuning.per_step_size(table, ROBUST_STALENESS, grid.reporting).assign(sim=sim)
    summary = pd.concat(summaries, ignore_index=True)
    paths = [write_records(pd.concat(every, ignore_index=True).to_dict("records"), out_dir / f"{NAME}.csv"),
             write_records(summary.to_dict("records"), out_dir / f"{NAME}_table.csv"),
             write_records(robustness.to_dict("records"), out_dir / f"{NAME}_quadratic_s{ROBUST_STALENESS}.csv")]
    panel_letters(axes)
    handles = {}
    for ax in axes:  # one key for every panel's methods, below them
        handles.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)})
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=min(len(handles), 7), fontsize=6)
    fig.suptitle("each method at its own step size (picked on tuning seeds): mean and 95 % interval over fresh seeds; "
                 "grey: sync's interval (or each seed's result); ×: diverged at every step size", fontsize=8)
    paths += save_figure(fig, out_dir, NAME)
    print(_markdown(summary))
    print(f"quadratic at s = {ROBUST_STALENESS}, every step size (reporting seeds):")
    print(robustness.to_string(index=False, float_format=lambda v: f"{v:.4g}" if math.isfinite(v) else str(v)))
    return paths
