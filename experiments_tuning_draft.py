"""Tuned-baselines protocol (issue 12 item 2) as pure functions over a table of finished runs.

Each method gets its own step size, picked on tuning seeds and reported on disjoint seeds with a
seed-bootstrap interval, plus its robust range of step sizes. The input is one row per run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from sim.stabilizers import STABILIZERS

COLUMNS = ("method", "staleness", "lr", "seed", "final_gap")
"""Input columns. ``final_gap`` >= 0, lower is better: the final loss (quadratic), the reward gap
J* − J (bandits) or the accuracy gap to the best accuracy (LLM); NaN or inf marks a diverged run."""
METHODS = ("sync", *STABILIZERS)
MIN_LRS = 4


def check_table(table: pd.DataFrame) -> None:
    """One-line ValueError for a table the protocol cannot use, before any computation."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"tuning table lacks column(s) {missing}; it needs {list(COLUMNS)}")
    if table.empty:
        raise ValueError("tuning table is empty (no runs)")
    unknown = sorted(set(table["method"]) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown} in tuning table; known: {', '.join(METHODS)}")
    lrs = table.groupby(["method", "staleness"])["lr"].nunique()
    if (lrs < MIN_LRS).any():
        raise ValueError(f"each (method, staleness) needs >= {MIN_LRS} step sizes; got {lrs[lrs < MIN_LRS].to_dict()}")


def check_seeds(table: pd.DataFrame, tuning_seeds, reporting_seeds=None) -> None:
    """One-line ValueError unless the seed sets are non-empty, disjoint and all in the table."""
    tuning, reporting = set(tuning_seeds), set(reporting_seeds if reporting_seeds is not None else [])
    if not tuning or (reporting_seeds is not None and not reporting):
        raise ValueError("need at least one tuning seed and one reporting seed")
    if tuning & reporting:
        raise ValueError(f"tuning and reporting seeds overlap: {sorted(tuning & reporting)}")
    absent = (tuning | reporting) - set(table["seed"])
    if absent:
        raise ValueError(f"seeds {sorted(absent)} not all in the table (it has {sorted(set(table['seed']))})")


def lr_scores(table: pd.DataFrame, seeds) -> pd.DataFrame:
    """Mean final gap over ``seeds`` per (method, staleness, lr); a diverged seed makes the score inf."""
    runs = table[table["seed"].isin(list(seeds))].copy()
    runs["final_gap"] = runs["final_gap"].where(np.isfinite(runs["final_gap"]), math.inf)
    return runs.groupby(["method", "staleness", "lr"], as_index=False)["final_gap"].mean()


def pick_lrs(table: pd.DataFrame, tuning_seeds) -> pd.DataFrame:
    """Each (method, staleness)'s step size with the lowest mean final gap on the tuning seeds.

    Ties go to the smaller step size. Columns: method, staleness, lr, tuning_gap.
    """
    scores = lr_scores(table, tuning_seeds).sort_values(["method", "staleness", "final_gap", "lr"])
    best = scores.groupby(["method", "staleness"], as_index=False).first()
    return best.rename(columns={"final_gap": "tuning_gap"})


def report(table: pd.DataFrame, tuning_seeds, reporting_seeds, confidence: float = 0.95, resamples: int = 2000,
           rng_seed: int = 0) -> pd.DataFrame:
    """Each (method, staleness) at its tuned step size, measured on the reporting seeds only.

    Columns: method, staleness, lr, mean (mean final gap over reporting seeds), low, high (percentile
    seed-bootstrap interval of that mean; equal to the mean with one seed; inf if a seed diverged),
    diverged (reporting seeds that diverged).
    """
    check_table(table)
    check_seeds(table, tuning_seeds, reporting_seeds)
    picks = pick_lrs(table, tuning_seeds)
    runs = table[table["seed"].isin(list(reporting_seeds))]
    rows = []
    for pick in picks.itertuples(index=False):
        gaps = runs[(runs["method"] == pick.method) & (runs["staleness"] == pick.staleness)
                    & (runs["lr"] == pick.lr)]["final_gap"].to_numpy(dtype=float)
        rows.append({"method": pick.method, "staleness": pick.staleness, "lr": pick.lr,
                     **_mean_interval(gaps, confidence, resamples, rng_seed),
                     "diverged": int((~np.isfinite(gaps)).sum())})
    return pd.DataFrame(rows)


def _mean_interval(gaps: np.ndarray, confidence: float, resamples: int, rng_seed: int) -> dict:
    if not np.isfinite(gaps).all():
        return {"mean": math.inf, "low": math.inf, "high": math.inf}
    mean = float(gaps.mean())
    if len(gaps) < 2 or np.ptp(gaps) == 0:
        return {"mean": mean, "low": mean, "high": mean}
    ci = stats.bootstrap((gaps,), np.mean, confidence_level=confidence, n_resamples=resamples,
                         method="percentile", rng=np.random.default_rng(rng_seed)).confidence_interval
    return {"mean": mean, "low": float(ci.low), "high": float(ci.high)}


def robust_range(table: pd.DataFrame, seeds, factor: float = 2.0) -> pd.DataFrame:
    """Per (method, staleness): largest / smallest grid step size whose mean gap is <= factor × the best.

    Scores are ``lr_scores`` over ``seeds``; a range of 1 means only one step size qualifies, NaN that
    every step size diverged. Columns: method, staleness, best_gap, lr_low, lr_high, robust_range.
    """
    if not factor >= 1:
        raise ValueError(f"robust-range factor must be >= 1, got {factor}")
    check_table(table)
    check_seeds(table, seeds)
    rows = []
    for (method, staleness), group in lr_scores(table, seeds).groupby(["method", "staleness"]):
        best = float(group["final_gap"].min())
        good = group[group["final_gap"] <= factor * best]["lr"] if math.isfinite(best) else group["lr"][:0]
        low, high = (float(good.min()), float(good.max())) if len(good) else (math.nan, math.nan)
        rows.append({"method": method, "staleness": staleness, "best_gap": best, "lr_low": low, "lr_high": high,
                     "robust_range": high / low if len(good) else math.nan})
    return pd.DataFrame(rows)


def winners(reported: pd.DataFrame) -> pd.DataFrame:
    """Per staleness, the method with the lowest reported mean gap, and whether its interval is apart.

    ``separated`` is True when the winner's upper bound is below every other method's lower bound.
    """
    rows = []
    for staleness, group in reported.groupby("staleness"):
        ordered = group.sort_values("mean")
        first, rest = ordered.iloc[0], ordered.iloc[1:]
        rows.append({"staleness": staleness, "winner": first["method"], "mean": first["mean"], "low": first["low"],
                     "high": first["high"], "separated": bool((first["high"] < rest["low"]).all())})
    return pd.DataFrame(rows)
