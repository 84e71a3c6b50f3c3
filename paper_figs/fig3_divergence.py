"""fig3_divergence: objective and gradient norm over training — sync vs naive async vs async + GAC at s = 16.

A list of panels (``PANELS``) like fig1; each picks per-step record rows with a ``sim`` column out of the results. GAC
is the registry's default configuration (``sim.stabilizers``; chosen in fig6_ablation). The quadratic
objective is the loss (lower is better); the bandit's is the exact expected reward J (higher is better).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt

from experiments import llm_figures, toy
from experiments.aggregate import centered_mean, seed_median
from experiments.llm import run_unit
from paper_figs.common import Panel, Results, apply_style, label_words, method_color, panel_letters, save_figure, spread
from runtime.cache import Unit, unit
from runtime.files import write_records
from sim.schema import nonfinite

NAME = "fig3_divergence"
ARM_WORDS = {"sync": "sync", "naive s=16": "naive async, s = 16", "gac gradient s=16": "GAC on the gradient, s = 16",
             "gac update s=16": "GAC on the update, s = 16"}
"""The testbed's arm names in words, for the legend."""
def plot_panel(axes, rows: list[dict], title: str, objective: str, objective_label: str, log: bool) -> None:
    ax_obj, ax_norm = axes
    for label in dict.fromkeys(r["label"] for r in rows):
        staleness = next(r["staleness"] for r in rows if r["label"] == label)
        legend = f"{label_words(label)} (s = {staleness})"
        steps, values = seed_median(rows, objective, label=label)
        ax_obj.plot(steps, [min(v, 1e8) for v in values], color=method_color(label), label=legend)
        steps, values = seed_median(rows, "grad_norm", label=label)
        ax_norm.plot(steps, [min(v, 1e8) for v in values], color=method_color(label), label=legend)
    ax_obj.set(title=title, xlabel="step", ylabel=objective_label, yscale="log" if log else "linear")
    ax_norm.set(xlabel="step", ylabel=r"$\|g_t\|$ (median over seeds)", yscale="log")


def llm_panel(results: Results) -> list[dict]:
    """The LLM testbed's fig3 runs (sync; naive async, GAC on the gradient and GAC on AdamW's update at s = 16; one
    shared step size), per step."""
    return llm_figures.step_rows(results.runs(), "fig3")


def plot_llm(axes, rows: list[dict]) -> None:
    """Three panels: held-out accuracy, reward, gradient norm over steps (mean over warm starts of each warm start's
    seed mean; band: 95 % interval over warm starts, or each warm start's line where there are fewer than
    ``MIN_BAND_RUNS``; the gradient norm's mean and band are geometric, taken on its logarithm over the steps that had
    a gradient, so that the band stays positive on the log axis)."""
    arms = list(dict.fromkeys(llm_figures.arm_name(*arm) for arm in llm_figures.FIG3_ARMS))
    styles = {"sync": ("#000000", "-"), "naive": (method_color("naive"), "-"),
              "gac gradient": (method_color("gac"), "--"), "gac update": ("#17becf", "-")}
    for arm in (a for a in arms if any(r["arm"] == a for r in rows)):
        color, style = next(v for k, v in styles.items() if arm.startswith(k))
        for ax, key, smoothed in zip(axes, ("accuracy", "objective", "grad_norm"), (False, True, True), strict=True):
            # a step whose groups all tied has no gradient (norm 0): no norm to average on a log scale
            drawn = [r for r in rows if r.get(key, 0) > 0] if key == "grad_norm" else rows
            steps, mean, low, high = llm_figures.band(drawn, key, arm, log=key == "grad_norm")
            if not len(steps):
                continue
            if smoothed:
                mean = centered_mean(mean)  # the band and the warm starts' lines are smoothed alike by spread
            ax.plot(steps, mean, color=color, ls=style, label=ARM_WORDS.get(arm, arm), marker=None if smoothed else "o",
                    ms=2)
            limits = {"accuracy": (0.0, 1.0), "objective": (0.0, 1.0), "grad_norm": (1e-12, math.inf)}[key]
            spread(ax, drawn, key, arm, (steps, low, high), color, limits=limits,
                   smooth=centered_mean if smoothed else (lambda values: values))
    warm = len({r["warm_seed"] for r in rows})
    axes[0].set(xlabel="RL step", ylabel="held-out accuracy (greedy)",
                title=textwrap.fill(f"small LLM, GRPO, {warm} warm starts: {llm_figures.CONFIG}", 42))
    axes[1].set(xlabel="RL step", ylabel="mean reward (train batch)")
    # log scale only where some step had a gradient (a 2-step smoke run may have none)
    axes[2].set(xlabel="RL step", ylabel="raw gradient norm",
                yscale="log" if any(r.get("grad_norm", 0) > 0 for r in rows) else "linear")
    axes[0].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(0.0, -0.25))  # below, not over a curve


