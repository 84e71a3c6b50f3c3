"""Shared plumbing of the figure modules: one matplotlib style, method colors, what a plot receives, atomic outputs.

Every figure module declares ``runs(profile, device, dry_run) -> list[Unit]`` and draws ``plot(results, out)``
from a ``Results`` (paper_figs.driver computes the units). Every figure writes NAME.csv (the rows it plots,
through ``sim.record.write_records``), NAME.png and NAME.pdf into the output folder, each through a temp file and
a rename, so an interrupted run never leaves a half-written file. Under ``figure_style("talk")`` the same
``save_figure`` call writes one 16:9 slide per panel instead (``talk_panels``, below).
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import pickle
import string
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

from experiments.cache import Unit
from experiments.llm import Run, RunUnit
from sim import paths
from sim.record import atomic_write_bytes

if "ipykernel" not in sys.modules:  # a notebook keeps its backend (inline), so its figures show and are stored
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.text import Text  # noqa: E402

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
    "vcpo": "#393b79",
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


STYLES = ("paper", "talk")
"""What ``save_figure`` writes: paper (NAME.png and NAME.pdf, the whole figure) or talk (NAME_a.png, NAME_b.png, ...:
one 16:9 slide per panel, ``talk_panels``)."""
TALK_SIZE = (40 / 3, 7.5)
"""A 16:9 slide in inches (13.33 x 7.5, the widescreen slide of the common presentation programs)."""
TALK_DPI = 150
TALK_MIN_FONT = 18.0
"""The smallest font on a talk slide, in points at ``TALK_SIZE``: readable from the back of a room on a projector."""
TALK_FONT = {"title": 24.0, "label": 20.0, "text": TALK_MIN_FONT}
TALK_LINE_SCALE = 2.0
"""Lines and markers are this much wider on a slide (a 1.2 pt line is hard to see on a projected 13-inch figure)."""
TALK_LEGEND_INSIDE = 4
"""A slide's legend with more entries than this goes beside the panel instead of over it."""
_STYLE: contextvars.ContextVar[str] = contextvars.ContextVar("paper_figs_style", default="paper")


@contextlib.contextmanager
def figure_style(style: str) -> Iterator[None]:
    """Inside the block, ``save_figure`` writes ``style``'s files (one of ``STYLES``).

    paper_figs.driver wraps each figure's ``plot`` in it: a figure module's ``plot(results, out)`` stays the same for
    both styles (same results, same CSV), and only the last step, saving, differs.
    """
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    token = _STYLE.set(style)
    try:
        yield
    finally:
        _STYLE.reset(token)


def save_figure(fig, out_dir: Path, name: str) -> list[Path]:
    """Save ``fig`` as NAME.png and NAME.pdf in ``out_dir`` (atomically) and close it; under ``figure_style("talk")``
    as one slide per panel instead, NAME_a.png, NAME_b.png, ... (``save_talk_panels``)."""
    if _STYLE.get() == "talk":
        return save_talk_panels(fig, out_dir, name)
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


def panel_letter(index: int) -> str:
    """a, b, ..., z, aa, ab, ...: the suffix of the ``index``-th panel's file."""
    head, last = divmod(index, len(string.ascii_lowercase))
    return (panel_letter(head - 1) if head else "") + string.ascii_lowercase[last]


def save_talk_panels(fig, out_dir: Path, name: str) -> list[Path]:
    """Every panel of ``fig`` as a 16:9 PNG, NAME_a.png, NAME_b.png, ... in ``out_dir`` (atomically); closes all."""
    paths = []
    for index, slide in enumerate(talk_panels(fig)):
        buffer = io.BytesIO()
        with plt.rc_context({"savefig.bbox": "standard"}):  # the style's "tight" would crop the slide off 16:9
            slide.savefig(buffer, format="png", dpi=TALK_DPI)
        paths.append(atomic_write_bytes(Path(out_dir) / f"{name}_{panel_letter(index)}.png", buffer.getvalue()))
        plt.close(slide)
    plt.close(fig)
    return paths


def talk_panels(fig) -> list:
    """Each panel (axes) of ``fig`` alone on a ``TALK_SIZE`` figure, every font at least ``TALK_MIN_FONT``.

    Each slide is a copy of ``fig`` (pickled and loaded: matplotlib's own round trip, which carries every artist,
    legend, colorbar and subfigure) with every axes but one removed, so a slide shows the very artists, hence the
    data, of the paper figure, and a figure module needs no code for it. (Copying artists from figure to figure by
    hand needs code per artist type and breaks on transforms; handing every plot axes from a layout helper means
    changing every figure module and their fig-level calls, fig.colorbar, fig.legend, subfigures.)
    On the slide: the panel's colorbar is drawn again beside it; a panel without a title takes the one of the panel
    above it in its column, a panel sharing an axis gets the label and tick labels its neighbour carried; a panel with
    labelled artists gets its own legend; fonts are the talk sizes (long titles and labels wrapped), lines twice as
    wide; then the panel, its colorbar and the figure's suptitle and figure legend are fitted into the slide.
    """
    colorbar_axes = {m.colorbar.ax for ax in fig.axes for m in _mappables(ax) if m.colorbar is not None}
    panels = [i for i, ax in enumerate(fig.axes)
              if ax not in colorbar_axes and ax.get_visible() and (ax.axison or ax.has_data())]
    borrowed = {i: _borrowed_text(fig, fig.axes[i]) for i in panels}
    blob = pickle.dumps(fig)
    return [_one_panel(pickle.loads(blob), i, borrowed[i]) for i in panels]


