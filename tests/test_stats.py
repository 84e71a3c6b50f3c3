"""experiments.stats against independent computations: brute force for the step-size picks, scipy's t interval and
the normal approximation for the intervals, the direct formula for the gap; and, where a plausible wrong version
exists (a range with holes, unpaired resampling, ties to the larger step), that the tests catch it."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments import stats


# -- best step and the range near it -------------------------------------------------------------------------------
def brute_best(scores, higher_is_better):
    """Independent: a NaN score counts as the worst possible (as a diverged run); the best score by max/min, then
    the smallest step having it."""
    worst = -math.inf if higher_is_better else math.inf
    valued = {lr: (worst if math.isnan(v) else v) for lr, v in scores.items()}
    best = (max if higher_is_better else min)(valued.values())
    return min(lr for lr, v in valued.items() if v == best)


def brute_range(scores, within, higher_is_better):
    """Independent: the widest window of consecutive step sizes that contains the best step and holds only steps
    within ``within`` of the best score (every window enumerated)."""
    steps = sorted(scores)
    best_lr = brute_best(scores, higher_is_better)
    best = scores[best_lr]
    if not math.isfinite(best):
        return math.nan, math.nan

    def near(v):
        if math.isnan(v):
            return False
        return v >= best - within * abs(best) if higher_is_better else v <= best + within * abs(best)

    i = steps.index(best_lr)
    windows = [(a, b) for a, b in itertools.combinations_with_replacement(range(len(steps)), 2)
               if a <= i <= b and all(near(scores[steps[k]]) for k in range(a, b + 1))]
    a, b = max(windows, key=lambda w: w[1] - w[0])
    return steps[a], steps[b]


def random_scores(rng, n):
    steps = [1e-3 * 2.0 ** k for k in range(n)]
    values = rng.choice([0.1, 0.2, 0.25, 0.3, 0.5, math.inf, math.nan], size=n, p=[.2, .2, .1, .2, .2, .05, .05])
    return dict(zip(steps, values.tolist(), strict=True))


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_best_step_and_range_match_brute_force(higher_is_better):
    rng = np.random.default_rng(0)
    for _ in range(300):
        scores = random_scores(rng, int(rng.integers(1, 8)))
        if higher_is_better:  # an accuracy: no +inf, a missing one is NaN
            scores = {lr: (math.nan if math.isinf(v) else v) for lr, v in scores.items()}
        assert stats.best_step(scores, higher_is_better=higher_is_better) == brute_best(scores, higher_is_better)
        for within in (0.0, 0.1, 1.0):
            got = stats.near_best_range(scores, within, higher_is_better=higher_is_better)
            want = brute_range(scores, within, higher_is_better)
            assert got == want or (all(map(math.isnan, got)) and all(map(math.isnan, want))), (scores, within)


def test_range_stops_at_a_hole_and_handles_divergence():
    gaps = {0.01: 0.5, 0.02: 0.2, 0.04: 0.1, 0.08: 0.9, 0.16: 0.15, 0.32: math.inf}
    # within 2× of the best gap 0.1: 0.02 and 0.04; 0.16 qualifies but 0.08 between them does not
    assert stats.near_best_range(gaps, 1.0, higher_is_better=False) == (0.02, 0.04)
    assert stats.near_best_range(gaps, 0.0, higher_is_better=False) == (0.04, 0.04)
    assert all(map(math.isnan, stats.near_best_range({0.1: math.inf, 0.2: math.nan}, 1.0, higher_is_better=False)))
    accuracy = {0.01: 0.40, 0.02: 0.46, 0.04: 0.50, 0.08: 0.45}  # 0.45 = 0.9 × 0.5 exactly at the edge: in
    assert stats.near_best_range(accuracy, 0.1, higher_is_better=True) == (0.02, 0.08)
    with pytest.raises(ValueError, match=">= 0"):
        stats.near_best_range(gaps, -0.1, higher_is_better=False)
    with pytest.raises(ValueError, match="empty"):
        stats.best_step({}, higher_is_better=False)


def test_a_range_with_holes_or_ties_to_the_larger_step_would_be_caught(monkeypatch):
    """The mutations: the hull of every near step (the old tuning table's reading) and ties to the larger step."""
    def hull(scores, within, *, higher_is_better):
        best = scores[brute_best(scores, higher_is_better)]
        near = [lr for lr, v in scores.items() if v <= best + within * abs(best)]
        return min(near), max(near)

    monkeypatch.setattr(stats, "near_best_range", hull)
    with pytest.raises(AssertionError):
        test_range_stops_at_a_hole_and_handles_divergence()
    monkeypatch.undo()
    monkeypatch.setattr(stats, "best_step", lambda scores, *, higher_is_better: max(
        sorted(scores, reverse=True), key=lambda lr: scores[lr] if higher_is_better else -scores[lr]))
    with pytest.raises(AssertionError):
        test_best_step_and_range_match_brute_force(True)


# -- intervals -----------------------------------------------------------------------------------------------------
def test_bootstrap_interval_matches_the_normal_approximation():
    """For 60 normal draws the percentile bootstrap of the mean is ≈ mean ± z·σ̂/√n (σ̂ the plug-in std, ddof 0)."""
    x = np.random.default_rng(1).normal(3.0, 2.0, 60)
    point, low, high = stats.bootstrap_interval(x, confidence=0.9, n_resamples=8000)
    assert point == pytest.approx(x.mean())
    half = scipy_stats.norm.ppf(0.95) * x.std() / math.sqrt(len(x))
    assert high - low == pytest.approx(2 * half, rel=0.08)
    assert (low + high) / 2 == pytest.approx(x.mean(), abs=0.1 * half)
    again = stats.bootstrap_interval(x, confidence=0.9, n_resamples=8000)
    assert again == (point, low, high)  # seeded: the same bits
    assert stats.bootstrap_interval(x, confidence=0.9, n_resamples=8000, seed=1) != (point, low, high)


def test_bootstrap_interval_pairs_and_its_edge_cases(monkeypatch):
    rng = np.random.default_rng(2)
    naive = rng.normal(0.3, 0.2, 8)
    arm = naive + 0.1  # the paired difference is exactly 0.1 on every seed

    def difference(a, b, axis=-1):
        return a.mean(axis) - b.mean(axis)

    point, low, high = stats.bootstrap_interval(arm, naive, statistic=difference, paired=True)
    assert (low, high) == pytest.approx((0.1, 0.1)) and point == pytest.approx(0.1)
    _, low_u, high_u = stats.bootstrap_interval(arm, naive, statistic=difference, paired=False)
    assert high_u - low_u > 0.1  # resampled apart, the seed-to-seed spread enters
    assert stats.bootstrap_interval([0.4])[0] == 0.4 and math.isnan(stats.bootstrap_interval([0.4])[1])
    point, low, high = stats.bootstrap_interval([0.2, 0.2, 0.2])
    assert point == low == high == pytest.approx(0.2)
    point, low, high = stats.bootstrap_interval([0.2, math.inf, 0.1])
    assert math.isinf(point) and math.isnan(low) and math.isnan(high)


def test_t_interval_matches_scipy_row_by_row():
    rng = np.random.default_rng(3)
    values = rng.normal(0.2, 0.1, (5, 8))
    values[1, :7] = np.nan  # one unit left: no interval
    values[2, 3] = np.nan
    mean, low, high = stats.t_interval(values, 0.95, axis=1)
    for row, m, lo, hi in zip(values, mean, low, high, strict=True):
        finite = row[np.isfinite(row)]
        assert m == pytest.approx(finite.mean())
        if len(finite) < 2:
            assert math.isnan(lo) and math.isnan(hi)
            continue
        want = scipy_stats.t.interval(0.95, len(finite) - 1, loc=finite.mean(), scale=scipy_stats.sem(finite))
        assert (lo, hi) == pytest.approx(want, rel=1e-12)
    one = stats.t_interval(values[0], 0.9)
    assert isinstance(one[0], float) and one[1] == pytest.approx(
        scipy_stats.t.interval(0.9, 7, loc=values[0].mean(), scale=scipy_stats.sem(values[0]))[0], rel=1e-12)


def test_gap_recovered_is_the_direct_formula():
    assert stats.gap_recovered(0.55, 0.25, 0.75) == pytest.approx(0.6)
    assert stats.gap_recovered(0.25, 0.25, 0.75) == 0.0 and stats.gap_recovered(0.75, 0.25, 0.75) == 1.0
    # a loss (lower is better): (naive − arm)/(naive − sync), the same bits as the accuracy form
    assert stats.gap_recovered(0.4, 0.9, 0.1) == (0.9 - 0.4) / (0.9 - 0.1)
    assert math.isnan(stats.gap_recovered(0.5, 0.3, 0.3))
    got = stats.gap_recovered(np.array([0.5, 0.6]), np.array([0.3, 0.3]), np.array([0.7, 0.3]))
    assert got[0] == pytest.approx(0.5) and math.isnan(got[1])
