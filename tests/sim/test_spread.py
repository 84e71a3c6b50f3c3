"""The LLM panels' spread is a band only over at least three warm starts, inside the metric's range."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from paper_figs.common import MIN_BAND_RUNS, spread  # noqa: E402


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


