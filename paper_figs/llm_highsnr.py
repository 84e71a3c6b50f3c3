"""The high-SNR study's figures (``experiments.llm_highsnr``) from its committed CSVs: fig1's cosine panel and fig3's
four panels, each for the behaviour ratio and for the uncorrected one.

``python -m paper_figs.llm_highsnr`` draws ``docs/figures/fig1_cosine_llm_highsnr.png`` and
``docs/figures/fig3_divergence_llm_highsnr.png`` from ``docs/data/llm_highsnr_runs.csv`` and its ``_steps.csv``
(no run: the figures follow the committed data). Curves are means over warm starts of a 10-step moving average; a band
(95 % t-interval over warm starts) only where ≥ 3 warm starts are in, else each warm start is a thin line. The dashed
line beside a cosine curve is the cap SNR/(1+SNR) at the batch SNR the same runs measured (their halves' cosine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.llm_highsnr import FIG3_STALENESS, RATIOS, STEPCUT_LR, arm_name, batch_snr

if TYPE_CHECKING:
    import pandas as pd

# matplotlib, pandas and the statistics are imported where they run (--help answers without them)

ROOT = Path(__file__).resolve().parents[1]
RUNS_CSV = ROOT / "docs" / "data" / "llm_highsnr_runs.csv"
SMOOTH = 10
"""Steps of the moving average drawn."""
FIG3 = (("sync", "sync", "-"), ("naive s=16", "naive, s = 16", "-"),
        ("gac gradient s=16", "GAC on the gradient, s = 16", "--"),
        ("gac update s=16", "GAC on the update, s = 16", ":"))
"""fig3's arms: (arm name without the ratio, label, line style)."""
PANELS = (("accuracy", "held-out accuracy"), ("objective", "reward (training batch)"),
          ("grad_norm", "gradient norm (before clipping)"), ("kl_behaviour", "KL to the behaviour policy"))


def with_ratio(arm: str, ratio: str) -> str:
    return arm if arm == "sync" or ratio == "behaviour" else f"{arm}, uncorrected"


def curves(steps: pd.DataFrame, arm: str, key: str, smooth: int = SMOOTH) -> pd.DataFrame:
    """Steps × warm starts: each run's ``key`` (moving average over ``smooth`` steps of the defined values), averaged
    over the seeds of each warm start."""
    import pandas as pd

    part = steps[steps.arm == arm].dropna(subset=[key])
    if part.empty:
        return pd.DataFrame()
    table = part.pivot_table(index="step", columns=["warm_seed", "seed"], values=key)
    table = table.rolling(smooth, min_periods=1).mean() if smooth > 1 else table
    return table.T.groupby(level="warm_seed").mean().T


LIMITS = {"accuracy": (0.0, 1.0), "objective": (0.0, 1.0), "grad_norm": (0.0, math.inf),
          "kl_behaviour": (0.0, math.inf), "cos_prev": (-1.0, 1.0)}
"""The range each drawn metric cannot leave (a band is clipped to it)."""


def draw_band(ax, table: pd.DataFrame, color: str, style: str, label: str, key: str) -> None:
    """The warm starts' mean of ``table`` (steps × warm starts) with its 95 % t-band, clipped to ``key``'s range, where
    there are at least ``MIN_BAND_RUNS`` warm starts; else each warm start's line."""
    from experiments import stats
    from paper_figs.common import MIN_BAND_RUNS, band

    if table.empty:
        return
    x = table.index.to_numpy()
    if table.shape[1] >= MIN_BAND_RUNS:
        mean, low, high = stats.t_interval(table.to_numpy(dtype=float), 0.95, axis=1)
        band(ax, x, low, high, table.shape[1], color, LIMITS[key], alpha=0.15)
        ax.plot(x, mean, color=color, ls=style, label=label)
    else:
        for i, column in enumerate(table.columns):
            ax.plot(x, table[column], color=color, ls=style, lw=0.8, label=label if i == 0 else None)


def cap(steps: pd.DataFrame, arm: str) -> pd.DataFrame:
    """Per step × warm start, the cap SNR/(1+SNR) at the batch SNR of the arm's halves' cosine (probe steps, moving
    average of the cosine over the probes)."""
    halves = curves(steps, arm, "cos_halves", smooth=3)
    return halves.apply(lambda column: column.map(lambda c: (lambda s: s / (1 + s))(batch_snr(c))))


def collapse_counts(runs: pd.DataFrame, arm: str) -> str:
    rows = runs[runs.arm == arm]
    return f"{int(rows.collapsed.sum())}/{len(rows)} collapsed" if len(rows) else "no runs"


