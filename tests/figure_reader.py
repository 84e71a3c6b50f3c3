"""What a reader sees in a figure: words and mathtext, never code identifiers; a letter on every panel of a
multi-panel figure; bands inside the metric's range; no legend over data. The figure smoke tests
(tests/sim/test_figures_smoke.py) run these checks on every figure they draw."""

from __future__ import annotations

import re

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.legend import Legend
from matplotlib.text import Text

from paper_figs import common

CODE = [re.compile(p) for p in (
    r"\b[^\W\d_]+_[\w.]*\w\b",  # snake_case identifiers and raw subscripts: gac_cap_t0.5_ema_ref, λ_max
    r"\b(theory|sim|experiments|gac)\.[a-z_]+",  # module paths: theory.convergence
    r"\bv\d\b",  # versions of code: v2
    r"[_^]\{",  # raw TeX outside $...$
)]
RANGES = {"cos": (-1.0, 1.0), "accuracy": (0.0, 1.0)}
"""Words of a y-label and the range its metric cannot leave."""


def reader_problems(text: str) -> list[str]:
    """The code-like fragments of a figure's text outside its mathtext ($...$)."""
    plain = re.sub(r"\$[^$]*\$", "", text)
    return [m.group(0) for pattern in CODE for m in pattern.finditer(plain)]


def capture(module, monkeypatch) -> list:
    """The figures ``module``'s plot saves from now on (drawn and kept open for the checks)."""
    figures = []
    real = common.save_figure

    def keep(fig, out_dir, name):
        fig.canvas.draw()
        figures.append(fig)
        return real(fig, out_dir, name)

    monkeypatch.setattr(module, "save_figure", keep)
    monkeypatch.setattr(common.plt, "close", lambda *a, **k: None)
    return figures


def panels(fig) -> list:
    """The panels (axes with lines, collections, images or bars), colour bars left out, subfigures included."""
    axes = [ax for sub in [fig, *fig.subfigs] for ax in sub.axes]
    return [ax for ax in dict.fromkeys(axes) if ax.get_visible() and ax.get_label() != "<colorbar>"
            and (ax.lines or ax.collections or ax.images or ax.patches)]


def assert_a_reader_understands(fig, name: str) -> None:
    texts = [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    problems = {t: reader_problems(t) for t in texts if reader_problems(t)}
    assert not problems, f"{name}: code in the figure's text: {problems}"
    drawn = panels(fig)
    if len(drawn) > 1:
        unlettered = [ax.get_title() for ax in drawn
                      if not any(re.match(r"\(?[a-z]\)", ax.get_title(loc)) for loc in ("left", "center"))]
        assert not unlettered, f"{name}: panels without a letter: {unlettered}"
    renderer = fig.canvas.get_renderer()
    for ax in drawn:
        label = ax.get_ylabel().lower()
        limits = next((r for word, r in RANGES.items() if word in label), None)
        for band in (c for c in ax.collections if isinstance(c, PolyCollection)):
            ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()] or [np.zeros(0)])
            ys = ys[np.isfinite(ys)]
            if limits and len(ys):
                assert limits[0] - 1e-9 <= ys.min() and ys.max() <= limits[1] + 1e-9, (name, label, ys.min(), ys.max())
        legend = ax.get_legend()
        if isinstance(legend, Legend) and legend.get_visible():
            box = legend.get_window_extent(renderer)
            inside = 0
            for line in ax.lines:
                xy = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
                xy = xy[np.isfinite(xy).all(axis=1)]
                inside += int(np.sum((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0)
                                     & (xy[:, 1] < box.y1)))
            assert inside == 0, f"{name}: the legend of '{ax.get_title()}' covers {inside} data points"
