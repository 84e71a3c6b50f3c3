"""Seed spreads are sample standard deviations (ddof = 1) and per-step seed statistics are the standard library's:
fig5's table and the figures' per-step means, medians and spreads."""

import math
import statistics

import numpy as np

from experiments.aggregate import seed_mean, seed_median, seed_std
from experiments.llm import aggregate

FINALS = [0.41, 0.52, 0.47]


def test_seed_std_is_the_sample_std():
    assert math.isclose(seed_std(FINALS), statistics.stdev(FINALS), rel_tol=1e-12)
    assert seed_std(FINALS) > statistics.pstdev(FINALS) * 1.2  # sqrt(3/2) = 1.22 above the population std
    assert math.isnan(seed_std([0.5]))  # one seed has no spread to report


def test_fig5_table_reports_the_sample_std_over_seeds():
    runs = [{"method": "naive", "staleness": 16, "lr": 3e-4, "ratio_to": "proximal", "seed": seed,
             "final_accuracy": final, "delta_accuracy": final - 0.3, "cos_prev_mean": 0.1, "nonfinite": False,
             "roles": "methods"} for seed, final in enumerate(FINALS)]
    (row,) = aggregate(runs)
    assert row["seeds"] == 3
    assert math.isclose(row["final_std"], statistics.stdev(FINALS), rel_tol=1e-12)


def step_rows(values_by_seed: dict[int, list[float]], **extra) -> list[dict]:
    return [{"step": 10 * t, "seed": seed, "objective": v, "diverged": False, **extra}
            for seed, values in values_by_seed.items() for t, v in enumerate(values)]


def test_seed_mean_spread_is_the_sample_std_per_step():
    rows = step_rows({0: [1.0, 2.0, 5.0], 1: [3.0, 2.5, math.nan], 2: [2.0, 7.0, 1.0]}, method="naive")
    rows += step_rows({3: [100.0, 100.0, 100.0]}, method="gac")  # another method: not selected
    rows.append({"step": 20, "seed": 3, "objective": -50.0, "diverged": True, "method": "naive"})  # left out
    steps, mean, spread = seed_mean(rows, "objective", method="naive")
    assert steps.tolist() == [0, 10, 20]
    for t, seeds in enumerate(([1.0, 3.0, 2.0], [2.0, 2.5, 7.0], [5.0, 1.0])):  # NaN and diverged rows left out
        assert math.isclose(mean[t], statistics.fmean(seeds), rel_tol=1e-15)
        assert math.isclose(spread[t], statistics.stdev(seeds), rel_tol=1e-12)
    _, _, single = seed_mean(step_rows({0: [1.0, 2.0]}), "objective")
    assert np.isnan(single).all()  # one seed: no spread


def test_seed_median_per_step():
    rows = step_rows({0: [1.0, 4.0], 1: [3.0, math.nan], 2: [2.0, 8.0], 3: [9.0, 1.0]})
    steps, medians = seed_median(rows, "objective")
    assert steps == [0, 10] and medians == [statistics.median([1.0, 3.0, 2.0, 9.0]), statistics.median([4.0, 8.0, 1.0])]


def test_fig5_table_groups_settings_in_first_seen_order_with_their_own_values():
    runs = [{"method": m, "staleness": s, "lr": 3e-4, "ratio_to": "proximal", "seed": seed, "final_accuracy": f,
             "delta_accuracy": f - 0.3, "cos_prev_mean": c, "nonfinite": seed == 1, "collapsed": seed != 0,
             "roles": "methods"}
            for m, s in (("sync", 0), ("naive", 16))
            for seed, (f, c) in enumerate(zip(FINALS, (0.1, 0.2, 0.4), strict=True))]
    table = aggregate(runs)
    assert [(r["method"], r["staleness"]) for r in table] == [("sync", 0), ("naive", 16)]  # not sorted
    assert all(type(r["staleness"]) is int and type(r["lr"]) is float for r in table)  # the rows' own values
    assert math.isclose(table[1]["final_mean"], statistics.fmean(FINALS), rel_tol=1e-15)
    assert (table[1]["nonfinite"], table[1]["collapsed"]) == (1, 2)  # runs per setting that failed, by kind
    assert math.isclose(table[1]["cos_prev_mean"], statistics.fmean([0.1, 0.2, 0.4]), rel_tol=1e-15)