def _mappables(ax) -> list:
    """The artists of ``ax`` that map values to colors (images, meshes, scatter with values)."""
    return [*ax.images, *(c for c in ax.collections if c.get_array() is not None)]


def _color_scale(mappable) -> tuple:
    return mappable.get_cmap().name, type(mappable.norm).__name__, mappable.norm.vmin, mappable.norm.vmax


def _borrowed_text(fig, ax) -> dict:
    """What a panel alone needs from its neighbours: the title of the nearest titled panel above it in its column
    (paper figures title a column once), and the axis label of an axes it shares x or y with (they label it once)."""
    borrowed = {}
    spec = ax.get_subplotspec()
    if not ax.get_title() and spec is not None:
        above = [other for other in fig.axes if other is not ax and other.get_title()
                 and (other_spec := other.get_subplotspec()) is not None
                 and other_spec.get_gridspec() is spec.get_gridspec() and other_spec.colspan == spec.colspan
                 and other_spec.rowspan.stop <= spec.rowspan.start]
        if above:
            borrowed["title"] = max(above, key=lambda other: other.get_subplotspec().rowspan.start).get_title()
    for axis, shared in (("x", ax.get_shared_x_axes()), ("y", ax.get_shared_y_axes())):
        siblings = [other for other in shared.get_siblings(ax) if other is not ax]
        if siblings:
            borrowed[f"share{axis}"] = True
            label = getattr(ax, f"get_{axis}label")()
            if not label:
                borrowed[f"{axis}label"] = next((text for other in siblings
                                                 if (text := getattr(other, f"get_{axis}label")())), "")
    return borrowed


def _one_panel(copy, index: int, borrowed: dict):
    """``copy`` (a copy of the paper figure) turned into the slide of its ``index``-th axes."""
    ax = copy.axes[index]
    scales = {}
    for other in copy.axes:
        for mappable in _mappables(other):
            if mappable.colorbar is not None:
                scales.setdefault(_color_scale(mappable), mappable.colorbar.ax.get_ylabel())
                mappable.colorbar.remove()
    for other in copy.axes:
        if other is not ax:
            other.remove()
    _keep_subfigures_of(copy, ax)
    copy.set_layout_engine("none")
    copy.set_size_inches(*TALK_SIZE)

    if "title" in borrowed:
        ax.set_title(borrowed["title"])
    for axis in ("x", "y"):
        if borrowed.get(f"{axis}label"):
            getattr(ax, f"set_{axis}label")(borrowed[f"{axis}label"])
        if borrowed.get(f"share{axis}"):  # a shared axis hides the tick labels of all but one neighbour
            ax.tick_params(axis=axis, **{"labelbottom" if axis == "x" else "labelleft": True})
    _widen_lines(ax.get_lines(), ax.collections)

    colorbars = []
    for mappable in _mappables(ax):
        if (scale := _color_scale(mappable)) in scales:
            colorbars.append(copy.colorbar(mappable, cax=copy.add_axes((0.9, 0.1, 0.02, 0.8), label="<colorbar>"),
                                           label=scales.pop(scale)))
    _talk_legends(copy, ax, room_at_right=not colorbars)
    for text in copy.findobj(Text):
        text.set_fontsize(TALK_FONT["text"])
    for axes in (ax, *(c.ax for c in colorbars)):
        axes.tick_params(labelsize=TALK_FONT["text"])
        axes.title.set_fontsize(TALK_FONT["title"])
        for label in (axes.xaxis.label, axes.yaxis.label):
            label.set_fontsize(TALK_FONT["label"])
    for text in copy.texts:  # the suptitle and other figure-level text
        text.set_fontsize(TALK_FONT["title"])
    renderer = copy.canvas.get_renderer()
    width, height = copy.bbox.width, copy.bbox.height
    for text, room in ((ax.title, 0.95 * width), (ax.xaxis.label, 0.9 * width), (ax.yaxis.label, 0.9 * height),
                       *((text, 0.95 * width) for text in copy.texts)):
        _wrap(text, room, renderer)
    _fit(copy, ax, [c.ax for c in colorbars], renderer)
    return copy


def _keep_subfigures_of(copy, ax) -> None:
    """Hide every subfigure that does not hold ``ax``; stretch the ones that do over the whole figure."""
    holders = set()
    parent = ax.get_figure(root=False)
    while parent is not copy:
        holders.add(parent)
        parent = parent.get_figure(root=False)
    stack = list(copy.subfigs)
    while stack:
        sub = stack.pop()
        stack.extend(sub.subfigs)
        if sub in holders:
            sub.bbox_relative.set_points(np.array([[0.0, 0.0], [1.0, 1.0]]))
        else:
            sub.set_visible(False)