TOY_SIMS = ("quadratic", "bandit_gaussian")


def toy_units(profile: str, device: str = "cpu") -> list[Unit]:
    """The toy panels' simulations, one cached unit each (fig9 reads the same units)."""
    return [unit(f"{NAME}/{sim}", toy.divergence_rows, sim, profile, device, spec=f"{NAME}/{sim}", cost=1.7)
            for sim in TOY_SIMS]


PANELS = [
    Panel("quadratic", lambda results: results.value(f"{NAME}/quadratic", []),
              lambda axes, rows: plot_panel(
                  axes, rows, rf"noisy quadratic, $\eta\lambda_{{\max}}$ = {toy.QUADRATIC_LR}", "objective",
                  "loss $f(x)$ (median; capped at 10⁸)", True)),
    Panel("bandit_gaussian", lambda results: results.value(f"{NAME}/bandit_gaussian", []),
              lambda axes, rows: plot_panel(axes, rows, "Gaussian-policy bandit (GRPO)", "reward_gap",
                                            "reward gap $J^* - J$ (median)", True)),
    Panel("llm", llm_panel, plot_llm, n_axes=3),
]


def failed_seeds(sim: str, finals: list[dict]) -> int | None:
    """How many of the last step's rows failed: non-finite (toys), or collapsed (LLM; None where the rows do not
    say, as those drawn from a committed CSV without the column)."""
    if sim != "llm":
        return sum(nonfinite(r) for r in finals)
    if not all("collapsed" in r for r in finals):
        return None
    return sum(bool(r["collapsed"]) for r in finals)


def summarize(rows: list[dict]) -> list[dict]:
    """Final objective (last recorded step, median over seeds) and failed seeds per (sim, label): non-finite for
    the toys, collapsed (the trainer's criterion, which non-finite implies) for the LLM."""
    out = []
    rows = [r for r in rows if not r.get("final_eval")]  # LLM rows that carry only the final accuracy
    for sim, label in dict.fromkeys((r["sim"], r["label"]) for r in rows):
        mine = [r for r in rows if r["sim"] == sim and r["label"] == label]
        last = max(r["step"] for r in mine)
        finals = sorted(r["objective"] for r in mine if r["step"] == last)
        out.append({"sim": sim, "label": label, "staleness": mine[0]["staleness"], "final_step": last,
                    "median_final_objective": finals[len(finals) // 2],
                    "failed": "collapsed" if sim == "llm" else "diverged",
                    "failed_seeds": failed_seeds(sim, [r for r in mine if r["step"] == last]), "seeds": len(finals)})
    return out


def panel_axes(panels) -> tuple[plt.Figure, list[tuple]]:
    """A figure with one column per panel, each split into as many stacked axes as its plot draws (the LLM
    panel has three, the toys two), so that no axes stay empty."""
    height = 2.3 * max(panel.n_axes or 2 for panel in panels)
    fig = plt.figure(figsize=(3.3 * len(panels), height), layout="constrained")
    columns = fig.subfigures(1, len(panels), squeeze=False)[0]
    return fig, [tuple(column.subplots(panel.n_axes or 2, 1, squeeze=False)[:, 0])
                 for column, panel in zip(columns, panels, strict=True)]


def runs(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Unit]:
    """The toy simulations (a dry run's at the smoke sizes) and the LLM testbed's fig3 runs
    (experiments/llm_figures.py)."""
    return [*toy_units("smoke" if dry_run else profile, device),
            *[run_unit(r) for r in llm_figures.runs(profile, device, dry_run) if "fig3" in r.roles]]


def plot(results: Results, out_dir: Path, panels=None) -> list[Path]:
    """Every panel with rows in ``results`` (a test may declare fewer units), then the summary."""
    drawn = [(panel, rows) for panel in (PANELS if panels is None else panels) if (rows := panel.rows(results))]
    apply_style()
    fig, columns = panel_axes([panel for panel, _ in drawn])
    all_rows = []
    for (panel, rows), axes in zip(drawn, columns, strict=True):
        panel.plot(axes, rows)
        all_rows.extend(rows)
    panel_letters([ax for axes in columns for ax in axes])
    handles, names = columns[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names))  # the toys' key, below every panel
    summary = summarize(all_rows)
    for row in summary:
        arm = row["label"] if row["sim"] == "llm" else f"{row['label']:<6} s={row['staleness']:>2}"  # LLM arms name s
        print(f"  {row['sim']:<16} {arm:<18} final objective {row['median_final_objective']:.4g}  "
              f"{row['failed']} {'?' if row['failed_seeds'] is None else row['failed_seeds']}/{row['seeds']}")
    return [write_records(all_rows, out_dir / f"{NAME}.csv"), write_records(summary, out_dir / f"{NAME}_summary.csv"),
            *save_figure(fig, out_dir, NAME)]
