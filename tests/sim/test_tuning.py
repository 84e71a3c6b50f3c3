"""The tuned-baselines protocol (experiments.tuning) on a synthetic table with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments import tuning

LRS = [0.01, 0.03, 0.1, 0.3, 1.0]
TUNE, REPORT = [0, 1, 2], [3, 4, 5]
# Gap per step size (lower is better); inf = diverged. Seeds scale every gap by 1 + 0.02·(seed − 2.5).
CURVES = {("none", 8): [0.8, 0.5, 0.3, math.inf, math.inf],
          ("bapo", 8): [0.4, 0.19, 0.1, 0.15, 0.25],
          ("sync", 0): [0.2, 0.05, 0.01, 0.02, math.inf]}
# tis: tuning seeds prefer lr 0.3, reporting seeds lr 0.1 (the report must keep the tuning choice).
TIS_TUNE, TIS_REPORT = [0.5, 0.4, 0.3, 0.05, 0.6], [0.5, 0.4, 0.02, 0.09, 0.6]


def _table():
    rows = []
    for seed in TUNE + REPORT:
        scale = 1 + 0.02 * (seed - 2.5)
        curves = dict(CURVES)
        curves[("tis", 8)] = TIS_TUNE if seed in TUNE else TIS_REPORT
        for (method, s), gaps in curves.items():
            rows += [{"method": method, "staleness": s, "lr": lr, "seed": seed, "final_gap": g * scale}
                     for lr, g in zip(LRS, gaps, strict=True)]
    return pd.DataFrame(rows)


def _row(frame, method, s=8):
    return frame[(frame["method"] == method) & (frame["staleness"] == s)].iloc[0]


def test_picks_on_tuning_seeds_and_reports_on_fresh_ones():
    reported = tuning.report(_table(), TUNE, REPORT)
    assert _row(reported, "none")["lr"] == 0.1 and _row(reported, "bapo")["lr"] == 0.1
    assert _row(reported, "sync", 0)["lr"] == 0.1
    tis = _row(reported, "tis")
    assert tis["lr"] == 0.3  # chosen on tuning seeds, although lr 0.1 is better on the reporting seeds
    expected = np.mean([0.09 * (1 + 0.02 * (s - 2.5)) for s in REPORT])
    assert tis["mean"] == pytest.approx(expected)
    values = [0.09 * (1 + 0.02 * (s - 2.5)) for s in REPORT]
    assert min(values) <= tis["low"] <= tis["mean"] <= tis["high"] <= max(values) and tis["low"] < tis["high"]


def test_robust_range_by_hand():
    ranges = tuning.robust_range(_table(), TUNE)
    # none: best 0.3 at lr 0.1; within 2×: lr 0.03 (0.5) and 0.1 → 0.1 / 0.03. Diverged lrs never count.
    assert _row(ranges, "none")["robust_range"] == pytest.approx(0.1 / 0.03)
    # bapo: best 0.1; within 0.2: lr 0.03 (0.19), 0.1, 0.3 (0.15); lr 1.0 (0.25) is out → 0.3 / 0.03 = 10.
    assert _row(ranges, "bapo")["robust_range"] == pytest.approx(10.0)
    assert _row(ranges, "sync", 0)["robust_range"] == pytest.approx(0.3 / 0.1)


def test_winner_per_staleness():
    won = tuning.winners(tuning.report(_table(), TUNE, REPORT)).set_index("staleness")
    assert won.loc[8, "winner"] == "tis" and won.loc[0, "winner"] == "sync"
    assert bool(won.loc[8, "separated"])  # tis 0.09 vs bapo 0.1 with ±1% seed spread


def test_diverged_reporting_seed_gives_inf():
    table = _table()
    table.loc[(table["method"] == "bapo") & (table["lr"] == 0.1) & (table["seed"] == 4), "final_gap"] = math.nan
    bapo = _row(tuning.report(table, TUNE, REPORT), "bapo")
    assert bapo["diverged"] == 1 and math.isinf(bapo["mean"])


@pytest.mark.parametrize("change, message", [
    (lambda t: t.assign(method=t["method"].replace("bapo", "ppo")), "unknown method"),
    (lambda t: t.iloc[:0], "empty"),
    (lambda t: t.drop(columns="lr"), "lacks column"),
    (lambda t: t[t["lr"] > 0.03], ">= 4 step sizes"),
])
def test_bad_tables_fail_before_any_work(change, message):
    with pytest.raises(ValueError, match=message):
        tuning.report(change(_table()), TUNE, REPORT)


def test_bad_seeds_and_factor():
    with pytest.raises(ValueError, match="overlap"):
        tuning.report(_table(), [0, 1, 3], REPORT)
    with pytest.raises(ValueError, match="not all in the table"):
        tuning.report(_table(), TUNE, [3, 4, 9])
    with pytest.raises(ValueError, match="factor"):
        tuning.robust_range(_table(), TUNE, factor=0.5)
    with pytest.raises(ValueError, match="unknown method"):
        tuning.robust_range(_table().assign(method="ppo"), TUNE)
    with pytest.raises(ValueError, match="at least one"):
        tuning.report(_table(), TUNE, [])
