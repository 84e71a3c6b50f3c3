"""The verdict protocol's pieces against direct computations: the step ladder and its widening, the robust range,
the hierarchical bootstrap (its spread against the closed-form variance of a two-level resample) and the gap ratio."""

import math

import numpy as np
import pytest

from experiments import stats, verdict
from experiments.profiles import lookup


def test_ladder_neighbours_are_2x_apart_and_widening_moves_off_an_edge_best():
    ladder = verdict.LR_LADDER
    assert all(b / a == pytest.approx(2.0) for a, b in zip(ladder[:-1], ladder[1:], strict=True))
    assert verdict.neighbours(3e-4) == (pytest.approx(1.5e-4), pytest.approx(6e-4))
    assert verdict.needs_widening({7.5e-5: 0.3, 1.5e-4: 0.4, 3e-4: 0.5}) == pytest.approx(6e-4)
    assert verdict.needs_widening({7.5e-5: 0.5, 1.5e-4: 0.4, 3e-4: 0.3}) == pytest.approx(3.75e-5)
    assert verdict.needs_widening({7.5e-5: 0.3, 1.5e-4: 0.5, 3e-4: 0.3}) is None
    assert verdict.needs_widening({ladder[0]: 0.5, ladder[1]: 0.3}) is None  # the ladder's end: reported as an edge


def test_robust_range_is_the_contiguous_run_within_ten_percent_of_the_best():
    scores = {1e-5: 0.30, 2e-5: 0.46, 4e-5: 0.50, 8e-5: 0.455, 1.6e-4: 0.44, 3.2e-4: 0.47}
    assert stats.best_step(scores, higher_is_better=True) == 4e-5
    # 1.6e-4 breaks the run; 3.2e-4 is not contiguous
    assert stats.near_best_range(scores, verdict.NEAR_BEST, higher_is_better=True) == (2e-5, 8e-5)
    assert stats.best_step({1e-4: 0.5, 2e-4: 0.5}, higher_is_better=True) == 1e-4  # a tie goes to the smaller step


def two_level(rng, warms, seeds, between, within):
    centres = rng.normal(0, between, warms)
    return {(w, s): np.array([centres[w] + rng.normal(0, within)]) for w in range(warms) for s in range(seeds)}


def bootstrap_variance(values) -> float:
    """Closed form of the variance of the two-level resampled mean (balanced): (1/W)[B + E_w(σ_w²)/n]."""
    warms = sorted({w for w, _ in values})
    groups = [np.array([v[0] for (w2, _), v in values.items() if w2 == w]) for w in warms]
    means = np.array([g.mean() for g in groups])
    between = ((means - means.mean()) ** 2).mean()
    within = np.mean([((g - g.mean()) ** 2).mean() / len(g) for g in groups])
    return (between + within) / len(warms)


def test_hierarchical_bootstrap_spread_matches_the_two_level_formula():
    rng = np.random.default_rng(3)
    values = two_level(rng, warms=12, seeds=4, between=1.0, within=0.5)
    point, low, high = stats.hierarchical_bootstrap(values, verdict.mean_of(0), n_resamples=8000)
    assert point == pytest.approx(np.mean([v[0] for v in values.values()]))
    expected_width = 2 * 1.6449 * math.sqrt(bootstrap_variance(values))
    assert high - low == pytest.approx(expected_width, rel=0.1)


def test_a_flat_bootstrap_would_fail_the_same_check():
    """The mutation: resampling runs as if independent ignores the warm-start level and is far too narrow."""
    rng = np.random.default_rng(3)
    values = two_level(rng, warms=12, seeds=4, between=1.0, within=0.5)
    flat = {(i, 0): v for i, v in enumerate(values.values())}  # every run its own "warm start"
    _, low, high = stats.hierarchical_bootstrap(flat, verdict.mean_of(0), n_resamples=8000)
    expected_width = 2 * 1.6449 * math.sqrt(bootstrap_variance(values))
    assert high - low < 0.8 * expected_width


