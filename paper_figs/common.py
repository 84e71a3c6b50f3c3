"""Shared plumbing of the figure modules: one matplotlib style, method colors, what a plot receives, atomic outputs.

Every figure module declares ``runs(profile, device, dry_run) -> list[Unit]`` and draws ``plot(results, out)``
from a ``Results`` (paper_figs.driver computes the units). Every figure writes NAME.csv (the rows it plots,
through ``runtime.files.write_records``), NAME.png and NAME.pdf into the output folder, each through a temp file and
a rename, so an interrupted run never leaves a half-written file.
"""

from __future__ import annotations

import io
import re
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

from experiments.llm import Run, RunUnit
from runtime.cache import Unit
from runtime.files import atomic_write_bytes

if "ipykernel" not in sys.modules:  # a notebook keeps its backend (inline), so its figures show and are stored
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# Paper column width is about 3.3 in; figures are sized in multiples of it and stay readable there.
STYLE = {
    "figure.dpi": 150,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.2,
}

# One color per method name (as named in sim/stabilizers.py), the same in every figure.
METHOD_COLORS = {
    "sync": "#000000",
    "naive": "#d62728",
    "gac": "#1f77b4",
    "lr_scale": "#ff7f0e",
    "dc": "#9467bd",
    "tis": "#2ca02c",
    "m2po": "#8c564b",
    "bapo": "#e377c2",
    "vcpo": "#393b79",
}


SIM_TITLES = {"quadratic": "noisy quadratic", "quadratic_adam": "noisy quadratic, Adam",
              "bandit_gaussian": "Gaussian bandit", "bandit_gaussian_mean": "Gaussian bandit (r − mean)",
              "bandit_softmax": "softmax bandit", "bandit_karmed": "10-armed softmax bandit",
              "bandit_contextual": "contextual bandit", "llm": "small LLM"}
"""A simulator's name in words, for panel titles."""
WORDS = {"gac": "GAC", "tis": "TIS", "m2po": "M2PO", "bapo": "BAPO", "vcpo": "VCPO", "dc": "delay compensation",
         "lr": "step", "naive": "naive async", "sync": "sync", "ema": "EMA", "ref": "reference", "adam": "(Adam)",
         "adaptive": "adaptive τ", "gradient": "on the gradient", "update": "on the update",
         "momentum": "on the momentum", "braking": "braking", "kl": "KL", "target": "target"}


def label_words(label: str) -> str:
    """A run label of the registries (``gac_cap_t0.5_ema_ref``, ``lr_scale``, ``naive_adam``, ``gac update``,
    ``kl_target+gac``) in words for a legend or a tick: 'GAC cap τ = 0.5 EMA reference', 'step ÷ (1 + s)', 'naive async
    (Adam)', 'GAC on the update', 'KL target + GAC'."""
    parts = []
    for part in label.split("+"):
        if part.strip() == "lr_scale":
            parts.append("step ÷ (1 + s)")
            continue
        words = []
        for token in re.split(r"[_ ]", part.strip()):
            threshold = re.fullmatch(r"t(\d+(?:\.\d+)?)", token)
            words.append(f"τ = {threshold[1]}" if threshold else WORDS.get(token, token))
        parts.append(" ".join(w for w in words if w))
    return " + ".join(parts)


def method_color(method: str) -> str:
    """The color of a method; variants such as "gac_cap" take their family's color."""
    return METHOD_COLORS.get(method, METHOD_COLORS.get(method.split("_")[0], "#7f7f7f"))


def apply_style() -> None:
    plt.rcParams.update(STYLE)


@dataclass(frozen=True)
class Results:
    """What a figure's ``plot`` receives: how its units were declared and each one's result, in declaration order."""

    profile: str
    device: str = "cpu"
    dry_run: bool = False
    items: tuple[tuple[Unit, Any], ...] = ()

    def runs(self) -> list[tuple[Run, dict]]:
        """(GRPO run, its {"records", "summary"}) for every GRPO unit, in declaration order."""
        return [(u.spec, value) for u, value in self.items if isinstance(u, RunUnit)]

    def value(self, spec: str, default: Any = None) -> Any:
        """The result of the unit whose ``spec`` is ``spec`` (a toy computation's name), else ``default``."""
        return next((value for u, value in self.items if u.spec == spec), default)


