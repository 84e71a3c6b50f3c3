"""fig3_divergence: objective and gradient norm over training — sync vs naive async vs async + GAC at s = 16.

A list of panels (``PANELS``) like fig1; each picks per-step record rows with a ``sim`` column out of the results. GAC
is the registry's default configuration (``sim.stabilizers``; chosen in fig6_ablation). The quadratic
objective is the loss (lower is better); the bandit's is the exact expected reward J (higher is better).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from experiments import toy
from experiments.aggregate import centered_mean, seed_mean, seed_median
from experiments.cache import Unit, unit
from experiments.llm import divergence_runs, llm_divergence_rows, run_unit, sweep
from paper_figs.common import Panel, Results, apply_style, method_color, save_figure
from sim.record import write_records

NAME = "fig3_divergence"
def plot_panel(axes, rows: list[dict], title: str, objective: str, objective_label: str, log: bool) -> None:
    ax_obj, ax_norm = axes
    for label in dict.fromkeys(r["label"] for r in rows):
        staleness = next(r["staleness"] for r in rows if r["label"] == label)
        legend = f"{label} (s={staleness})"
        steps, values = seed_median(rows, objective, label=label)
        ax_obj.plot(steps, [min(v, 1e8) for v in values], color=method_color(label), label=legend)
        steps, values = seed_median(rows, "grad_norm", label=label)
        ax_norm.plot(steps, [min(v, 1e8) for v in values], color=method_color(label), label=legend)
    ax_obj.set(title=title, xlabel="step", ylabel=objective_label, yscale="log" if log else "linear")
    ax_norm.set(xlabel="step", ylabel="‖g_t‖ (median over seeds)", yscale="log")


def llm_panel(results: Results) -> list[dict]:
    """Small-LLM GRPO runs (sync, naive async, async+GAC at high staleness) of the shared sweep."""
    return [dict(r, label=r["method"]) for r in llm_divergence_rows(results.runs())]


def plot_llm(axes, rows: list[dict]) -> None:
    """Three panels: reward, held-out accuracy, gradient norm over steps (mean ± std over seeds)."""
    runs = sorted({(r["method"], r["staleness"]) for r in rows}, key=lambda m: (m[0] != "sync", m[0]))
    for method, s in runs:
        color = method_color(method)
        label = "sync" if method == "sync" else f"{method} (s={s})"
        for ax, key, smoothed in zip(axes, ("objective", "accuracy", "grad_norm"), (True, False, True), strict=True):
            steps, mean, spread = seed_mean(rows, key, method=method, staleness=s)
            if smoothed:
                mean, spread = centered_mean(mean), centered_mean(spread)
            ax.plot(steps, mean, color=color, label=label, marker=None if smoothed else "o", ms=2)
            ax.fill_between(steps, mean - spread, mean + spread, color=color, alpha=0.12, lw=0)
    axes[0].set(xlabel="RL step", ylabel="mean reward (train batch)", title="small LLM, GRPO on addition")
    axes[1].set(xlabel="RL step", ylabel="held-out accuracy")
    axes[2].set(xlabel="RL step", ylabel="raw gradient norm")
    axes[0].legend()


TOY_SIMS = ("quadratic", "bandit_gaussian")


def toy_units(profile: str, device: str = "cpu") -> list[Unit]:
    """The toy panels' simulations, one cached unit each (fig9 reads the same units)."""
    return [unit(f"{NAME}/{sim}", toy.divergence_rows, sim, profile, device, spec=f"{NAME}/{sim}", cost=2.0)
            for sim in TOY_SIMS]


PANELS = [
    Panel("quadratic", lambda results: results.value(f"{NAME}/quadratic", []),
              lambda axes, rows: plot_panel(axes, rows, f"noisy quadratic, η·λ_max = {toy.QUADRATIC_LR}",
                                            "objective", "loss f(x) (median; capped 1e8)", True)),
    Panel("bandit_gaussian", lambda results: results.value(f"{NAME}/bandit_gaussian", []),
              lambda axes, rows: plot_panel(axes, rows, "Gaussian-policy bandit (GRPO)", "reward_gap",
                                            "reward gap J* − J (median)", True)),
    Panel("llm", llm_panel, plot_llm, n_axes=3),
]


def summarize(rows: list[dict]) -> list[dict]:
    """Final objective (last recorded step, median over seeds) and diverged seeds per (sim, label)."""
    out = []
    rows = [r for r in rows if not r.get("final_eval")]  # LLM rows that carry only the final accuracy
    for sim, label in dict.fromkeys((r["sim"], r["label"]) for r in rows):
        mine = [r for r in rows if r["sim"] == sim and r["label"] == label]
        last = max(r["step"] for r in mine)
        finals = sorted(r["objective"] for r in mine if r["step"] == last)
        out.append({"sim": sim, "label": label, "staleness": mine[0]["staleness"], "final_step": last,
                    "median_final_objective": finals[len(finals) // 2],
                    "diverged_seeds": sum(r["diverged"] for r in mine if r["step"] == last), "seeds": len(finals)})
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
    """The toy simulations and the LLM sweep's runs at high staleness."""
    return [*toy_units(profile, device), *[run_unit(r) for r in divergence_runs(sweep(profile, device, dry_run))]]


def plot(results: Results, out_dir: Path, panels=None) -> list[Path]:
    """Every panel with rows in ``results`` (a test may declare fewer units), then the summary."""
    drawn = [(panel, rows) for panel in (PANELS if panels is None else panels) if (rows := panel.rows(results))]
    apply_style()
    fig, columns = panel_axes([panel for panel, _ in drawn])
    all_rows = []
    for (panel, rows), axes in zip(drawn, columns, strict=True):
        panel.plot(axes, rows)
        all_rows.extend(rows)
    columns[0][0].legend()
    summary = summarize(all_rows)
    for row in summary:
        print(f"  {row['sim']:<16} {row['label']:<6} s={row['staleness']:>2} final objective "
              f"{row['median_final_objective']:.4g}  diverged {row['diverged_seeds']}/{row['seeds']}")
    return [write_records(all_rows, out_dir / f"{NAME}.csv"), write_records(summary, out_dir / f"{NAME}_summary.csv"),
            *save_figure(fig, out_dir, NAME)]
