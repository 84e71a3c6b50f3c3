"""What a reader sees in a figure, checked on the drawn matplotlib Figure: words from a committed vocabulary and
mathtext, never code identifiers; a letter on every panel of a multi-panel figure; a band only over enough runs and
inside its metric's range; no legend over data; no text over another text. tests/sim/test_every_figure_reads.py
runs these checks on every figure of paper_figs. ``problems`` draws the figure once and runs every check; the
``*_problems`` checks read the figure as it was last drawn."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import LineCollection, PathCollection, PolyCollection, QuadMesh
from matplotlib.legend import Legend
from matplotlib.path import Path as MplPath
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from paper_figs import common

CODE = [re.compile(p) for p in (
    r"\b[^\W\d_]+_[\w.]*\w\b",  # snake_case identifiers and raw subscripts: gac_cap_t0.5_ema_ref, λ_max
    r"\b(theory|sim|experiments|gac|paper_figs)\.[a-z_]+",  # module paths: theory.convergence
    r"\bv\d\b",  # versions of code: v2
    r"[_^]\{",  # raw TeX outside $...$
)]
WORDS_FILE = Path(__file__).parent / "data" / "figure_words.txt"
"""The words a figure may use outside mathtext, one a line (lower case; single letters are the symbols in use)."""
BAND = re.compile(r"band over (\d+) runs")
"""How ``paper_figs.common.band`` names a band (its gid): the number of runs its interval is taken over."""


def vocabulary() -> frozenset[str]:
    return frozenset(w.strip() for w in WORDS_FILE.read_text(encoding="utf-8").splitlines() if w.strip())


def plain(text: str) -> str:
    """``text`` without its mathtext ($...$)."""
    return re.sub(r"\$[^$]*\$", " ", text)


def reader_problems(text: str) -> list[str]:
    """The code-like fragments of a figure's text outside its mathtext ($...$)."""
    return [m.group(0) for pattern in CODE for m in pattern.finditer(plain(text))]


def words(text: str) -> list[str]:
    """The words of ``text`` outside mathtext, lower case: runs of letters and digits with a letter in them (M2PO is
    one word; numbers, 3e-4 included, are none)."""
    text = re.sub(r"\d+(?:\.\d+)?e[-+]?\d+", " ", plain(text))
    tokens = "".join(c if c.isalpha() or c.isdecimal() else " " for c in text).lower().split()
    return [t for t in tokens if any(c.isalpha() for c in t)]


def unknown_words(text: str, known: frozenset[str]) -> list[str]:
    return [w for w in words(text) if w not in known]


def drawn_texts(fig) -> list[Text]:
    """The visible, non-empty texts of ``fig`` as last drawn: titles, axis labels, the tick labels of the ticks drawn
    (an axis keeps labels of ticks outside its view, never drawn), legends' texts, annotations, colour-bar labels."""
    every_tick_label, drawn_tick_labels = set(), set()
    for axis in fig.findobj(Axis):
        for tick in [*axis.majorTicks, *axis.minorTicks]:
            every_tick_label |= {id(tick.label1), id(tick.label2)}
        for tick in axis._update_ticks():  # the ticks inside the view: the ones drawn
            drawn_tick_labels |= {id(tick.label1), id(tick.label2)}
    return [t for t in dict.fromkeys(fig.findobj(Text)) if t.get_visible() and t.get_text().strip()
            and (id(t) not in every_tick_label or id(t) in drawn_tick_labels)
            and (t.axes is None or t.axes.get_visible())]


def panels(fig) -> list:
    """The panels (axes with lines, collections, images or bars), colour bars left out, subfigures included."""
    axes = [ax for sub in [fig, *fig.subfigs] for ax in sub.axes]
    return [ax for ax in dict.fromkeys(axes) if ax.get_visible() and ax.get_label() != "<colorbar>"
            and (ax.lines or ax.collections or ax.images or ax.patches)]


def ylabel(ax) -> str:
    """The y label of ``ax``, or of an axes it shares its y axis with, or of the first panel of its grid row (a row of
    panels that plots one metric labels only its first)."""
    row = [] if ax.get_subplotspec() is None else [
        a for a in ax.figure.axes if a.get_subplotspec() is not None
        and a.get_subplotspec().get_gridspec() is ax.get_subplotspec().get_gridspec()
        and a.get_subplotspec().rowspan == ax.get_subplotspec().rowspan and a.get_subplotspec().colspan.start == 0]
    return next((a.get_ylabel() for a in [ax, *ax.get_shared_y_axes().get_siblings(ax), *row] if a.get_ylabel()), "")


def metric_range(label: str) -> tuple[float, float] | None:
    """The range a metric cannot leave, from its axis label's words (None: the label names no known metric)."""
    label = label.lower()
    difference = any(sign in label for sign in ("δ", "−", "gain", "minus"))
    if "accuracy" in label:
        return (-1.0, 1.0) if difference else (0.0, 1.0)
    if "cos" in label:
        return (-2.0, 2.0) if difference else (-1.0, 1.0)
    if "reward" in label and "gap" not in label:
        return (-1.0, 1.0) if difference else (0.0, 1.0)
    if any(word in label for word in ("norm", "kl", "snr", "loss", "gap", "‖")):
        return (0.0, math.inf)
    return None


