"""fig1_cosine: consecutive-gradient cosine cos(g_t, g_{t−1}) over training, sync vs s ∈ {1, 2, 4, 8, 16}.

A list of panels (``PANELS``), one simulator each; every panel picks per-step record rows with a ``sim``
column out of the figure's results (the toys: one cached simulation each; the LLM: GRPO runs). Also writes
``fig1_cosine_table.csv``: the mean cosine after warm-up per (sim, staleness), over seeds (NaN for
runs that diverged before warm-up; the column ``mean_cos_prev_before_divergence`` covers them).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt

from experiments import llm_figures, toy
from experiments.aggregate import centered_mean, seed_median, trailing_mean
from experiments.llm import run_unit
from paper_figs.common import Panel, Results, apply_style, panel_letters, save_figure, spread
from runtime.cache import Unit, unit
from runtime.files import write_records

NAME = "fig1_cosine"
STALENESS_COLORS = {0: "#000000", 1: "#fdd49e", 2: "#fdbb84", 4: "#fc8d59", 8: "#e34a33", 16: "#b30000"}


def plot_cosine(ax, rows: list[dict], title: str) -> None:
    for s in sorted({r["staleness"] for r in rows}):
        steps, values = seed_median(rows, "cos_prev", staleness=s)
        label = "sync" if s == 0 else f"s = {s}"
        ax.plot(steps, trailing_mean(values, 10), color=STALENESS_COLORS.get(s, "#7f7f7f"), label=label)
    ax.axhline(0.0, color="#999999", lw=0.6)
    ax.set(title=title, xlabel="step", ylabel=r"$\cos(g_t, g_{t-1})$, median", ylim=(-1.0, 1.05))


def plot_llm(ax, rows: list[dict]) -> None:
    """The testbed's consecutive-gradient cosine over RL steps, one line per staleness (mean over warm starts of each
    warm start's seed mean, smoothed; band: 95 % interval over warm starts), and the theory's bound SNR/(1+SNR) at
    the SNR of the async runs' mean half-batch cosine (dashed; ``llm_figures.mean_bound``). With fewer than
    ``MIN_BAND_RUNS`` warm starts each warm start's line is drawn instead of the band."""
    rows = [r for r in rows if not r.get("final_eval")]
    stalenesses = sorted({r["staleness"] for r in rows})
    for s in stalenesses:
        arm = llm_figures.arm_name("sync" if s == 0 else "naive", "gradient", s)
        steps, mean, low, high = llm_figures.band(rows, "cos_prev", arm)
        color = STALENESS_COLORS.get(s, "#7f7f7f")
        ax.plot(steps, centered_mean(mean), color=color, label="sync" if s == 0 else f"async s = {s}")
        spread(ax, rows, "cos_prev", arm, (steps, low, high), color, limits=(-1.0, 1.0), smooth=centered_mean)
    halves, bound = llm_figures.mean_bound(rows, [s for s in stalenesses if s > 0])
    if bound == bound:
        ax.axhline(bound, color="#555555", ls="--", lw=1.0,
                   label=f"bound SNR/(1+SNR) = {bound:.2f}\n(halves' cosine {halves:.3f})")
    ax.axhline(0, color="grey", lw=0.6)
    warm = len({r["warm_seed"] for r in rows})
    ax.set(xlabel="RL step", ylabel="consecutive-gradient cosine\n(mean over warm starts, smoothed)", ylim=(-0.6, 1.0))
    ax.set_title(textwrap.fill(f"small LLM, {warm} warm starts: {llm_figures.CONFIG}", 42), fontsize="small")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the panel, not over it


def llm_rows(results: Results) -> list[dict]:
    """fig1's LLM panel: the testbed's fig1 runs, per step, with their run means."""
    rows = [r for r in llm_figures.step_rows(results.runs(), "fig1") if not r.get("final_eval")]
    return llm_figures.with_run_means(rows)


TOY_SIMS = ("quadratic", "bandit_gaussian", "bandit_softmax")


def toy_units(profile: str, device: str = "cpu") -> list[Unit]:
    """The toy panels' simulations, one cached unit each (fig9 reads the same units)."""
    return [unit(f"{NAME}/{sim}", toy.cosine_rows, sim, profile, device, spec=f"{NAME}/{sim}", cost=1.3)
            for sim in TOY_SIMS]


