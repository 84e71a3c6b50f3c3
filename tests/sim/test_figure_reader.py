"""The reader checks of tests/figure_reader.py can fail, each on a figure made to break it (tests/sim/
test_every_figure_reads.py applies them to every figure), and the LLM panels' spread is a band only over at least
three warm starts, inside the metric's range."""

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from paper_figs.common import MIN_BAND_RUNS, band, panel_letters, spread
from tests.figure_reader import (
    assert_a_reader_understands,
    problems,
    reader_problems,
    unknown_words,
    vocabulary,
    words,
)


def test_the_code_check_catches_code_and_passes_words_and_mathtext():
    assert reader_problems("gac_cap_t0.5_ema_ref") and reader_problems("a-priori bound (theory.convergence v2)")
    assert reader_problems("mean cos(g_t, g_{t-1})") and reader_problems("(lines: predicted_cosine)")
    assert reader_problems("η·λ_max = 0.3")
    assert not reader_problems(r"mean $\cos(g_t, g_{t-1})$") and not reader_problems("GAC cap τ = 0.5, s = 16")


def test_words_outside_the_vocabulary_are_named():
    known = vocabulary()
    assert words(r"M2PO at 3e-4, $\cos(g_t)$ over 16×8 samples") == ["m2po", "at", "over", "samples"]
    assert unknown_words("AdamW lr 3e-4 (acc)", known) == ["lr", "acc"]
    assert unknown_words("sync's final held-out accuracy, s = 16", known) == []


def rows(warm_starts: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"arm": "sync", "warm_seed": w, "seed": seed, "step": step, "cos_prev": float(rng.uniform(-1, 1))}
            for w in range(warm_starts) for seed in range(2) for step in range(10)]


@pytest.mark.parametrize("warm_starts", [2, MIN_BAND_RUNS])
def test_spread_is_a_band_over_enough_warm_starts_and_never_leaves_the_range(warm_starts):
    fig, ax = plt.subplots()
    steps = np.arange(10)
    spread(ax, rows(warm_starts), "cos_prev", "sync", (steps, np.full(10, -2.5), np.full(10, 2.0)), "k",
           limits=(-1.0, 1.0))
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    if warm_starts < MIN_BAND_RUNS:  # the warm starts' own thin lines, no band
        assert not bands and len(ax.lines) == warm_starts
    else:
        (drawn,) = bands
        ys = np.concatenate([p.vertices[:, 1] for p in drawn.get_paths()])
        assert ys.min() == -1.0 and ys.max() == 1.0 and not ax.lines
        assert drawn.get_gid() == f"band over {warm_starts} runs"
    plt.close(fig)


def test_a_band_refuses_fewer_runs_than_the_minimum():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="a band over 2 runs"):
        band(ax, [0, 1], [0, 0], [1, 1], 2, "k")
    plt.close(fig)


def two_panels():
    fig, axes = plt.subplots(1, 2, figsize=(6, 3), layout="constrained")
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.set(xlabel="RL step", ylabel="held-out accuracy")
    panel_letters(axes)
    return fig, axes


def test_a_clean_figure_passes():
    fig, _ = two_panels()
    assert problems(fig) == []
    plt.close(fig)


@pytest.mark.parametrize("spoil, found", [
    (lambda fig, axes: axes[0].set_ylabel("predicted_cosine"), "code in the figure's text"),
    (lambda fig, axes: axes[0].set_xlabel("RL step (lr 3e-4)"), "words outside figure_words.txt: ['lr']"),
    (lambda fig, axes: axes[1].set_title("", loc="left"), "a panel without a letter"),
    (lambda fig, axes: axes[0].fill_between([0, 1], [0, 0], [0.5, 0.5]), "a band without its number of runs"),
    (lambda fig, axes: axes[0].fill_between([0, 1], [0, 0], [0.5, 0.5], gid="band over 2 runs"),
     "a band over 2 runs"),
    (lambda fig, axes: band(axes[0], [0, 1], [-0.5, -0.5], [1.5, 1.5], 3, "k"), "outside (0.0, 1.0)"),
    (lambda fig, axes: axes[0].legend(["sync"], loc="center"), "covers 1 data artists"),
    (lambda fig, axes: axes[0].text(0.5, 0.5, "sync", transform=axes[0].transAxes) and axes[0].text(
        0.52, 0.5, "sync", transform=axes[0].transAxes), "'sync' overlaps 'sync'"),
])
def test_each_check_fails_on_a_figure_that_breaks_it(spoil, found):
    fig, axes = two_panels()
    spoil(fig, axes)
    with pytest.raises(AssertionError, match=re.escape(found)):
        assert_a_reader_understands(fig, "spoiled")
    plt.close(fig)


def test_rotated_labels_overlap_only_where_their_turned_boxes_meet():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    ax.set_xticks([0, 1], ["a long label", "another label"], rotation=45, ha="right", rotation_mode="anchor")
    assert not [p for p in problems(fig) if "overlaps" in p]  # their bounding boxes meet, the turned boxes do not
    ax.set_xticks([0, 0.05], ["a long label", "another label"], rotation=45, ha="right", rotation_mode="anchor")
    assert [p for p in problems(fig) if "overlaps" in p]
    plt.close(fig)