def band_problems(fig) -> list[str]:
    """Every band (a filled interval: ``fill_between``'s collection, or a patch named as a band) is named by
    ``common.band`` with its number of runs, at least ``common.MIN_BAND_RUNS``, and stays in its axis' metric range."""
    problems = []
    for ax in panels(fig):
        label = ylabel(ax)
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        bands += [p for p in ax.patches if BAND.fullmatch(p.get_gid() or "")]
        for band in bands:
            named = BAND.fullmatch(band.get_gid() or "")
            if named is None:
                problems.append(f"a band without its number of runs on '{label}' (draw it with common.band)")
                continue
            if int(named[1]) < common.MIN_BAND_RUNS:
                problems.append(f"a band over {named[1]} runs on '{label}' (fewer than {common.MIN_BAND_RUNS}: "
                                "draw each run)")
            limits = metric_range(label)
            if limits is None:
                problems.append(f"a band on '{label}', a metric without a declared range")
                continue
            paths = band.get_paths() if isinstance(band, PolyCollection) else [band.get_path()]
            transform = ax.transData.inverted() + band.get_transform() if not isinstance(band, PolyCollection) \
                else None
            ys = np.concatenate([(p.vertices if transform is None else transform.transform(p.vertices))[:, 1]
                                 for p in paths] or [np.zeros(0)])
            ys = ys[np.isfinite(ys)]
            if len(ys) and (ys.min() < limits[0] - 1e-9 or ys.max() > limits[1] + 1e-9):
                problems.append(f"a band on '{label}' spans [{ys.min():.3g}, {ys.max():.3g}], outside {limits}")
    return problems


def letter_problems(fig) -> list[str]:
    """Each panel of a multi-panel figure starts its title with its own letter: (a), (b), …"""
    drawn = panels(fig)
    if len(drawn) < 2:
        return []
    letters = {}
    for ax in drawn:
        found = next((m[1] for loc in ("left", "center") if (m := re.match(r"\(([a-z])\)", ax.get_title(loc)))),
                     None)
        letters[ax] = found
    problems = [f"a panel without a letter: '{ax.get_title()}'" for ax, found in letters.items() if found is None]
    seen = [found for found in letters.values() if found]
    if len(seen) != len(set(seen)):
        problems.append(f"panel letters repeat: {sorted(seen)}")
    return problems