def draw(runs: pd.DataFrame, steps: pd.DataFrame, out_dir: Path) -> list[Path]:
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from paper_figs.common import apply_style, method_color, panel_letters, save_figure

    apply_style()
    paths = []
    warm = runs.warm_seed.nunique()
    # fig1: the consecutive cosine and its cap, one panel per ratio
    stalenesses = sorted(s for s in runs.staleness.unique() if s > 0)
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), sharey=True)
    shades = plt.cm.Reds(np.linspace(0.45, 0.95, len(stalenesses)) if len(stalenesses) > 1 else [0.85])
    for ax, ratio in zip(axes, RATIOS, strict=True):
        arms = [("sync", "sync", "black")] + [(with_ratio(f"naive s={s}", ratio), f"naive, s = {s}", shade)
                                              for s, shade in zip(stalenesses, shades, strict=True)]
        for arm, label, color in arms:
            draw_band(ax, curves(steps, arm, "cos_prev"), color, "-", label, "cos_prev")
            bound = cap(steps, arm)
            if not bound.empty:
                ax.plot(bound.index, bound.mean(axis=1), color=color, ls="--", lw=0.8)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set(title=f"{RATIOS[ratio]}", xlabel="RL step")
    axes[0].set_ylabel("consecutive-gradient cosine")
    axes[1].plot([], [], color="grey", ls="--", lw=0.8, label="cap SNR/(1+SNR)")
    axes[1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.suptitle(f"Small LLM at batch SNR ≈ 1 or more, {warm} warm start{'s' * (warm != 1)}", fontsize="medium")
    panel_letters(axes)
    paths += save_figure(fig, out_dir, "fig1_cosine_llm_highsnr")
    # fig3: four quantities over steps, one column per ratio
    fig, axes = plt.subplots(len(PANELS), 2, figsize=(8.0, 9.0), sharex=True)
    final = runs.assign(step=runs.steps, accuracy=runs.final_accuracy)[["arm", "warm_seed", "seed", "step", "accuracy"]]
    with_final = pd.concat([steps, final], ignore_index=True)
    for column, ratio in enumerate(RATIOS):
        for arm, label, style in FIG3:
            name = with_ratio(arm, ratio)
            color = method_color(arm.split()[0])
            for row, (key, ylabel) in enumerate(PANELS):
                data = with_final if key == "accuracy" else steps
                draw_band(axes[row, column], curves(data, name, key, smooth=1 if key == "accuracy" else SMOOTH),
                          color, style, f"{label} ({collapse_counts(runs, name)})", key)
                axes[row, 0].set_ylabel(ylabel)
        if ratio == "proximal":  # the step-cut control: naive at GAC-on-the-update's effective step
            name = arm_name("naive", "gradient", FIG3_STALENESS, ratio, STEPCUT_LR)
            label = f"naive, s = {FIG3_STALENESS}, at GAC-on-the-update's step ({collapse_counts(runs, name)})"
            for row, (key, _) in enumerate(PANELS):
                data = with_final if key == "accuracy" else steps
                draw_band(axes[row, column], curves(data, name, key, smooth=1 if key == "accuracy" else SMOOTH),
                          "grey", "-.", label, key)
        axes[0, column].set_title(RATIOS[ratio])
        axes[0, column].set_ylim(0, 1)
        axes[-1, column].set_xlabel("RL step")
        handles, labels = axes[0, column].get_legend_handles_labels()
        axes[-1, column].legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize="small",
                                frameon=False)
    fig.suptitle(f"Small LLM at batch SNR ≈ 1 or more, {warm} warm start{'s' * (warm != 1)}", fontsize="medium")
    panel_letters(axes.flatten())
    paths += save_figure(fig, out_dir, "fig3_divergence_llm_highsnr")
    return paths


@dataclass
class Cli:
    """Draw the high-SNR study's fig1 and fig3 panels from its committed CSVs."""

    data: str = str(RUNS_CSV.relative_to(ROOT))
    """the runs' CSV (its per-step records beside it, *_steps.csv)"""
    out: str = "docs/figures"
    """folder for fig1_cosine_llm_highsnr.{png,pdf} and fig3_divergence_llm_highsnr.{png,pdf}"""


def main(cli: Cli) -> list[Path]:
    import pandas as pd

    from runtime.files import check_output_dir

    check_output_dir(cli.out, "out")
    data = Path(cli.data)
    steps_csv = data.with_name(data.stem + "_steps.csv")
    for path in (data, steps_csv):
        if not path.exists():
            raise SystemExit(f"error: {path} does not exist; make it with python -m experiments.llm_highsnr {data}")
    paths = draw(pd.read_csv(data), pd.read_csv(steps_csv, low_memory=False), Path(cli.out))
    print("\n".join(str(p) for p in paths))
    return paths


if __name__ == "__main__":
    from runtime.cli import parse

    main(parse(Cli, None, prog="python -m paper_figs.llm_highsnr"))
