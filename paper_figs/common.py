"""Shared plumbing of the figure modules: one matplotlib style, method colors, what a plot receives, atomic outputs.

Every figure module declares ``runs(profile, device, dry_run) -> list[Unit]`` and draws ``plot(results, out)``
from a ``Results`` (paper_figs.driver computes the units). Every figure writes NAME.csv (the rows it plots,
through ``sim.record.write_records``), NAME.png and NAME.pdf into the output folder, each through a temp file and
a rename, so an interrupted run never leaves a half-written file.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

from experiments.cache import Unit
from experiments.llm import Run
from sim import paths
from sim.record import atomic_write_bytes

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

OUT_DIR = paths.figures_dir()
"""Figures' default folder (``sim.paths``: the checkout's paper_figs/out, else ./paper_figs/out; never the package)."""

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
}


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
        return [(u.spec, value) for u, value in self.items if u.kind == "llm_grpo"]

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


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread inside the block, then restore the previous count.

    For figures whose tensors are tiny (tens of rows × ~100 columns): a second thread brings nothing there,
    and when another process holds a core it costs a lot (fig7_bound quick: 196 s with torch's default 2
    threads next to a busy process on a 2-core machine, 8.4 s with 1 thread).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