def test_gap_ratio_and_paired_interval():
    x = np.array([[0.5, 0.3, 0.7], [0.6, 0.2, 0.8]])  # columns: arm, naive, sync
    assert verdict.gap_of_means(x) == pytest.approx((0.55 - 0.25) / (0.75 - 0.25))
    assert math.isnan(verdict.gap_of_means(np.array([[0.5, 0.3, 0.3]])))
    one_warm = {(0, s): np.array([0.5, 0.3, 0.7]) for s in range(2)}
    assert math.isnan(stats.hierarchical_bootstrap(one_warm, verdict.gap_of_means)[1])  # < 2 warm starts: no interval
    two_warms = {(w, s): np.array([0.5 + 0.1 * s, 0.3, 0.7 - 0.1 * w]) for w in range(2) for s in range(2)}
    with pytest.raises(ValueError, match=r"must map \(..., n_runs, k\)"):  # a statistic blind to the batch axis
        stats.hierarchical_bootstrap(two_warms, lambda x: x[:, 0].mean())
    unbalanced = {**two_warms, (2, 0): np.array([0.6, 0.3, 0.6])}  # resamples of unequal size: one call each
    point, low, high = stats.hierarchical_bootstrap(unbalanced, verdict.mean_of(0))
    assert point == pytest.approx(np.mean([v[0] for v in unbalanced.values()])) and low < point < high


def test_every_arm_resolves_to_valid_args_and_the_protocol_keeps_tuning_apart():
    for name in ("full", "quick", "v2"):
        p = lookup("verdict", name)
        assert p.tuning_warm not in p.reporting_warms and p.tuning_seed not in p.reporting_seeds
        for arm in (*verdict.ARMS.values(), *verdict.combination_arms([]).values()):
            verdict.arm_args(p, arm, 3e-4, p.reporting_warms[0], 0).validate()
    full = lookup("verdict", "full")
    assert len(full.reporting_warms) >= 3 and len(full.reporting_seeds) >= 2
    args = verdict.arm_args(full, verdict.ARMS["gac momentum"], 3e-4, 1, 0)
    assert (args.minibatches, args.ratio_to, args.staleness, args.digits) == (2, "behaviour", 16, 3)


def test_verdict_v2_runs_on_the_testbed_configuration_and_its_warm_starts():
    from experiments import llm_figures

    v2 = lookup("verdict", "v2")
    assert v2.reporting_warms == lookup("testbed", "full").warm_seeds and len(v2.reporting_warms) >= 8
    assert v2.tuning_warm not in v2.reporting_warms and len(v2.reporting_seeds) >= 2
    assert {"vcpo", "m2po", "bapo", "tis", "kl_target", "braking", "gac gradient", "gac update",
            "gac momentum"} <= set(v2.arms)
    args = verdict.arm_args(v2, verdict.ARMS["vcpo"], 3e-4, 1, 0)
    for key, value in llm_figures.BASE.items():
        assert getattr(args, key) == value or key in ("lr", "snr_every", "eval_every"), key
    assert (args.method, args.staleness, args.steps, args.lr) == ("vcpo", 16, 200, 3e-4)
    assert verdict.arm_args(v2, verdict.ARMS["sync"], 3e-4, 1, 0).staleness == 0
    assert verdict.default_out("v2").name == "verdict_llm_v2.csv"


