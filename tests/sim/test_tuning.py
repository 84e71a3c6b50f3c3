"""The tuned-baselines protocol (experiments.tuning): on a synthetic table with known answers, its grids and runs."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments import toy, tuning
from experiments.profiles import lookup
from sim.bandit import run_bandit
from sim.grid import setting
from sim.stabilizers import STALE_DATA

LRS = [0.01, 0.03, 0.1, 0.3, 1.0]
TUNE, REPORT = [0, 1, 2], [3, 4, 5]
# Gap per step size (lower is better); inf = diverged. Seeds scale every gap by 1 + 0.02·(seed − 2.5).
CURVES = {("naive", 8): [0.8, 0.5, 0.3, math.inf, math.inf],
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
    assert _row(reported, "naive")["lr"] == 0.1 and _row(reported, "bapo")["lr"] == 0.1
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
    assert _row(ranges, "naive")["robust_range"] == pytest.approx(0.1 / 0.03)
    # bapo: best 0.1; within 0.2: lr 0.03 (0.19), 0.1, 0.3 (0.15); lr 1.0 (0.25) is out → 0.3 / 0.03 = 10.
    assert _row(ranges, "bapo")["robust_range"] == pytest.approx(10.0)
    assert _row(ranges, "sync", 0)["robust_range"] == pytest.approx(0.3 / 0.1)
    # finite ranges: none finite on lr 0.01..0.1, sync on 0.01..0.3, bapo everywhere
    assert _row(ranges, "naive")["finite_range"] == pytest.approx(10.0)
    assert _row(ranges, "sync", 0)["finite_range"] == pytest.approx(30.0)
    assert _row(ranges, "bapo")["finite_range"] == pytest.approx(100.0)


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


def test_bad_seeds_and_tolerance():
    with pytest.raises(ValueError, match="overlap"):
        tuning.report(_table(), [0, 1, 3], REPORT)
    with pytest.raises(ValueError, match="not all in the table"):
        tuning.report(_table(), TUNE, [3, 4, 9])
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        tuning.robust_range(_table(), TUNE, within=-0.5)
    with pytest.raises(ValueError, match="unknown method"):
        tuning.robust_range(_table().assign(method="ppo"), TUNE)
    with pytest.raises(ValueError, match="at least one"):
        tuning.report(_table(), TUNE, [])


# -- the grids and the runs ------------------------------------------------------------------------------
GOOD = dict(model=STALE_DATA, methods=("naive", "bapo"), staleness=(4,), lrs=(0.01, 0.02, 0.04, 0.08),
            tuning_seeds=1, reporting_seeds=1)


@pytest.mark.parametrize("change, message", [
    ({"methods": ("naive", "ppo")}, "unknown method 'ppo'"),
    ({"methods": ()}, "no methods"),
    ({"lrs": ()}, ">= 4 distinct step sizes"),
    ({"lrs": (0.1, 0.1, 0.2, 0.3)}, ">= 4 distinct step sizes"),
    ({"lrs": (-0.1, 0.1, 0.2, 0.3)}, "> 0"),
    ({"methods": ("dc",)}, "does not apply"),
    ({"staleness": ()}, "staleness values >= 1"),
    ({"reporting_seeds": 0}, "reporting seed"),
])
def test_bad_grid_fails_with_one_line_before_any_run(change, message, monkeypatch):
    monkeypatch.setattr(tuning, "run_bandit", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(ValueError, match=message) as error:
        tuning.toy_rows("bandit_gaussian", "smoke", grid=tuning.TuningGrid(**{**GOOD, **change}))
    assert len(str(error.value).splitlines()) == 1


def test_log_grid_and_default_grids():
    assert tuning.log_grid(0.3, 4) == pytest.approx((0.075, 0.15, 0.3, 0.6))
    quad = tuning.toy_grid("quadratic", "quick")
    assert 0.15 in quad.lrs and 1.2 in quad.lrs and "dc" in quad.methods and "tis" not in quad.methods
    assert set(tuning.llm_grid("quick").methods) == {"naive", "gac", "lr_scale", "tis", "m2po", "bapo"}
    assert set(quad.tuning).isdisjoint(quad.reporting)


def test_toy_rows_gap_equals_a_run_of_that_setting_alone():
    grid = tuning.TuningGrid(**{**GOOD, "lrs": (0.05, 0.1, 0.2, 50.0)})
    table = pd.DataFrame(tuning.toy_rows("bandit_gaussian", "smoke", grid=grid))
    assert len(table) == (4 + 2 * 4) * 2 and set(table["method"]) == {"sync", "naive", "bapo"}
    assert set(table[table["method"] == "sync"]["staleness"]) == {0}
    steps = lookup("toy", "smoke").bandit_steps
    alone = run_bandit(toy.GAUSSIAN, [setting("bapo", 4, 0.1)], steps, 2, groups=toy.BANDIT_GROUPS,
                       group_size=toy.BANDIT_GROUP_SIZE)
    expected = [alone.meta["optimal_reward"] - r["final_objective"] for r in alone.summary_rows()]
    got = table[(table["method"] == "bapo") & (table["lr"] == 0.1)].sort_values("seed")["final_gap"]
    assert got.tolist() == pytest.approx(expected)
    assert (table[table["lr"] == 50.0]["final_gap"] > 100 * max(expected)).all()  # far too large a step


def test_per_step_size_ratio_by_hand():
    table = _table()
    out = tuning.per_step_size(table, 8, TUNE).set_index(["method", "lr"])
    scale = np.mean([1 + 0.02 * (s - 2.5) for s in TUNE])
    assert out.loc[("naive", 0.03), "ratio_to_sync"] == pytest.approx(0.5 / 0.05)
    assert out.loc[("naive", 0.03), "final_gap"] == pytest.approx(0.5 * scale)
    assert math.isinf(out.loc[("naive", 0.3), "final_gap"]) and out.loc[("naive", 0.3), "diverged"] == 3


def test_llm_table_maps_accuracy_and_divergence(monkeypatch):
    runs = tuning.llm_runs("quick")
    grid = tuning.llm_grid("quick")
    assert len(runs) == len(grid.cells()) * 3 and {r.args.size for r in runs} == {"tiny"}
    assert all(r.args.ratio_to == "proximal" and r.args.on_nonfinite == "mark" for r in runs)
    fake = [(run, {"summary": {"final_accuracy": 0.25 + 0.01 * k, "nonfinite_at": 3 if k == 1 else None}})
            for k, run in enumerate(runs)]
    monkeypatch.setattr(tuning, "results_of", lambda *a, **k: fake)
    table = tuning.llm_table("quick")
    assert table["final_gap"].iloc[0] == pytest.approx(0.75) and math.isinf(table["final_gap"].iloc[1])
    assert table["method"].iloc[0] == "sync" and set(table["method"]) == {"sync", *grid.methods}