@dataclass(frozen=True)
class Panel:
    """One panel of a multi-panel figure (fig1, fig3): ``rows(results)`` picks its record rows (with a ``sim``
    column) out of the figure's results (none: the panel is left out), ``plot(axes, rows)`` draws them."""

    name: str
    rows: Callable[[Results], list[dict]]
    plot: Callable[..., None]
    n_axes: int = 0
    """How many stacked axes ``plot`` draws on (0: the figure's default)."""


def save_figure(fig, out_dir: Path, name: str) -> list[Path]:
    """Save ``fig`` as NAME.png and NAME.pdf in ``out_dir`` (atomically) and close it."""
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")  # keeps labels of neighbouring panels from overlapping
    paths = []
    for ext in ("png", "pdf"):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext)
        path = Path(out_dir) / f"{name}.{ext}"
        atomic_write_bytes(path, buffer.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths


MIN_BAND_RUNS = 3
"""A band (an interval over warm starts or seeds) needs at least this many of them; fewer are drawn one by one."""


def band(ax, x, low, high, runs: int, color, limits: tuple | None = None, alpha: float = 0.12):
    """Fill between ``low`` and ``high`` over ``x`` (``x`` None: across the whole width): an interval over ``runs``
    runs (warm starts, seeds), clipped to the metric's ``limits`` (a cosine in [−1, 1], an accuracy in [0, 1], a norm
    above 0). The band is named "band over N runs" (its gid), so that a reader check can count them. ValueError with
    fewer than ``MIN_BAND_RUNS`` runs: draw each run instead."""
    if runs < MIN_BAND_RUNS:
        raise ValueError(f"a band over {runs} runs: a band needs at least {MIN_BAND_RUNS}; draw each run instead")
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    if limits is not None:
        low, high = np.clip(low, *limits), np.clip(high, *limits)
    if x is None:
        artist = ax.axhspan(float(low), float(high), color=color, alpha=alpha, lw=0)
    else:
        artist = ax.fill_between(x, low, high, color=color, alpha=alpha, lw=0)
    artist.set_gid(f"band over {runs} runs")
    return artist


def spread(ax, rows: list[dict], key: str, arm: str, interval: tuple, color: str, limits: tuple | None = None,
           smooth: Callable = lambda values: values) -> None:
    """The spread around an arm's mean line: ``interval`` = (steps, low, high) as a ``band`` clipped to the metric's
    ``limits`` when the arm has at least ``MIN_BAND_RUNS`` warm starts; with fewer, each warm start's own line (its
    seeds' mean), thin."""
    mine = [r for r in rows if r["arm"] == arm and isinstance(r.get(key), (int, float)) and np.isfinite(r[key])
            and not r.get("diverged")]
    warm_starts = sorted({r["warm_seed"] for r in mine})
    if len(warm_starts) >= MIN_BAND_RUNS:
        steps, low, high = interval
        band(ax, steps, smooth(np.asarray(low, dtype=float)), smooth(np.asarray(high, dtype=float)),
             len(warm_starts), color, limits)
        return
    for warm_start in warm_starts:
        by_step: dict = {}
        for r in mine:
            if r["warm_seed"] == warm_start:
                by_step.setdefault(r["step"], []).append(r[key])
        steps = sorted(by_step)
        ax.plot(steps, smooth(np.array([np.mean(by_step[s]) for s in steps])), color=color, lw=0.5, alpha=0.5)


def panel_letters(axes) -> None:
    """Label each panel of a multi-panel figure (a), (b), … in reading order: in front of its title, or alone above
    its top-left corner where it has none (a separate left title would collide with a centred one on a narrow
    panel)."""
    for index, ax in enumerate(axes):
        letter = f"({string.ascii_lowercase[index]})"
        if ax.get_title():
            ax.set_title(f"{letter} {ax.get_title()}")
        else:
            ax.set_title(letter, loc="left", fontweight="bold")