def _widen_lines(lines, collections) -> None:
    for line in lines:
        line.set_linewidth(line.get_linewidth() * TALK_LINE_SCALE)
        line.set_markersize(line.get_markersize() * TALK_LINE_SCALE)
    for collection in collections:
        if isinstance(collection, PathCollection):  # scatter sizes are areas
            collection.set_sizes(collection.get_sizes() * TALK_LINE_SCALE**2)
        elif isinstance(collection, LineCollection):  # error bars
            collection.set_linewidths(np.asarray(collection.get_linewidths()) * TALK_LINE_SCALE)


def _talk_legends(copy, ax, room_at_right: bool) -> None:
    """Rebuild the legends at the talk font (a legend sizes its handles once, from its font): the panel's own, or a
    new one for a panel whose labelled artists the paper figure explained only in a neighbour's legend (beside the
    panel when it has more than ``TALK_LEGEND_INSIDE`` entries and no colour bar there, so that it hides no data);
    figure legends at the top of the slide."""
    in_figure_legends = set()
    for legend in list(copy.legends):
        labels = [t.get_text() for t in legend.get_texts()]
        handles = legend.legend_handles
        _widen_lines([h for h in handles if isinstance(h, Line2D)], [])
        legend.remove()
        copy.legend(handles, labels, loc="upper center", ncols=min(len(labels), 4), fontsize=TALK_FONT["text"],
                    frameon=False)
        in_figure_legends.update(labels)
    handles, labels = ax.get_legend_handles_labels()
    title = None
    if (legend := ax.get_legend()) is not None:
        own = dict(zip(labels, handles, strict=True))
        labels = [t.get_text() for t in legend.get_texts()]
        handles = [own.get(label, proxy) for label, proxy in zip(labels, legend.legend_handles, strict=True)]
        title = legend.get_title().get_text() or None
        legend.remove()
    elif set(labels) <= in_figure_legends:
        return
    if not labels:
        return
    beside = room_at_right and len(labels) > TALK_LEGEND_INSIDE
    ax.legend(handles, labels, loc="center left" if beside else "best", bbox_to_anchor=(1.01, 0.5) if beside else None,
              ncols=1 if len(labels) <= 8 else 2, fontsize=TALK_FONT["text"], title=title,
              title_fontsize=TALK_FONT["text"])


def _wrap(text, room: float, renderer) -> None:
    """Break ``text`` into lines so that it is at most ``room`` pixels long along its direction."""
    content = text.get_text()
    if not content or not text.get_visible():
        return
    extent = text.get_window_extent(renderer)
    length = extent.width if abs(text.get_rotation() % 180) < 45 else extent.height
    if length <= room:
        return
    longest = max(len(line) for line in content.split("\n"))
    chars = max(12, int(longest * room / length * 0.95))
    text.set_text("\n".join(textwrap.fill(line, chars) for line in content.split("\n")))


def _fit(copy, ax, colorbar_axes: list, renderer, pad: float = 0.02) -> None:
    """Place ``ax`` (and its colorbars at its right) so that it, its labels, the figure's texts and legends above it,
    fill the slide inside a margin of ``pad`` (figure fraction)."""
    width, height = copy.bbox.width, copy.bbox.height
    top = 1 - pad
    for text in copy.texts:
        if text.get_visible() and text.get_text():
            top = min(top, text.get_window_extent(renderer).y0 / height - pad)
    for legend in copy.legends:
        legend.set_bbox_to_anchor((0.5, top), transform=copy.transFigure)
        top = legend.get_window_extent(renderer).y0 / height - pad
    x0, y0, x1, y1 = 0.1, 0.1, 0.9, top - 0.05
    bar_width, gap = 0.018, 0.015
    for _ in range(4):  # tick labels and wrapped texts move a little with the box: a few rounds settle it
        right = x1 - len(colorbar_axes) * (bar_width + gap * 4)
        ax.set_position((x0, y0, right - x0, y1 - y0))
        for k, cax in enumerate(colorbar_axes):
            cax.set_position((right + gap + k * (bar_width + gap * 4), y0, bar_width, y1 - y0))
        copy.draw_without_rendering()
        boxes = [a.get_tightbbox(renderer) for a in (ax, *colorbar_axes)]
        left = min(b.x0 for b in boxes) / width
        bottom = min(b.y0 for b in boxes) / height
        outer_right = max(b.x1 for b in boxes) / width
        outer_top = max(b.y1 for b in boxes) / height
        x0 += pad - left
        y0 += pad - bottom
        x1 -= outer_right - (1 - pad)
        y1 -= outer_top - top
        if x1 - x0 < 0.2 or y1 - y0 < 0.2:  # labels too large to fit: keep a visible plot area
            x0, x1 = min(x0, 0.4), max(x1, 0.6)
            y0, y1 = min(y0, 0.4), max(y1, 0.6)


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
