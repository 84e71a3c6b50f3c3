"""The reader checks of tests/figure_reader.py can fail (the figure smoke tests apply them to every toy figure), and
the LLM panels' spread is a band only over at least three warm starts, inside the metric's range."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from paper_figs.common import MIN_BAND_RUNS, panel_letters, spread  # noqa: E402
from tests.figure_reader import assert_a_reader_understands, reader_problems  # noqa: E402


def test_the_word_list_catches_code_and_passes_words():
    assert reader_problems("gac_cap_t0.5_ema_ref") and reader_problems("a-priori bound (theory.convergence v2)")
    assert reader_problems("mean cos(g_t, g_{t-1})") and reader_problems("(lines: predicted_cosine)")
    assert reader_problems("η·λ_max = 0.3")
    assert not reader_problems(r"mean $\cos(g_t, g_{t-1})$") and not reader_problems("GAC cap τ = 0.5, s = 16")


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
        (band,) = bands
        ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
        assert ys.min() == -1.0 and ys.max() == 1.0 and not ax.lines
    plt.close(fig)


def test_the_reader_check_fails_on_code_a_missing_letter_and_a_band_out_of_range():
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        ax.plot([0, 1], [0, 1])
    axes[0].set_ylabel("predicted_cosine")
    with pytest.raises(AssertionError, match="code in the figure's text"):
        assert_a_reader_understands(fig, "f")
    axes[0].set_ylabel(r"mean $\cos(g_t, g_{t-1})$")
    with pytest.raises(AssertionError, match="panels without a letter"):
        assert_a_reader_understands(fig, "f")
    panel_letters(axes)
    axes[0].fill_between([0, 1], [-1.5, -1.5], [0.5, 0.5])
    with pytest.raises(AssertionError):
        assert_a_reader_understands(fig, "f")
    plt.close(fig)
