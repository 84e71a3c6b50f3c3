"""experiments.early_warning: collapse steps, labels, AUC with ties, lead times and the figure, on hand examples."""

import csv
import itertools
import math

import numpy as np
import pytest

from experiments import early_warning as ew
from experiments.llm import Run
from paper_figs import fig9_early_warning
from paper_figs.common import Results
from paper_figs.driver import FIGURES
from sim.llm.train import Args
from sim.schema import make_row
from tests.figures import make_figure


def pairwise_auc(scores, labels) -> float:
    """Independent reference: the share of (positive, negative) pairs ordered right, ties counted one half."""
    scores, labels = np.asarray(scores, float), np.asarray(labels, float)
    pairs = list(itertools.product(scores[labels == 1], scores[labels == 0]))
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)


def llm_run(accuracy: dict, grad_norm: dict, steps: int, seed: int = 0, staleness: int = 16) -> list[dict]:
    return [make_row("llm", step=t, seed=seed, method="naive", label="naive", staleness=staleness, lr=3e-4,
                     ratio_to="proximal", accuracy=accuracy.get(t), grad_norm=grad_norm.get(t, 1.0))
            for t in range(steps)]


def quadratic_run(losses, label="naive", staleness=16, diverged_from=None) -> list[dict]:
    return [make_row("quadratic", step=5 * i, seed=0, method="naive", label=label, staleness=staleness, lr=0.3,
                     objective=loss, diverged=diverged_from is not None and i >= diverged_from)
            for i, loss in enumerate(losses)]


def test_step_labels_by_hand():
    steps = np.array([0, 5, 10, 15, 20])
    np.testing.assert_array_equal(ew.step_labels(steps, 15, 5), [0, 0, 1, np.nan, np.nan])
    np.testing.assert_array_equal(ew.step_labels(steps, 15, 10), [0, 1, 1, np.nan, np.nan])
    np.testing.assert_array_equal(ew.step_labels(steps, 15, 20), [1, 1, 1, np.nan, np.nan])
    np.testing.assert_array_equal(ew.step_labels(steps, None, 5), [0, 0, 0, 0, 0])


def test_auc_ties_count_one_half():
    # pairs: 2 beats 1, 0, 0 (3); 1 ties 1 (0.5) and beats 0, 0 (2): 5.5 of 6 pairs
    scores, labels = [2, 1, 1, 0, 0], [1, 1, 0, 0, 0]
    assert ew.roc_auc(scores, labels) == pytest.approx(5.5 / 6)
    assert ew.roc_auc([3, 3, 3], [1, 0, 0]) == pytest.approx(0.5)  # a constant signal says nothing
    assert math.isnan(ew.roc_auc([1, 2], [0, 0]))  # no positive: undefined


def test_auc_matches_pairwise_count_and_random_is_half():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, 400).astype(float)  # many ties
    labels = (rng.random(400) < 0.15).astype(float)
    assert ew.roc_auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)
    scores = rng.integers(0, 6, 8000).astype(float)
    labels = (rng.random(8000) < 0.15).astype(float)
    # independent of the labels: 0.5 within 4 standard errors, sqrt((n₊ + n₋ + 1) / (12 n₊ n₋)) ≈ 0.009
    assert abs(ew.roc_auc(scores, labels) - 0.5) < 0.04


