"""fig3_divergence: objective and gradient norm over training — sync vs naive async vs async + GAC at s = 16.

A list of panels (``PANELS``) like fig1; each returns per-step record rows with a ``sim`` column. GAC
is the registry's default configuration (``sim.stabilizers``; chosen in fig6_ablation). The quadratic
objective is the loss (lower is better); the bandit's is the exact expected reward J (higher is better).
"""

from __future__ import annotations

import functools
from pathlib import Path

import matplotlib.pyplot as plt

from experiments import toy
from experiments.aggregate import centered_mean, seed_mean, seed_median
from experiments.cache import cached_runs
from experiments.llm import Run, llm_divergence_rows, sweep
from paper_figs.common import Panel, apply_style, method_color, save_figure
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


def llm_panel(profile: str, device: str = "cpu") -> list[dict]:
    """Small-LLM GRPO runs (sync, naive async, async+GAC at high staleness) from the shared cached sweep."""
    return [dict(r, label=r["method"]) for r in llm_divergence_rows(profile, device)]


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


PANELS = [
    Panel("quadratic", functools.partial(toy.divergence_rows, "quadratic"),
              lambda axes, rows: plot_panel(axes, rows, f"noisy quadratic, η·λ_max = {toy.QUADRATIC_LR}",
                                            "objective", "loss f(x) (median; capped 1e8)", True)),
    Panel("bandit_gaussian", functools.partial(toy.divergence_rows, "bandit_gaussian"),
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


def llm_runs(profile: str, device: str = "cpu") -> list[Run]:
    """The GRPO runs this figure reads (``paper_figs.plan`` computes them before the figure starts)."""
    return sweep(profile, device)


def main(profile: str, out_dir: Path, device: str = "cpu", panels=None) -> list[dict]:
    panels = PANELS if panels is None else panels
    apply_style()
    fig, columns = panel_axes(panels)
    all_rows = []
    for panel, axes in zip(panels, columns, strict=True):
        rows = cached_runs(f"{NAME}/{panel.name}", profile, device, lambda p=panel: p.run(profile, device))
        panel.plot(axes, rows)
        all_rows.extend(rows)
    columns[0][0].legend()
    summary = summarize(all_rows)
    for row in summary:
        print(f"  {row['sim']:<16} {row['label']:<6} s={row['staleness']:>2} final objective "
              f"{row['median_final_objective']:.4g}  diverged {row['diverged_seeds']}/{row['seeds']}")
    write_records(all_rows, out_dir / f"{NAME}.csv")
    write_records(summary, out_dir / f"{NAME}_summary.csv")
    save_figure(fig, out_dir, NAME)
    return summary
