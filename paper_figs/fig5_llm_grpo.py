"""fig5_llm_grpo: what tracks a stale GRPO run's outcome on a small Qwen3 model — its drift from the behaviour policy
(mean KL to π_b) or its early consecutive-gradient cosine. One message, two panels sharing the y axis: Δ held-out
accuracy of every naive-async run against each signal, with its Spearman ρ. The CSVs keep the run table (NAME.csv,
what the panels plot), the final held-out accuracy table (mean ± sample std over seeds, also printed) and every
run's per-step records (NAME_steps.csv). Runs come from the LLM sweep (experiments/llm.py) at the full and gpu
profiles. The sweep takes hours on a CPU, so the quick profile computes no run: it draws the committed run table
docs/data/fig5_llm_grpo.csv (a full run's NAME.csv) by the same ``draw``, as ``python -m paper_figs.committed
fig5_llm_grpo`` does.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from experiments.llm import aggregate, run_unit, summary_rows, sweep
from paper_figs import committed
from paper_figs.common import Results, apply_style, save_figure
from runtime.cache import Unit
from runtime.files import write_records
from sim.schema import LEGACY_LLM_COLUMNS

NAME = "fig5_llm_grpo"


def _markdown(table: list[dict]) -> str:
    lines = ["| method | s | lr | ratio to | seeds | final held-out acc (mean ± sample std) | min..max | Δ vs start "
             "| cos_prev | non-finite | collapsed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['method']} | {r['staleness']} | {r['lr']:g} | {r['ratio_to']} | {r['seeds']} | "
                     f"{r['final_mean']:.3f} ± {r['final_std']:.3f} | {r['final_min']:.3f}..{r['final_max']:.3f} | "
                     f"{r['delta_mean']:+.3f} | {r['cos_prev_mean']:.3f} | {r['nonfinite']} | "
                     f"{r.get('collapsed', '–')} |")
    return "\n".join(lines)


def failed(run: dict) -> bool:
    """Whether the run went non-finite or collapsed (``sim.schema``'s rule; a table from before ``collapsed`` was
    recorded has only the first)."""
    return bool(run.get("nonfinite")) or str(run.get("collapsed")).lower() == "true"


def outcome_panels(axes, runs: list[dict]) -> None:
    """(a) Δ held-out accuracy against the mean KL to the behaviour policy, (b) against the mean consecutive-gradient
    cosine over the first half of the run: one dot per naive-async run (the proximal ratio; ``outcome_rho``'s runs),
    colour: step size, size: staleness, ×: a run that collapsed or went non-finite. Each title gives its Spearman ρ."""
    mine = [r for r in runs if r["method"] == "naive" and r["ratio_to"] == "proximal"]
    lrs = sorted({r["lr"] for r in mine})
    colors = dict(zip(lrs, plt.get_cmap("viridis")(np.linspace(0.0, 0.85, max(1, len(lrs)))), strict=False))
    for ax, key, title in ((axes[0], "kl_behaviour_mean", "(a) drift from the behaviour policy"),
                           (axes[1], "cos_prev_first_half", "(b) early gradient alignment")):
        for r in mine:
            x = max(r[key], 1e-6) if key == "kl_behaviour_mean" else r[key]
            ax.scatter(x, r["delta_accuracy"], color=colors[r["lr"]], s=10 + 2 * r["staleness"],
                       marker="x" if failed(r) else "o", alpha=0.8)
        rho = outcome_rho(runs, key)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_title(f"{title}: Spearman ρ = {rho:+.2f}" if np.isfinite(rho) else f"{title} (too few runs for ρ)")
    axes[0].set(xscale="log", xlabel="mean KL to $\\pi_b$ over the run (log scale)",
                ylabel="Δ held-out accuracy (final − start)")
    axes[1].set(xlabel="mean $\\cos(g_k, g_{k-1})$ over the first half of the run")
    handles = [plt.Line2D([], [], ls="", marker="o", color=colors[lr], label=f"step size {lr:g}") for lr in lrs]
    handles += [plt.Line2D([], [], ls="", marker="o", color="grey", ms=np.sqrt(10 + 2 * s), label=f"$s$ = {s}")
                for s in sorted({r["staleness"] for r in mine})]
    if any(failed(r) for r in mine):
        handles.append(plt.Line2D([], [], ls="", marker="x", color="grey", label="collapsed or non-finite"))
    axes[0].figure.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=6)


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The GRPO runs of the LLM sweep (experiments/llm.py); none at the quick profile (it draws ``COMMITTED``)."""
    if profile == "quick":
        return []
    return [run_unit(r) for r in sweep(profile, device, dry_run)]


def plot(results: Results, out_dir: Path) -> list[Path]:
    if results.profile == "quick":
        return committed.draw_or_say(NAME, out_dir)
    pairs = results.runs()
    records = [dict(r, lr=item.args.lr) for item, res in pairs for r in res["records"]]
    return draw(summary_rows(pairs), out_dir, records)


def configuration(run_rows: list[dict]) -> str:
    """The runs' configuration in words (model size and RL steps, where the rows hold them)."""
    sizes = sorted({str(r["size"]) for r in run_rows if r.get("size") is not None})
    steps = sorted({int(r["steps"]) for r in run_rows if r.get("steps") is not None})
    words = [f"{'/'.join(sizes)} LLM" if sizes else "", f"{'/'.join(map(str, steps))} RL steps" if steps else ""]
    return ", ".join(w for w in words if w)


def draw(run_rows: list[dict], out_dir: Path, records: list[dict] | None = None) -> list[Path]:
    """The figure, NAME.csv (``run_rows``: one row per run, ``experiments.llm.summary_rows``, what the panels plot),
    NAME_table.csv and, given the runs' per-step ``records``, NAME_steps.csv. A committed table's legacy column names
    are read as today's."""
    run_rows = [{LEGACY_LLM_COLUMNS.get(k, k): v for k, v in r.items()} for r in run_rows]
    table = sorted(aggregate(run_rows), key=lambda r: (r["lr"], r["staleness"], r["method"]))

    apply_style()
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.3), sharey=True, layout="constrained")
    outcome_panels(axes, run_rows)
    rho, kl_rho = outcome_rho(run_rows, "cos_prev_first_half"), outcome_rho(run_rows, "kl_behaviour_mean")
    count = sum(r["method"] == "naive" and r["ratio_to"] == "proximal" for r in run_rows)
    source = "; ".join(w for w in (configuration(run_rows), "committed runs" if records is None else "") if w)
    fig.suptitle(f"What tracks a stale run's outcome? One dot per naive-async run ({count} runs"
                 f"{'; ' + source if source else ''})", fontsize=8)

    paths = [write_records(run_rows, out_dir / f"{NAME}.csv"), write_records(table, out_dir / f"{NAME}_table.csv"),
             *([write_records(records, out_dir / f"{NAME}_steps.csv")] if records is not None else []),
             *save_figure(fig, out_dir, NAME)]
    print(_markdown(table))
    print(f"cosine (first half) vs Δ accuracy over naive async runs: Spearman ρ = {rho:+.2f}")
    print(f"mean KL to π_b vs Δ accuracy over the same runs: Spearman ρ = {kl_rho:+.2f}")
    return paths


def outcome_rho(runs: list[dict], key: str) -> float:
    """Spearman ρ of the per-run ``key`` against Δ held-out accuracy over the naive-async runs with the proximal ratio:
    whether the signal (the mean KL to the behaviour policy of panel (a), the early cosine of panel (b)) tells the
    failing runs apart."""
    async_runs = [r for r in runs if r["method"] == "naive" and r["ratio_to"] == "proximal"]
    from scipy.stats import spearmanr  # here, not at import: scipy.stats is slow to import

    return spearmanr([r[key] for r in async_runs], [r["delta_accuracy"] for r in async_runs],
                     nan_policy="omit").statistic
