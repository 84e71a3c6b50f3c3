"""Seed spreads are sample standard deviations (ddof = 1): fig5's table against the standard library's stdev."""

import math
import statistics

from experiments.aggregate import seed_std
from experiments.llm import aggregate

FINALS = [0.41, 0.52, 0.47]


def test_seed_std_is_the_sample_std():
    assert math.isclose(seed_std(FINALS), statistics.stdev(FINALS), rel_tol=1e-12)
    assert seed_std(FINALS) > statistics.pstdev(FINALS) * 1.2  # sqrt(3/2) = 1.22 above the population std
    assert math.isnan(seed_std([0.5]))  # one seed has no spread to report


def test_fig5_table_reports_the_sample_std_over_seeds():
    runs = [{"method": "naive", "staleness": 16, "lr": 3e-4, "ratio_to": "proximal", "seed": seed,
             "final_accuracy": final, "delta_accuracy": final - 0.3, "cos_prev_mean": 0.1, "diverged": False,
             "roles": "methods"} for seed, final in enumerate(FINALS)]
    (row,) = aggregate(runs)
    assert row["seeds"] == 3
    assert math.isclose(row["final_std"], statistics.stdev(FINALS), rel_tol=1e-12)
