"""fig9_early_warning: which per-step signal warns before a collapse — ROC AUC per signal × horizon k, and the
median lead time at a 10% false-alarm rate, over every run of fig1 and fig3: their toy sweeps and their LLM testbed
runs (``experiments.llm_figures``: at the quick profile the shared small-LLM configuration and warm starts).

Collapse definitions, labels and statistics are in ``experiments.early_warning``. The runs are those figures' units
(the same cache keys: one task each however many figures read them), so this figure only computes statistics.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from experiments import llm_figures
from experiments.early_warning import HORIZONS, SIGNALS, check_request, evaluate, llm_rows
from experiments.llm import run_unit
from paper_figs import fig1_cosine, fig3_divergence
from paper_figs.common import SIM_TITLES, Results, apply_style, panel_letters, save_figure
from runtime.cache import Unit
from runtime.files import write_records

NAME = "fig9_early_warning"
TOY_FIGURES = (fig1_cosine, fig3_divergence)
HORIZON_COLORS = ("#9ecae1", "#4292c6", "#08306b")
SIGNAL_WORDS = {"cos_prev": "gradient cosine", "cos_update": "update cosine", "cos_excess": "cosine above SNR/(1+SNR)",
                "kl_behaviour": r"KL to $\pi_b$", "grad_norm": "gradient norm", "clip_frac": "clipped share",
                "entropy": "entropy", "staleness": "staleness", "ess_drop": "ESS drop"}
"""The candidate signals of ``experiments.early_warning.SIGNALS`` in words, for the ticks."""


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The toy simulations and the LLM testbed's runs of fig1 and fig3 (their units: nothing computed twice)."""
    return [*[u for figure in TOY_FIGURES for u in figure.toy_units("smoke" if dry_run else profile, device)],
            *[run_unit(r) for r in llm_figures.runs(profile, device, dry_run)]]


def toy_rows(results: Results) -> list[dict]:
    """Per-step records of the toy panels of fig1 and fig3, in their panel order."""
    return [row for figure in TOY_FIGURES for u in figure.toy_units(results.profile, results.device)
            for row in results.value(u.spec, [])]


def plot_sim(axes, table: list[dict], sim: str, signals, horizons, first: bool = True) -> None:
    """AUC bars (one per k) per signal, and the median lead time at the largest k with the detected share."""
    ax_auc, ax_lead = axes
    mine = {(r["signal"], r["k"]): r for r in table if r["sim"] == sim}
    x = np.arange(len(signals))
    width = 0.8 / len(horizons)
    for j, horizon in enumerate(horizons):
        offset = x + (j - (len(horizons) - 1) / 2) * width
        ax_auc.bar(offset, [mine[(s, horizon)]["auc"] for s in signals], width, label=f"k = {horizon}",
                   color=HORIZON_COLORS[j % len(HORIZON_COLORS)])
        ax_auc.plot(offset, [mine[(s, horizon)]["auc_collapsing_runs"] for s in signals], "k_", ms=5,
                    label="collapsing runs only" if j == 0 else None)
    for i, s in enumerate(signals):
        if not mine[(s, horizons[0])]["scored_steps"]:
            ax_auc.text(i, 0.02, "not recorded", ha="center", va="bottom", rotation=90, fontsize=5, color="grey")
    found = next(iter(mine.values()))
    ax_auc.axhline(0.5, color="grey", ls="--", lw=0.8)
    ax_auc.set(ylim=(0, 1), ylabel="ROC AUC\n(0.5: no warning)" if first else None,
               title=f"{SIM_TITLES.get(sim, sim)}: {found['collapses']} collapses in {found['runs']} runs"
                     + (f"\n{llm_figures.CONFIG}" if sim == "llm" else ""))
    ax_auc.set_xticks(x, [SIGNAL_WORDS.get(s, s) for s in signals], rotation=45, ha="right", rotation_mode="anchor")
    longest = max(horizons)
    lead = [mine[(s, longest)]["median_lead"] for s in signals]
    ax_lead.bar(x, lead, color="#4292c6")
    for i, s in enumerate(signals):
        detected = mine[(s, longest)]["detected"]
        if not math.isnan(detected):
            ax_lead.text(i, (lead[i] if not math.isnan(lead[i]) else 0) + 0.3, f"{detected:.0%}", ha="center",
                         fontsize=6)
    ax_lead.set(ylim=(0, longest * 1.15), ylabel="median lead (steps)" if first else None,
                title=f"lead at a 10 % false-alarm rate, k = {longest}\n(label: share of collapses detected)")
    ax_lead.set_xticks(x, [SIGNAL_WORDS.get(s, s) for s in signals], rotation=45, ha="right", rotation_mode="anchor")


def markdown(table: list[dict]) -> str:
    lines = ["| sim | signal | k | collapses/runs | pos/neg steps | AUC | AUC in collapsing runs "
             "| precision (base rate) | detected | median lead |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        if not r["scored_steps"] or not r["collapses"]:
            continue
        base = r["positives"] / max(1, r["positives"] + r["negatives"])
        lines.append(f"| {r['sim']} | {r['signal']} | {r['k']} | {r['collapses']}/{r['runs']} | "
                     f"{r['positives']}/{r['negatives']} | {r['auc']:.3f} | {r['auc_collapsing_runs']:.3f} | "
                     f"{r['precision']:.3f} ({base:.3f}) | "
                     f"{r['detected']:.2f} | {r['median_lead']:g} |")
    return "\n".join(lines)


def plot(results: Results, out_dir: Path, signals=tuple(SIGNALS), horizons=HORIZONS) -> list[Path]:
    """The table (one row per simulator × signal × k) and its figure."""
    check_request(signals, horizons)
    rows = toy_rows(results)
    if results.runs():
        rows += llm_rows(results.runs())
    table, events = evaluate(rows, signals, horizons)
    sims = [sim for sim in dict.fromkeys(r["sim"] for r in table)
            if any(r["sim"] == sim and r["collapses"] for r in table)]
    apply_style()
    fig, axes = plt.subplots(2, max(1, len(sims)), figsize=(3.6 * max(1, len(sims)), 5.2), squeeze=False,
                             layout="constrained")
    for i, sim in enumerate(sims):
        plot_sim((axes[0][i], axes[1][i]), table, sim, list(signals), list(horizons), first=i == 0)
    panel_letters(axes[:, :len(sims)].ravel())  # reading order: the AUC row, then the lead row
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside upper center", ncol=len(horizons) + 1)
    paths = [write_records(table, out_dir / f"{NAME}.csv"), write_records(events, out_dir / f"{NAME}_collapses.csv"),
             *save_figure(fig, out_dir, NAME)]
    quiet = sorted({r["sim"] for r in table} - set(sims))
    print(markdown(table))
    if quiet:
        print(f"no collapse in any run of: {', '.join(quiet)} (no AUC there)")
    return paths
