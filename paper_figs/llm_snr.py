"""The small model's batch SNR against samples per step, from the committed per-group measurement.

``python -m paper_figs.llm_snr`` draws ``docs/figures/llm_snr.png`` from ``docs/data/llm_snr.csv``
(``experiments.snr``): batch SNR = N·r for each configuration, training on every group (r) or on untied groups only
(dynamic sampling: r_untied, N the samples in the update, which draws N/(1 − f)); one thin line per warm start, the
mean r over warm starts thick; the cosine cap SNR/(1 + SNR) on the right axis; the testbed's 128 samples marked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import tyro

from paper_figs.common import apply_style, save_figure

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "llm_snr.csv"
TESTBED_SAMPLES = 16 * 8
"""The low-SNR testbed's samples per step (experiments.llm_figures.BASE: 16 prompts × 8)."""


def cap(snr):
    """The theory's cap on the consecutive-gradient cosine at batch SNR ``snr``: SNR/(1 + SNR)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # the axis probes values outside SNR ≥ 0 too
        return snr / (1 + snr)


def snr_at_cap(cosine):
    """The batch SNR whose cap is ``cosine``: c/(1 − c) (the right axis' inverse)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return cosine / (1 - cosine)


def draw(table: pd.DataFrame, out_dir: Path, name: str = "llm_snr") -> list[Path]:
    """The figure of ``table`` (``experiments.snr``'s columns) into ``out_dir``."""
    apply_style()
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    samples = np.geomspace(16, 1e6, 50)
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    config = ["digits", "group_size", "reward"]
    for (digits, group, reward), part in table.groupby(config):
        color = next(colors)
        for column, style, what in (("r_sample", "-", "every group"), ("r_untied_sample", "--", "tied dropped")):
            r = part[column].to_numpy()
            for value in r[r > 0]:
                ax.plot(samples, samples * value, style, color=color, lw=0.5, alpha=0.4)
            ax.plot(samples, samples * max(r.mean(), 0), style, color=color, lw=1.5,
                    label=f"{digits} digits, G={group}, {reward}: {what} (r={r.mean():.2g})")
    for level in (1, 4):
        ax.axhline(level, color="0.4", lw=0.6, ls=":")
    ax.axvline(TESTBED_SAMPLES, color="0.4", lw=0.6, ls=":")
    ax.text(TESTBED_SAMPLES * 1.1, 1.3e-3, "testbed (128)", fontsize=6, color="0.3")
    ax.set(xscale="log", yscale="log", xlim=(16, 1e6), ylim=(1e-3, 1e3),
           xlabel="samples per step N (in the update)", ylabel="batch SNR = N·r",
           title="Small model, warm starts: batch SNR (thin: each warm start)")
    right = ax.secondary_yaxis("right", functions=(cap, snr_at_cap))
    right.set_yticks([0.01, 0.1, 0.5, 0.8, 0.95, 0.99])
    right.set_yticklabels(["0.01", "0.1", "0.5", "0.8", "0.95", "0.99"])
    right.set_ylabel("cosine cap SNR/(1+SNR)")
    ax.legend(loc="upper left", fontsize=5.5)
    return save_figure(fig, out_dir, name)


@dataclass
class Cli:
    """Draw the batch SNR against samples per step from the committed per-group SNR table."""

    data: str = str(DATA.relative_to(ROOT))
    """the table of ``python -m experiments.snr``"""
    out: str = "docs/figures"
    """folder for llm_snr.png (and .pdf)"""


def main(cli: Cli) -> list[Path]:
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
