"""fig1_cosine: consecutive-gradient cosine cos(g_t, g_{t−1}) over training, sync vs s ∈ {1, 2, 4, 8, 16}.

A list of panels (``PANELS``), one simulator each; every panel returns per-step record rows with a
``sim`` column, so more panels (the LLM run) are appended without touching these. Also writes
``fig1_cosine_table.csv``: the mean cosine after warm-up per (sim, staleness), over seeds (NaN for
runs that diverged before warm-up; the column ``mean_cos_prev_before_divergence`` covers them).
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt

from experiments import toy
from experiments.aggregate import centered_mean, seed_mean, seed_median, trailing_mean
from experiments.cache import cached_runs
from experiments.llm import DEFAULT_CONFIG, Run, llm_cosine_rows_with_run_means, sweep
from experiments.signature import strongest_rows, strongest_runs
from paper_figs.common import Panel, apply_style, save_figure
from sim.record import write_records

NAME = "fig1_cosine"
STALENESS_COLORS = {0: "#000000", 1: "#fdd49e", 2: "#fdbb84", 4: "#fc8d59", 8: "#e34a33", 16: "#b30000"}


def plot_cosine(ax, rows: list[dict], title: str) -> None:
    for s in sorted({r["staleness"] for r in rows}):
        steps, values = seed_median(rows, "cos_prev", staleness=s)
        label = "sync" if s == 0 else f"s={s}"
        ax.plot(steps, trailing_mean(values, 10), color=STALENESS_COLORS.get(s, "#7f7f7f"), label=label)
    ax.axhline(0.0, color="#999999", lw=0.6)
    ax.set(title=title, xlabel="step", ylabel="cos(g_t, g_{t-1}), median", ylim=(-1.0, 1.05))


def plot_llm(ax, rows: list[dict], key: str = "cos_prev", title: str = f"small LLM, {DEFAULT_CONFIG}") -> None:
    """The cosine ``key`` over RL steps (seed mean, centred moving average), one line per staleness."""
    stalenesses = sorted({r["staleness"] for r in rows})
    cmap = plt.get_cmap("viridis")
    for i, s in enumerate(stalenesses):
        steps, mean, _ = seed_mean(rows, key, staleness=s)
        color = "black" if s == 0 else cmap(i / max(1, len(stalenesses) - 1))
        ax.plot(steps, centered_mean(mean), color=color, label="sync" if s == 0 else f"async s={s}")
    ax.axhline(0, color="grey", lw=0.6)
    # The LLM panels' titles name a whole configuration: wrapped so neighbouring titles do not overlap.
    ax.set(xlabel="RL step", ylabel="consecutive-gradient cosine\n(seed mean, smoothed)", ylim=(-1.0, 1.05))
    ax.set_title(textwrap.fill(title, 42), fontsize="small")
    ax.legend()


PANELS = [
    Panel("quadratic", functools.partial(toy.cosine_rows, "quadratic"),
              lambda ax, rows: plot_cosine(ax, rows, f"noisy quadratic, η·λ_max = {toy.QUADRATIC_LR}")),
    Panel("bandit_gaussian", functools.partial(toy.cosine_rows, "bandit_gaussian"),
              lambda ax, rows: plot_cosine(ax, rows, "Gaussian-policy bandit (GRPO, B=4, G=16)")),
    Panel("bandit_softmax", functools.partial(toy.cosine_rows, "bandit_softmax"),
              lambda ax, rows: plot_cosine(ax, rows, "10-armed softmax bandit (GRPO, B=4, G=16)")),
    Panel("llm", llm_cosine_rows_with_run_means, plot_llm),
    # The signature map's strongest configuration (figs2_llm_signature), next to the sweep's default above.
    Panel("llm_signature", strongest_rows, lambda ax, rows: plot_llm(
        ax, rows, "cos_prev_shown", f"small LLM, strongest signature: {rows[0]['config']}")),
]


def llm_runs(profile: str, device: str = "cpu") -> list[Run]:
    """The GRPO runs this figure reads (``paper_figs.plan`` computes them before the figure starts)."""
    return sweep(profile, device) + strongest_runs(profile, device)


def cosine_table(rows: list[dict]) -> list[dict]:
    """Mean over seeds of each run's mean cosine after warm-up, per (sim, staleness), + diverged count."""
    runs = {(r["sim"], r.get("config", ""), r["staleness"], r["seed"]): (
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


def main(profile: str, out_dir: Path, device: str = "cpu", panels=None) -> list[dict]:
    panels = PANELS if panels is None else panels
    apply_style()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 2.6), squeeze=False)
    all_rows = []
    for ax, panel in zip(axes[0], panels, strict=True):
        rows = cached_runs(f"{NAME}/{panel.name}", profile, device, lambda p=panel: p.run(profile, device))
        panel.plot(ax, rows)
        all_rows.extend(rows)
    axes[0][0].legend(ncol=2)
    table = cosine_table(all_rows)
    for row in table:
        print(f"  {row['sim']:<16} {row['config'][:24]:<24} s={row['staleness']:>2}  "
              f"mean cos {row['mean_cos_prev']:+.3f} "
              f"[{row['min_seed']:+.3f}, {row['max_seed']:+.3f}]  (all steps before divergence "
              f"{row['mean_cos_prev_before_divergence']:+.3f})  diverged {row['diverged']}/{row['seeds']}")
    write_records(all_rows, out_dir / f"{NAME}.csv")
    write_records(table, out_dir / f"{NAME}_table.csv")
    save_figure(fig, out_dir, NAME)
    return table
