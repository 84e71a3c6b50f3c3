"""The small model's batch SNR against samples per step, from the committed per-group measurement.

``python -m paper_figs.llm_snr`` draws ``docs/figures/llm_snr.png`` from ``docs/data/llm_snr.csv``
(``experiments.snr``): batch SNR = N·r for each configuration, training on every group (r) or on untied groups only
(dynamic sampling: r_untied, N the samples in the update, which draws N/(1 − f)) at the mean r over warm starts,
the band spanning the warm starts' r (with fewer than three warm starts, each one's line); one panel per reward; the
cosine cap SNR/(1 + SNR) on the right axis; the testbed's 128 samples marked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tyro

if TYPE_CHECKING:
    import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "llm_snr.csv"
TESTBED_SAMPLES = 16 * 8
"""The low-SNR testbed's samples per step (experiments.llm_figures.BASE: 16 prompts × 8)."""
HIGHSNR_SAMPLES = 2048
"""The high-SNR study's untied samples per step (experiments.llm_highsnr.BASE: 256 × 8, tied groups dropped)."""


def cap(snr):
    """The theory's cap on the consecutive-gradient cosine at batch SNR ``snr``: SNR/(1 + SNR)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # the axis probes values outside SNR ≥ 0 too
        return snr / (1 + snr)


def snr_at_cap(cosine):
    """The batch SNR whose cap is ``cosine``: c/(1 − c) (the right axis' inverse)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return cosine / (1 - cosine)


def draw(table: pd.DataFrame, out_dir: Path, name: str = "llm_snr") -> list[Path]:
    """The figure of ``table`` (``experiments.snr``'s columns) into ``out_dir``: one panel per reward."""
    import matplotlib.pyplot as plt

    from paper_figs.common import MIN_BAND_RUNS, apply_style, band, panel_letters, save_figure

    apply_style()
    rewards = sorted(table.reward.unique(), key=lambda r: (r != "exact", r))
    fig, axes = plt.subplots(1, len(rewards), figsize=(3.4 * len(rewards), 3.0), sharey=True, squeeze=False)
    samples = np.geomspace(32, 3e5, 50)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    configs = sorted(table.groupby(["digits", "group_size"]).groups)
    for ax, reward in zip(axes[0], rewards, strict=True):
        for (digits, group), part in table[table.reward == reward].groupby(["digits", "group_size"]):
            color = palette[configs.index((digits, group)) % len(palette)]
            r, r_untied = part.r_sample.to_numpy(), part.r_untied_sample.to_numpy()
            if part.warm_seed.nunique() >= MIN_BAND_RUNS:
                band(ax, samples, samples * max(r.min(), 1e-12), samples * r.max(), part.warm_seed.nunique(), color,
                     (0.0, np.inf), alpha=0.15)
            else:  # too few warm starts for a band: each one's line
                for r_warm in r:
                    ax.plot(samples, samples * max(r_warm, 1e-12), "-", color=color, lw=0.5, alpha=0.5)
            ax.plot(samples, samples * max(r.mean(), 0), "-", color=color,
                    label=f"{digits} digits, $G$ = {group}: $r$ = {r.mean():.2g}")
            ax.plot(samples, samples * max(r_untied.mean(), 0), "--", color=color,
                    label=f"{digits} digits, $G$ = {group}, tied groups dropped: $r$ = {r_untied.mean():.2g}")
        for level in (1, 4):
            ax.axhline(level, color="0.4", lw=0.6, ls=":")
        ax.axvline(TESTBED_SAMPLES, color="0.4", lw=0.6, ls=":")
        ax.text(TESTBED_SAMPLES * 1.1, 1.5e-3, "testbed\n(128)", fontsize=6, color="0.3")
        ax.axvline(HIGHSNR_SAMPLES, color="0.4", lw=0.6, ls=":")
        ax.text(HIGHSNR_SAMPLES * 1.1, 1.5e-3, "high-SNR study\n(2,048 untied)", fontsize=6, color="0.3")
        ax.set(xscale="log", yscale="log", xlim=(samples[0], samples[-1]), ylim=(1e-3, 1e2),
               xlabel="samples per step $N$ (in the update)",
               title=f"{reward} reward" + (" (not the paper's)" if reward != "exact" else ""))
        right = ax.secondary_yaxis("right", functions=(cap, snr_at_cap))
        right.set_yticks([0.01, 0.1, 0.5, 0.8, 0.95, 0.99])
        right.set_yticklabels(["0.01", "0.1", "0.5", "0.8", "0.95", "0.99"] if ax is axes[0, -1] else [])
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=5.5)  # below the panel, not on a line
    axes[0, 0].set_ylabel("batch SNR = $N r$ (band: the warm starts' range)")
    right.set_ylabel("cosine cap SNR/(1+SNR)")
    panel_letters(axes.flatten())
    return save_figure(fig, out_dir, name)


@dataclass
class Cli:
    """Draw the batch SNR against samples per step from the committed per-group SNR table."""

    data: str = str(DATA.relative_to(ROOT))
    """the table of ``python -m experiments.snr``"""
    out: str = "docs/figures"
    """folder for llm_snr.png (and .pdf)"""


def main(cli: Cli) -> list[Path]:
    import pandas as pd

    data = Path(cli.data)
    if not data.exists():
        raise SystemExit(f"error: {data} does not exist; make it with python -m experiments.snr {data}")
    if not Path(cli.out).is_dir():
        raise SystemExit(f"error: --out {cli.out} is not a folder")
    paths = draw(pd.read_csv(data), Path(cli.out))
    print("\n".join(str(p) for p in paths))
    return paths


if __name__ == "__main__":
    main(tyro.cli(Cli))