def test_fig10_gpu_profile_dry_run_writes_every_arm_with_warm_start_and_seed(tiny_checkpoint, tmp_path, monkeypatch):
    """The figure command end to end on the gpu profile's arms, shrunk to a CPU smoke run (--dry-run)."""
    import csv

    import runtime.cache
    import sim.llm.warmstart
    from paper_figs import __main__ as cli

    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(sim.llm.warmstart, "RUNS_DIR", tmp_path / "runs")
    assert cli.main(["fig10_verdict", "--profile", "gpu", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out" / "dry_run"  # a dry run never writes over real figures
    with open(out / "fig10_verdict.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["arm"] for r in rows} == set(lookup("verdict", "gpu").arms)
    assert {r["warm_seed"] for r in rows} == {"1", "2"} and {r["seed"] for r in rows} == {"0"}  # dry run: shrunk
    assert {r["direction_control"] for r in rows if r["arm"].startswith("gac")} == {"gac"}
    assert {r["gac_space"] for r in rows if r["arm"].startswith("gac")} == {"gradient", "update", "momentum"}
    assert (out / "fig10_verdict.png").stat().st_size > 0
    with open(out / "fig10_verdict_table.csv") as handle:
        assert {r["arm"] for r in csv.DictReader(handle)} == set(lookup("verdict", "gpu").arms)


def test_control_differences_pair_each_arm_with_its_controls_on_the_same_warm_start_and_seed():
    rows = []
    for w in (1, 2, 3):
        for s in (0, 1):
            rows += [dict(arm="gac update", role="report", warm_seed=w, seed=s, final_accuracy=0.5 + 0.01 * w + s),
                     dict(arm="sync", role="report", warm_seed=w, seed=s, final_accuracy=0.6 + 0.02 * w + s)]
        rows += [dict(arm="naive @ ‖Δθ‖ of gac update", role="control_step_norm", warm_seed=w, seed=0,
                      final_accuracy=0.45 + 0.01 * w),
                 dict(arm="sync + gac update", role="control_sync", warm_seed=w, seed=0,
                      final_accuracy=0.58 + 0.02 * w)]
    out = {r["comparison"]: r for r in verdict.control_differences(rows)}
    assert out["arm − naive at its ‖Δθ‖"]["difference"] == pytest.approx(0.05)  # seed 0 only: the control's seed
    assert out["(sync + arm) − sync"]["difference"] == pytest.approx(-0.02)
    assert out["(sync + arm) − sync"]["pairs"] == 3


def test_fig10_full_profile_draws_the_committed_v2_verdict_without_computing_it():
    """Under the full profile fig10 declares only the toys' unit (no LLM unit, so no pool inside a worker) and
    draws docs/data/verdict_llm_v2*.csv: the committed runs, whose table is the committed table recomputed."""
    from experiments.llm import RunUnit
    from paper_figs import fig10_verdict
    from paper_figs.common import Results

    units = fig10_verdict.runs("full")
    assert [u.spec for u in units] == [f"{fig10_verdict.NAME}/toys"]
    assert not any(isinstance(u, RunUnit) for u in units)
    import pandas as pd

    drawn = fig10_verdict.llm_verdict(Results(profile="full"))
    assert len(drawn["runs"]) == 176 and len(drawn["tuning"]) == 43  # 11 arms x 8 warm starts x 2 seeds; tuning
    assert {r["code"] for r in drawn["runs"]} == {"06524a2"}
    data = verdict.default_out("v2").parent
    for key, name in (("table", "verdict_llm_v2.csv"), ("runs", "verdict_llm_v2_runs.csv")):
        committed = pd.read_csv(data / name)
        assert list(drawn[key][0]) == list(committed.columns)
        assert [r["arm"] for r in drawn[key]] == list(committed.arm)
        assert np.allclose([r["final_accuracy"] for r in drawn[key]], committed.final_accuracy, rtol=0, atol=0)
    assert all(isinstance(r["diverged"], bool) and r["gac_space"] in ("", "gradient", "update", "momentum")
               for r in drawn["runs"])


def test_committed_verdict_refuses_an_uncommitted_profile_and_names_missing_files(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no committed verdict for profile 'quick'"):
        verdict.committed_verdict("quick")
    monkeypatch.setattr(verdict, "default_out", lambda profile: tmp_path / "verdict_llm_v2.csv")
    with pytest.raises(FileNotFoundError, match="verdict_llm_v2_runs.csv"):
        verdict.committed_verdict("v2")