def _runs(xy: np.ndarray) -> list[np.ndarray]:
    """The finite stretches of a polyline (a NaN breaks it)."""
    finite = np.isfinite(xy).all(axis=1)
    pieces, start = [], None
    for i, ok in enumerate([*finite, False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            pieces.append(xy[start:i])
            start = None
    return pieces


def _covers(box: Bbox, ax) -> int:
    """How many of ``ax``'s data artists (lines, points, error bars, bands, bars, images) ``box`` covers."""
    covered = 0
    for line in ax.lines:
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        connected = line.get_linestyle() not in ("None", "none", "", " ")
        for piece in _runs(xy):
            inside = (piece[:, 0] > box.x0) & (piece[:, 0] < box.x1) & (piece[:, 1] > box.y0) & (piece[:, 1] < box.y1)
            covered += bool(inside.any() or (connected and len(piece) > 1
                                             and MplPath(piece).intersects_bbox(box, filled=False)))
    for collection in ax.collections:
        if not collection.get_visible():
            continue
        if isinstance(collection, PathCollection):  # scatter: its points
            xy = collection.get_offset_transform().transform(np.asarray(collection.get_offsets(), dtype=float))
            xy = xy[np.isfinite(xy).all(axis=1)]
            covered += int(((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0)
                            & (xy[:, 1] < box.y1)).any())
        elif isinstance(collection, LineCollection | PolyCollection):  # error bars, bands
            filled = isinstance(collection, PolyCollection)
            for path in collection.get_paths():
                for piece in _runs(collection.get_transform().transform(path.vertices)):
                    covered += bool(len(piece) > 1 and MplPath(piece).intersects_bbox(box, filled=filled))
        elif isinstance(collection, QuadMesh):
            covered += int(box.overlaps(collection.get_window_extent()))
    for artist in [*ax.patches, *ax.images]:
        if artist.get_visible():
            extent = artist.get_window_extent()
            covered += int(extent.width > 0 and extent.height > 0 and _overlap(box, extent))
    return covered


def _overlap(a: Bbox, b: Bbox, margin: float = 1.0) -> bool:
    """Whether two boxes overlap by more than ``margin`` display pixels each way."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > margin and min(a.y1, b.y1) - max(a.y0, b.y0) > margin


def legends(fig) -> list[Legend]:
    found = [ax.get_legend() for ax in fig.findobj(Axes)]
    found += [legend for sub in [fig, *fig.subfigs] for legend in sub.legends]
    return [legend for legend in dict.fromkeys(found) if isinstance(legend, Legend) and legend.get_visible()]


def legend_problems(fig) -> list[str]:
    """No legend, wherever it sits, covers a data artist of any panel."""
    renderer = fig.canvas.get_renderer()
    problems = []
    for legend in legends(fig):
        box = legend.get_window_extent(renderer)
        for ax in panels(fig):
            if n := _covers(box, ax):
                entries = [t.get_text() for t in legend.get_texts()][:3]
                problems.append(f"the legend {entries}… covers {n} data artists of '{ax.get_title()}'")
    return problems


def _corners(text: Text, renderer) -> np.ndarray:
    """The four corners of ``text``'s rotated box in display pixels (the unrotated box turned about the centre of the
    rotated one's bounding box, which it is inscribed in)."""
    extent = text.get_window_extent(renderer)
    angle = math.radians(text.get_rotation())
    if abs(math.sin(angle)) < 1e-6 and abs(math.cos(angle)) > 0:
        return np.array([[extent.x0, extent.y0], [extent.x1, extent.y0], [extent.x1, extent.y1],
                         [extent.x0, extent.y1]])
    rotation = text.get_rotation()
    text.set_rotation(0)
    flat = text.get_window_extent(renderer)
    text.set_rotation(rotation)
    half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [flat.width / 2, flat.height / 2]
    turn = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return half @ turn.T + [(extent.x0 + extent.x1) / 2, (extent.y0 + extent.y1) / 2]


def _separated(a: np.ndarray, b: np.ndarray, margin: float = 1.0) -> bool:
    """Whether two convex quadrilaterals are apart, or overlap by at most ``margin`` pixels (separating axes)."""
    for quad in (a, b):
        for i in range(4):
            edge = quad[(i + 1) % 4] - quad[i]
            normal = np.array([-edge[1], edge[0]]) / (np.hypot(*edge) or 1.0)
            pa, pb = a @ normal, b @ normal
            if min(pa.max(), pb.max()) - max(pa.min(), pb.min()) <= margin:
                return True
    return False


def overlap_problems(fig) -> list[str]:
    """No two drawn texts overlap (a legend counts as one box), nor a text and a legend."""
    renderer = fig.canvas.get_renderer()
    inside_legends = {id(t) for legend in legends(fig) for t in [*legend.get_texts(), legend.get_title()]}
    boxes = [(repr(t.get_text()), _corners(t, renderer)) for t in drawn_texts(fig) if id(t) not in inside_legends]
    for legend in legends(fig):
        e = legend.get_window_extent(renderer)
        boxes.append((f"legend {[t.get_text() for t in legend.get_texts()][:2]}…",
                      np.array([[e.x0, e.y0], [e.x1, e.y0], [e.x1, e.y1], [e.x0, e.y1]])))
    if len(boxes) < 2:
        return []
    corners = np.array([quad for _, quad in boxes])
    low, high = corners.min(axis=1), corners.max(axis=1)
    near = ((np.minimum(high[:, None, 0], high[None, :, 0]) - np.maximum(low[:, None, 0], low[None, :, 0]) > 1.0)
            & (np.minimum(high[:, None, 1], high[None, :, 1]) - np.maximum(low[:, None, 1], low[None, :, 1]) > 1.0))
    return [f"{boxes[i][0]} overlaps {boxes[j][0]}" for i, j in zip(*np.nonzero(np.triu(near, 1)), strict=True)
            if not _separated(corners[i], corners[j])]  # the rotated boxes, where their bounding boxes meet


def word_problems(fig, known: frozenset[str] | None = None) -> list[str]:
    """Code identifiers and words outside the vocabulary, in every drawn text (tick labels included)."""
    known = vocabulary() if known is None else known
    problems = []
    for text in dict.fromkeys(t.get_text() for t in drawn_texts(fig)):
        if code := reader_problems(text):
            problems.append(f"code in the figure's text: {code} in {text!r}")
        if unknown := unknown_words(text, known):
            problems.append(f"words outside {WORDS_FILE.name}: {unknown} in {text!r}")
    return problems


def problems(fig) -> list[str]:
    """Everything a reader would stumble on in ``fig`` (drawn first, once)."""
    fig.canvas.draw()
    return [*word_problems(fig), *letter_problems(fig), *band_problems(fig), *legend_problems(fig),
            *overlap_problems(fig)]


def assert_a_reader_understands(fig, name: str) -> None:
    found = problems(fig)
    assert not found, f"{name}: " + "; ".join(found)


def capture(module, monkeypatch) -> list:
    """The figures ``module``'s plot saves from now on (drawn and kept open for the checks)."""
    figures = []
    real = common.save_figure

    def keep(fig, out_dir, name):
        paths = real(fig, out_dir, name)
        figures.append(fig)
        return paths

    monkeypatch.setattr(common, "save_figure", keep)  # the modules that import it where they draw
    if hasattr(module, "save_figure"):
        monkeypatch.setattr(module, "save_figure", keep)
    monkeypatch.setattr(common.plt, "close", lambda *a, **k: None)
    return figures