def test_rising_signal_gives_auc_one_and_a_falling_one_is_not_flipped():
    run = llm_run({0: 0.4, 20: 0.45, 40: 0.1}, {t: 5.0 for t in range(35, 40)}, 41)
    healthy = llm_run({0: 0.4, 20: 0.42, 40: 0.44}, {t: 1.0 + 0.01 * (t % 7) for t in range(41)}, 41, seed=1)
    runs = ew.split_runs(run + healthy)
    collapses = ew.collapse_steps(runs)
    assert sorted(collapses.values(), key=str) == [40, None]
    score = ew.score_signal(runs, collapses, "grad_norm", 5)
    assert (score["positives"], score["negatives"]) == (5, 35 + 41)
    assert score["auc"] == 1.0 and score["auc_collapsing_runs"] == 1.0
    assert ew.score_signal(runs, collapses, "staleness", 5)["auc_collapsing_runs"] == 0.5  # constant in a run
    # negatives sorted: 41 at 1.00, then 6 each at 1.01..1.05, 5 at 1.06; the 90th percentile (index 67.5 of 76)
    # is 1.05, so the 5 negatives at 1.06 alarm with the 5 positives
    assert score["threshold"] == pytest.approx(1.05)
    assert score["precision"] == pytest.approx(0.5) and score["false_alarm_rate"] == pytest.approx(5 / 76)
    assert (score["detected"], score["median_lead"]) == (1.0, 5.0)
    wide = ew.score_signal(runs, collapses, "grad_norm", 10)  # steps 30..34 are positives at 1.0: ties
    steps = np.arange(41)
    scores = np.concatenate([ew.signal_values(r, "grad_norm")[:40] for r in runs.values()][:1]
                            + [ew.signal_values(runs[ew.run_key(healthy[0])], "grad_norm")])
    labels = np.concatenate([ew.step_labels(steps, 40, 10)[:40], np.zeros(41)])
    assert wide["auc"] == pytest.approx(pairwise_auc(scores, labels))
    falling = [dict(r, grad_norm=-r["grad_norm"]) for r in run + healthy]
    runs = ew.split_runs(falling)
    assert ew.score_signal(runs, ew.collapse_steps(runs), "grad_norm", 5)["auc"] == 0.0


def test_lead_time_by_hand():
    steps, values = np.array([0, 5, 10, 15, 20, 25]), np.array([0, 3, 1, 4, 2, 9])
    assert ew.lead_time(steps, values, 25, threshold=2.5, horizon=20) == 20  # first alarm at 5
    assert ew.lead_time(steps, values, 25, threshold=2.5, horizon=10) == 10  # window 15..20: alarm at 15
    assert ew.lead_time(steps, values, 25, threshold=5.0, horizon=20) == 0  # missed


def test_toy_collapse_needs_a_loss_of_progress_not_just_slowness():
    sync = quadratic_run([8, 1, 0.1, 0.01, 0.01, 0.01], label="sync", staleness=0)
    slow = quadratic_run([8, 4, 2, 1, 0.5, 0.3])  # ≥ 10 × sync from the third record, but never gets worse
    assert ew.toy_collapse_step(slow, sync) is None
    blowup = quadratic_run([8, 4, 2, 12, 30, 1e4])  # 12 < 10 × best 2; 30 ≥ 10 × 2 and ≥ 10 × 0.01
    assert ew.toy_collapse_step(blowup, sync) == 20
    nonfinite = quadratic_run([8, 4, 2, 2, 2, math.inf])
    assert ew.toy_collapse_step(nonfinite, sync) == 25
    flagged = quadratic_run([8, 4, 2, 2, 2, 2], diverged_from=3)
    assert ew.toy_collapse_step(flagged, sync) == 15
    with pytest.raises(ValueError, match="no sync run"):
        ew.collapse_steps(ew.split_runs(slow))


def test_llm_collapse_is_half_the_running_best():
    assert ew.llm_collapse_step(llm_run({0: 0.4, 10: 0.5, 20: 0.24}, {}, 21)) == 20
    assert ew.llm_collapse_step(llm_run({0: 0.4, 10: 0.5, 20: 0.26}, {}, 21)) is None
    diverged = [dict(r, diverged=r["step"] >= 7) for r in llm_run({0: 0.4, 10: 0.5}, {}, 11)]
    assert ew.llm_collapse_step(diverged) == 7


def test_cos_excess_subtracts_the_latest_probes_snr_share():
    halves = {0: 0.5, 2: -0.2, 4: 0.9}
    run = [make_row("llm", step=t, seed=0, method="naive", label="naive", staleness=4, cos_prev=0.6,
                    cos_halves=halves.get(t)) for t in range(6)]
    run = [dict(make_row("llm", step=0, seed=0, method="naive", staleness=4, cos_prev=0.1), step=-1)] + run

    def share(c):  # SNR/(1 + SNR) with SNR = c/(1 − c); no signal (SNR 0) where c <= 0
        snr = c / (1 - c) if c > 0 else 0.0
        return snr / (1 + snr)

    expected = [math.nan] + [0.6 - share(halves[max(p for p in halves if p <= t)]) for t in range(6)]
    np.testing.assert_allclose(ew.signal_values(run, "cos_excess"), expected)