PANELS = [
    Panel("quadratic", lambda results: results.value(f"{NAME}/quadratic", []),
          lambda ax, rows: plot_cosine(ax, rows, rf"noisy quadratic, $\eta\lambda_{{\max}}$ = {toy.QUADRATIC_LR}")),
    Panel("bandit_gaussian", lambda results: results.value(f"{NAME}/bandit_gaussian", []),
          lambda ax, rows: plot_cosine(ax, rows, "Gaussian-policy bandit (GRPO, B = 4, G = 16)")),
    Panel("bandit_softmax", lambda results: results.value(f"{NAME}/bandit_softmax", []),
          lambda ax, rows: plot_cosine(ax, rows, "10-armed softmax bandit (GRPO, B = 4, G = 16)")),
    Panel("llm", llm_rows, plot_llm),
]


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The toy simulations (a dry run's at the smoke sizes) and the LLM testbed's fig1 runs
    (experiments/llm_figures.py)."""
    return [*toy_units("smoke" if dry_run else profile, device),
            *[run_unit(r) for r in llm_figures.runs(profile, device, dry_run) if "fig1" in r.roles]]


def cosine_table(rows: list[dict]) -> list[dict]:
    """Mean over seeds of each run's mean cosine after warm-up, per (sim, staleness), + diverged count."""
    runs = {(r["sim"], r.get("config", ""), r["staleness"], r.get("warm_seed", 0), r["seed"]): (
        r["run_mean_cos_prev"], r["run_diverged"], r["run_mean_cos_prev_alive"]) for r in rows}
    table = []
    for sim, config, staleness in sorted({k[:3] for k in runs}):
        vals = [v for k, v in runs.items() if k[:3] == (sim, config, staleness)]
        cos = [c for c, _, _ in vals]
        alive = [a for _, _, a in vals]
        table.append({"sim": sim, "config": config, "staleness": staleness, "mean_cos_prev": sum(cos) / len(cos),
                      "min_seed": min(cos), "max_seed": max(cos),
                      "mean_cos_prev_before_divergence": sum(alive) / len(alive),
                      "diverged": sum(d for _, d, _ in vals), "seeds": len(vals)})
    return table


def plot(results: Results, out_dir: Path, panels=None) -> list[Path]:
    """Every panel with rows in ``results`` (a test may declare fewer units), then the table."""
    drawn = [(panel, rows) for panel in (PANELS if panels is None else panels) if (rows := panel.rows(results))]
    apply_style()
    # At a page's width (7 in), two panels to a row.
    cols = min(2, len(drawn))
    rows_of_panels = math.ceil(len(drawn) / cols)
    fig, axes = plt.subplots(rows_of_panels, cols, figsize=(3.5 * cols, 2.8 * rows_of_panels), squeeze=False,
                             layout="constrained")
    flat = list(axes.flat)
    for ax in flat[len(drawn):]:
        fig.delaxes(ax)  # an empty place in the last row
    all_rows = []
    for ax, (panel, rows) in zip(flat, drawn, strict=False):
        panel.plot(ax, rows)
        ax.set_title(textwrap.fill(ax.get_title(), 48))  # a long title on two lines, not over its neighbour's
        all_rows.extend(rows)
    panel_letters(flat[:len(drawn)])
    handles, names = flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names))  # the staleness key, below the panels
    table = cosine_table(all_rows)
    for row in table:
        print(f"  {row['sim']:<16} {row['config'][:24]:<24} s={row['staleness']:>2}  "
              f"mean cos {row['mean_cos_prev']:+.3f} "
              f"[{row['min_seed']:+.3f}, {row['max_seed']:+.3f}]  (all steps before divergence "
              f"{row['mean_cos_prev_before_divergence']:+.3f})  diverged {row['diverged']}/{row['seeds']}")
    return [write_records(all_rows, out_dir / f"{NAME}.csv"), write_records(table, out_dir / f"{NAME}_table.csv"),
            *save_figure(fig, out_dir, NAME)]
