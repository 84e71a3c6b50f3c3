"""The committed summaries in docs/data/ recomputed from their committed run tables through today's code
(experiments.stats and its callers): byte for byte, since each summary is a deterministic function of its runs (the
bootstraps draw from a seeded numpy Generator; the provenance columns, code and command, set aside), and the LLM
testbed's paired numbers quoted in RESULTS.md to their printed digits. docs/data/verdict_toys.csv has no committed
runs (they live in the run cache), so it is not here.

A summary that differs here means its code changed what it reports: regenerate the file from its runs (the command
in its module) and say in CHANGELOG.md what moved and why.
"""

import io
import math
from pathlib import Path

import pandas as pd
import pytest

from experiments import llm_figures, signature, stats, verdict
from paper_figs import figs2_llm_signature
from runtime.files import write_records
from tests.records import without_provenance

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"


def run_rows(name: str) -> list[dict]:
    """A committed runs CSV as the summary code's rows (an empty text column read back as "", not NaN)."""
    rows = pd.read_csv(DATA / name).to_dict("records")
    for row in rows:
        if isinstance(row.get("gac_space"), float) and math.isnan(row["gac_space"]):
            row["gac_space"] = ""
    return rows


def csv_text(rows: list[dict]) -> str:
    buffer = io.StringIO()
    pd.DataFrame(rows).to_csv(buffer, index=False)  # only to name a differing column in the failure message
    return buffer.getvalue()


def assert_reproduces(name: str, rows: list[dict], tmp_path) -> None:
    written = write_records(rows, tmp_path / name).read_text()
    committed = without_provenance((DATA / name).read_text())
    if written != committed:
        old, new = pd.read_csv(DATA / name), pd.read_csv(io.StringIO(written))
        moved = [c for c in old.columns if c not in new or not old[c].equals(new[c])]
        pytest.fail(f"{name} no longer reproduces from its runs; columns that moved: {moved or 'the header'}")


@pytest.fixture(scope="module")
def verdict_runs():
    return run_rows("verdict_llm_runs.csv"), run_rows("verdict_llm_tuning.csv")


def test_verdict_table_and_controls_reproduce(verdict_runs, tmp_path):
    runs, tuning = verdict_runs
    assert_reproduces("verdict_llm.csv", verdict.verdict_table(runs, tuning), tmp_path)
    assert_reproduces("verdict_llm_controls.csv", verdict.control_differences(runs), tmp_path)


def test_verdict_v2_table_reproduces_from_its_runs(tmp_path):
    table = verdict.verdict_table(run_rows("verdict_llm_v2_runs.csv"), run_rows("verdict_llm_v2_tuning.csv"))
    assert_reproduces("verdict_llm_v2.csv", table, tmp_path)
    sync = next(r for r in table if r["arm"] == "sync")
    assert sync["minus_naive_high"] - sync["minus_naive_low"] <= 0.04  # issue 33: resolved to +-0.02


def test_verdict_tuning_picks_reproduce(verdict_runs):
    _, tuning = verdict_runs
    scores: dict[str, dict[float, float]] = {}
    for r in tuning:
        scores.setdefault(r["arm"], {})[r["lr"]] = r["score"]
    for r in tuning:
        mine = scores[r["arm"]]
        assert stats.best_step(mine, higher_is_better=True) == r["best_lr"], r["arm"]
        assert stats.near_best_range(mine, verdict.NEAR_BEST, higher_is_better=True) == (
            r["robust_low"], r["robust_high"]), r["arm"]


@pytest.mark.parametrize("stem", ["signature_gac_table", "signature_gac_table_seeds3-8"])
def test_gac_tables_reproduce(stem, tmp_path):
    assert_reproduces(f"{stem}.csv", signature.gac_table(run_rows(f"{stem}_runs.csv")), tmp_path)


def test_signature_map_summaries_reproduce(tmp_path):
    rows = run_rows("figs2_llm_signature.csv")
    assert_reproduces("figs2_llm_signature_table.csv", figs2_llm_signature.summary_table(rows), tmp_path)
    assert_reproduces("figs2_llm_signature_gaps.csv", figs2_llm_signature.gaps(rows), tmp_path)


def test_llm_testbed_numbers_quoted_in_results():
    """RESULTS.md: sync RL gains +0.186 [0.100, 0.272]; staleness costs s = 16 −0.097 [−0.137, −0.056] (paired)."""
    summary = llm_figures.paired_summary(pd.read_csv(DATA / "llm_figures_runs.csv")).set_index("arm").round(3)
    assert tuple(summary.loc["sync", ["gain", "gain_low", "gain_high"]]) == (0.186, 0.100, 0.272)
    assert tuple(summary.loc["naive s=16", ["minus_sync", "minus_sync_low", "minus_sync_high"]]) == (
        -0.097, -0.137, -0.056)
    assert summary.loc["naive s=8", "minus_sync"] == -0.066
    results = (Path(__file__).resolve().parents[2] / "RESULTS.md").read_text()
    assert "+0.186 [0.100, 0.272]" in results and "−0.097 [−0.137, −0.056]" in results


def test_the_check_fails_when_a_statistic_changes(monkeypatch, tmp_path):
    """Mutations the check must catch: the seed bootstrap at another confidence level (its bounds move), the gap
    recovered measured against the arm instead of naive, the robust range 1 % wider."""
    rows = run_rows("signature_gac_table_runs.csv")
    real = stats.bootstrap_interval
    monkeypatch.setattr(stats, "bootstrap_interval", lambda *a, confidence=0.9, **k: real(*a, confidence=0.95, **k))
    with pytest.raises(pytest.fail.Exception, match="acc_low"):
        assert_reproduces("signature_gac_table.csv", signature.gac_table(rows), tmp_path)
    monkeypatch.undo()
    monkeypatch.setattr(stats, "gap_recovered", lambda arm, naive, sync: (arm - naive) / (sync - arm))
    with pytest.raises(pytest.fail.Exception, match="gap_recovered"):
        assert_reproduces("signature_gac_table.csv", signature.gac_table(rows), tmp_path)
    monkeypatch.undo()
    monkeypatch.setattr(verdict, "NEAR_BEST", 0.11)
    with pytest.raises(AssertionError):
        test_verdict_tuning_picks_reproduce((None, run_rows("verdict_llm_tuning.csv")))
