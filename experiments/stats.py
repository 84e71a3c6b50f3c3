"""The statistics every summary of the package uses, each defined once: the best step size of a grid, the range of
step sizes near it, the intervals (a seed bootstrap, a two-level bootstrap over warm starts and seeds, a Student t
interval over warm starts) and the share of the async − sync gap an arm recovers.

scipy's ``bootstrap`` draws the one-level intervals; the two-level (cluster) resample is written here because scipy
resamples independent observations only. Every random draw comes from ``numpy.random.default_rng(seed)``, so a
summary of the same rows is the same bits on every run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping

import numpy as np


# -- step sizes ----------------------------------------------------------------------------------------------------
def _ordered(scores: Mapping[float, float], higher_is_better: bool) -> tuple[list[float], np.ndarray]:
    """(step sizes ascending, their scores turned into losses: lower is better, NaN the worst)."""
    steps = sorted(scores)
    if not steps:
        raise ValueError("no step sizes to choose from (empty scores)")
    values = np.array([scores[lr] for lr in steps], dtype=float)
    losses = -values if higher_is_better else values
    return steps, np.where(np.isnan(losses), math.inf, losses)


def best_step(scores: Mapping[float, float], *, higher_is_better: bool) -> float:
    """The step size with the best score: the highest if ``higher_is_better`` (an accuracy), else the lowest (a loss
    or a gap). A tie goes to the smaller step size; a NaN score (not measured) is the worst, like a diverged run."""
    steps, losses = _ordered(scores, higher_is_better)
    return steps[int(np.argmin(losses))]  # argmin: the first of equal minima, i.e. the smallest step


def near_best_range(scores: Mapping[float, float], within: float, *,
                    higher_is_better: bool) -> tuple[float, float]:
    """(low, high): the contiguous run of tried step sizes around ``best_step`` whose score is within the fraction
    ``within`` of the best score's magnitude (``score ≥ best − within·|best|`` for a score to maximize, ``score ≤
    best + within·|best|`` for one to minimize). "Contiguous": the run stops at the first step size on either side
    that is not near the best, so every tried step in [low, high] qualifies. (NaN, NaN) when the best is not finite
    (every step diverged).

    The package's two uses differ only in ``within``: 0.1 (the LLM verdict's accuracy, the toys' verdict's final
    gap: within 10 % of the best) and 1.0 (fig8's tuned toys: a final gap at most twice the best).
    """
    if not within >= 0:
        raise ValueError(f"near-best tolerance must be >= 0, got {within}")
    steps, losses = _ordered(scores, higher_is_better)
    i = int(np.argmin(losses))
    best = losses[i]
    if not math.isfinite(best):
        return math.nan, math.nan
    # (1 ± within)·best, the sign chosen by best's: the same bits as the protocol's first formulas
    threshold = (1 + within) * best if best >= 0 else (1 - within) * best
    near = losses <= threshold
    low = high = i
    while low > 0 and near[low - 1]:
        low -= 1
    while high + 1 < len(steps) and near[high + 1]:
        high += 1
    return steps[low], steps[high]


# -- intervals -----------------------------------------------------------------------------------------------------
def bootstrap_interval(*samples, statistic: Callable = np.mean, confidence: float = 0.9, n_resamples: int = 2000,
                       seed: int = 0, paired: bool = False) -> tuple[float, float, float]:
    """(statistic of the data, low, high): a percentile bootstrap interval over independent units (seeds), drawn by
    ``scipy.stats.bootstrap`` (Efron & Tibshirani 1993, ch. 13).

    ``samples``: one 1-D array per argument of ``statistic`` (which takes them and an ``axis`` keyword, like
    ``np.mean``); ``paired`` resamples the same indices of every sample (paired seeds). NaN bounds with fewer than
    two units (no spread to resample) or with a non-finite value (the caller decides what a missing or diverged
    unit means, e.g. leaves it out or reports inf); all units equal gives the point as both bounds (scipy refuses
    degenerate data).
    """
    samples = tuple(np.asarray(s, dtype=float) for s in samples)
    with np.errstate(divide="ignore", invalid="ignore"):
        point = float(statistic(*samples, axis=-1))
    if len(samples[0]) < 2 or not all(np.isfinite(s).all() for s in samples):
        return point, math.nan, math.nan
    if all(np.ptp(s) == 0 for s in samples):
        return point, point, point
    from scipy import stats as scipy_stats  # here, not at import: scipy.stats takes longer to import than most commands

    with np.errstate(divide="ignore", invalid="ignore"):
        ci = scipy_stats.bootstrap(samples, statistic, paired=paired, vectorized=True, confidence_level=confidence,
                                   method="percentile", n_resamples=n_resamples,
                                   rng=np.random.default_rng(seed)).confidence_interval
    return point, float(ci.low), float(ci.high)


def hierarchical_bootstrap(values: Mapping[tuple[int, int], np.ndarray], statistic: Callable, n_resamples: int = 2000,
                           confidence: float = 0.9, seed: int = 0) -> tuple[float, float, float]:
    """(statistic on the data, low, high): a percentile interval from a two-level bootstrap that resamples warm
    starts with replacement, then seeds with replacement within each drawn warm start (the cluster bootstrap of
    Davison & Hinkley 1997, §3.8; Field & Welsh 2007): runs of one warm start are not independent, so a flat
    bootstrap over runs is too narrow.

    ``values`` maps (warm seed, seed) to a vector (one entry per quantity the statistic pairs, e.g. arm, naive,
    sync); ``statistic`` maps an (..., n_runs, k) array to (...) (the leading axes: resamples drawn at once, when
    every resample has the same number of runs). Resamples whose statistic is not finite (a ratio's zero
    denominator) are left out. NaN bounds with fewer than two warm starts.
    """
    keys = sorted(values)
    warms = sorted({w for w, _ in keys})
    data = np.array([values[k] for k in keys])  # (n_runs, k), runs grouped by warm start
    rows = [np.array([i for i, k in enumerate(keys) if k[0] == w]) for w in warms]  # each warm start's runs
    point = float(statistic(data))
    if len(warms) < 2:
        return point, math.nan, math.nan
    rng = np.random.default_rng(seed)
    # Drawn resample by resample, warm starts then seeds, in this order: the committed tables' bits depend on the
    # stream (rng.integers(0, W, W) is the stream of rng.choice(warms, W), this code's first form). Each bounded
    # draw takes its own words of the stream whatever the call that asks for it, so with as many runs m under every
    # warm start the whole sequence of bounds (W draws below W, then W·m below m, per resample) is one call.
    sizes = {len(r) for r in rows}
    if len(sizes) == 1:
        (m,), w = sizes, len(warms)
        bounds = np.tile(np.repeat([w, m], [w, w * m]), n_resamples)
        drawn = rng.integers(0, bounds).reshape(n_resamples, w + w * m)
        runs = np.stack(rows)[drawn[:, :w]]  # (resamples, W, m): the drawn warm starts' runs
        picks = list(np.take_along_axis(runs, drawn[:, w:].reshape(n_resamples, w, m), 2).reshape(n_resamples, -1))
    else:
        picks = []
        for _ in range(n_resamples):
            drawn = [rows[i] for i in rng.integers(0, len(warms), size=len(warms))]
            picks.append(np.concatenate([r[rng.integers(0, len(r), size=len(r))] for r in drawn]))
    if len({len(p) for p in picks}) == 1:  # balanced: every statistic in one call
        draws = np.asarray(statistic(data[np.stack(picks)]), dtype=float)
        if draws.shape != (n_resamples,):
            raise ValueError(f"the statistic must map (..., n_runs, k) to (...), e.g. x[..., 0].mean(-1); it gave "
                             f"shape {draws.shape} for {n_resamples} resamples")
    else:
        draws = np.array([statistic(data[p]) for p in picks], dtype=float)
    draws = draws[np.isfinite(draws)]
    if not len(draws):
        return point, math.nan, math.nan
    alpha = (1 - confidence) / 2
    return point, float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))


def t_interval(values, confidence: float = 0.95, axis: int = -1) -> tuple:
    """(mean, low, high) along ``axis``: the Student t interval mean ± t_{(1+c)/2, n−1}·s/√n over the finite
    values (s the sample std, ddof = 1; NaN bounds where fewer than two). For a few units whose means are close to
    normal (one number per warm start), where a bootstrap over 8 units would be too narrow. Scalars for 1-D input."""
    values = np.asarray(values, dtype=float)
    n = np.isfinite(values).sum(axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN, as documented
        mean = np.nanmean(values, axis)
        sd = np.where(n > 1, np.nanstd(values, axis, ddof=1), np.nan)
    from scipy import stats as scipy_stats

    half = np.where(n > 1, scipy_stats.t.ppf((1 + confidence) / 2, np.maximum(n - 1, 1)) * sd
                    / np.sqrt(np.maximum(n, 1)), np.nan)
    low, high = mean - half, mean + half
    if np.ndim(mean) == 0:
        return float(mean), float(low), float(high)
    return mean, low, high


# -- the gap -------------------------------------------------------------------------------------------------------
def gap_recovered(arm, naive, sync):
    """(arm − naive) / (sync − naive): the share of the async − sync gap an arm recovers (1: as good as sync, 0: no
    better than naive async; the same for a loss, where it reads (naive − arm)/(naive − sync)). NaN where sync and
    naive are equal (no gap to recover). Arrays broadcast; a float for scalars."""
    arm, naive, sync = (np.asarray(v, dtype=float) for v in (arm, naive, sync))
    gap = sync - naive
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(gap != 0, (arm - naive) / np.where(gap != 0, gap, 1.0), np.nan)
    return float(ratio) if ratio.ndim == 0 else ratio


__all__ = ["best_step", "near_best_range", "bootstrap_interval", "hierarchical_bootstrap", "t_interval",
           "gap_recovered"]