def test_ess_drop_is_one_minus_the_rows_ess_ratio_and_nan_where_not_recorded():
    ratios = [1.0, 0.8, 0.25, None]
    bandit = [make_row("bandit_gaussian", step=5 * i, seed=0, method="naive", label="naive", staleness=4, lr=0.3,
                       ess_ratio=r) for i, r in enumerate(ratios)]
    llm = [make_row("llm", step=i, seed=0, method="vcpo", label="vcpo", staleness=4, lr=3e-4, ess_ratio=r)
           for i, r in enumerate(ratios)]
    expected = [0.0, 1 - 0.8, 0.75, math.nan]  # higher = warning: the ESS fell
    np.testing.assert_allclose(ew.signal_values(bandit, "ess_drop"), expected)
    np.testing.assert_allclose(ew.signal_values(llm, "ess_drop"), expected)
    assert np.isnan(ew.signal_values(quadratic_run([1.0, 2.0]), "ess_drop")).all()  # the quadratic has no weights


def test_split_runs_keeps_a_run_cached_twice_once():
    run = llm_run({0: 0.4}, {}, 3)
    runs = ew.split_runs(run + run)
    assert len(runs) == 1 and [r["step"] for r in next(iter(runs.values()))] == [0, 1, 2]


def test_llm_rows_append_the_final_evaluation_to_each_run():
    args = Args(steps=3, seed=2, staleness=4, lr=1e-4, ratio_to="proximal")
    records = [dict(r, lr=1e-4 / 5) for r in llm_run({0: 0.5}, {}, 3, seed=2, staleness=4)]
    rows = ew.llm_rows([(Run(args, ("regime",)), {"records": records, "summary": {"final_accuracy": 0.2}})])
    runs = ew.split_runs(rows)
    assert len(runs) == 1  # the final row and the records share the run's key (lr = the configured one)
    run = next(iter(runs.values()))
    assert (run[-1]["step"], run[-1]["accuracy"]) == (3, 0.2)
    assert ew.llm_collapse_step(run) == 3  # 0.2 < 0.5 × 0.5
    healthy = ew.llm_rows([(Run(args, ("regime",)), {"records": records, "summary": {"final_accuracy": 0.5}})])
    runs = ew.split_runs(healthy)
    score = ew.score_signal(runs, ew.collapse_steps(runs), "staleness", 5)
    assert score["scored_steps"] == 3  # the records only: the final evaluation row has no signals to score


@pytest.mark.parametrize("signals, horizons, message", [(("cos_prev",), (0,), "k must be"),
                                                       (("cos_prev",), (5, 2.5), "k must be"),
                                                       (("cosine",), (5,), "unknown signal")])
def test_bad_input_fails_before_any_work(signals, horizons, message, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=message):
        ew.evaluate([], signals, horizons)

    def no_runs(*args, **kwargs):
        raise AssertionError("ran before checking its input")

    monkeypatch.setattr(fig9_early_warning, "toy_rows", no_runs)
    with pytest.raises(ValueError, match=message):
        fig9_early_warning.plot(Results("smoke"), tmp_path, signals=signals, horizons=horizons)
    assert list(tmp_path.iterdir()) == []


def test_figure_smoke(tmp_path):
    toys = [u for figure in fig9_early_warning.TOY_FIGURES for u in figure.toy_units("smoke")]
    make_figure(fig9_early_warning.NAME, "smoke", tmp_path, units=toys)
    with open(tmp_path / f"{fig9_early_warning.NAME}.csv") as handle:
        table = list(csv.DictReader(handle))
    for ext in ("csv", "png", "pdf"):
        assert (tmp_path / f"{fig9_early_warning.NAME}.{ext}").stat().st_size > 0
    assert (tmp_path / f"{fig9_early_warning.NAME}_collapses.csv").stat().st_size > 0
    assert {r["sim"] for r in table} == {"quadratic", "bandit_gaussian", "bandit_softmax"}
    assert len(table) == 3 * len(ew.SIGNALS) * len(ew.HORIZONS)
    scored = {r["sim"]: int(r["scored_steps"]) for r in table if r["signal"] == "ess_drop"}
    assert scored["quadratic"] == 0 and scored["bandit_gaussian"] > 0 and scored["bandit_softmax"] > 0  # from rows
    assert fig9_early_warning.NAME in FIGURES
