"""The signature sweep (experiments/signature.py) and figs2_llm_signature on a tiny profile; the gpu command's
dry run; bad input; the GAC table's gap recovered against a direct computation."""

import csv
import json
import math

import numpy as np
import pytest

import runtime.cache
import sim.llm.warmstart
from experiments import profiles, signature
from paper_figs import __main__ as cli
from paper_figs import figs2_llm_signature
from tests.figures import make_figure


def _tiny_profile(tiny_checkpoint):
    return profiles.Signature(base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=4, prompts_per_step=4,
                                        group_size=4, eval_every=2, eval_problems=8, temperature=0.5, lr=3e-3,
                                        snr_every=1),
                              seeds=(0, 1), cells={"base": (0, 2), "updates=2": (0, 2)})


def test_figs2_rows_cosines_and_snr(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setitem(profiles.SIGNATURE, "test", _tiny_profile(tiny_checkpoint))
    make_figure("figs2_llm_signature", "test", tmp_path)
    with open(tmp_path / "figs2_llm_signature_table.csv") as handle:
        table = [dict(r, staleness=int(r["staleness"])) for r in csv.DictReader(handle)]
    for ext in ("png", "pdf", "csv"):
        assert (tmp_path / f"figs2_llm_signature.{ext}").stat().st_size > 0
    with open(tmp_path / "figs2_llm_signature.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8 and {(r["config"], r["staleness"], r["seed"]) for r in rows} == {
        (c, s, k) for c in ("base", "updates=2") for s in ("0", "2") for k in ("0", "1")}
    assert {r["device"] for r in rows} == {"cpu"}
    from experiments.llm import results_of

    results = results_of(signature.sweep("test"), log=lambda *a, **k: None)  # from the cache now
    for item, res in results:
        row = signature.run_row(item, res)
        late = [r for r in res["records"] if r["step"] >= item.args.steps // 10]
        for key in ("cos_prev", "cos_prev_step", "cos_update", "cos_halves"):  # the run's mean, computed directly
            values = [r[key] for r in late if not math.isnan(r[key])]
            assert row[key] == pytest.approx(np.mean(values)) if values else math.isnan(row[key])
        if item.args.minibatches == 1:  # one update per RL step: the two gradient granularities coincide
            assert row["cos_prev"] == pytest.approx(row["cos_prev_step"], nan_ok=True)
        c = row["cos_halves"]
        if 0 < c < 1:
            assert row["snr_reference_cos"] == pytest.approx(2 * (c / (1 - c)) / (1 + 2 * (c / (1 - c))))
    assert {(r["config"], r["staleness"]) for r in table} == {(c, s) for c in ("base", "updates=2") for s in (0, 2)}


def test_gpu_command_dry_run_writes_csv_naming_device(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(sim.llm.warmstart, "RUNS_DIR", tmp_path / "runs")
    assert cli.main(["figs2_llm_signature", "fig5_llm_grpo", "--profile", "gpu", "--device", "cuda", "--dry-run",
                     "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "dry_run" / "figs2_llm_signature.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["device"] for r in rows} == {"cpu"} and {r["config"] for r in rows} == {"base", "updates=2"}
    assert {r["steps"] for r in rows} == {"2"}  # shrunk: the gpu profile's cells, 2 steps, one seed
    assert (tmp_path / "out" / "dry_run" / "fig5_llm_grpo.csv").stat().st_size > 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["dry_run"]  # nothing beside the real figures
    summaries = [json.loads(p.read_text())["result"]["summary"] for p in (tmp_path / "cache").glob("llm_grpo-*.json")]
    assert summaries and all(s["args"]["size"] == "tiny" and s["args"]["device"] == "cpu" for s in summaries)


@pytest.mark.parametrize("argv, message", [
    (["figs2_llm_signature", "--profile", "gpu"], "needs --device cuda"),
    (["fig1_cosine", "--profile", "gpu", "--dry-run"], "LLM figures only"),
])
def test_cli_bad_profile_one_line_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_bad_configuration_and_profile():
    with pytest.raises(ValueError, match="unknown configuration"):
        signature.overrides("updates=3")
    with pytest.raises(ValueError, match="needs --device cuda"):
        signature.sweep("gpu", "cpu")
    with pytest.raises(ValueError, match="unknown profile"):
        signature.sweep("fast")


def test_gap_recovered_against_direct_computation():
    acc = {"sync": [0.6, 0.5, 0.7], "naive": [0.1, 0.2, 0.0], "gac": [0.4, 0.3, 0.2]}
    rows = [{"config": arm, "seed": k, "final_accuracy": v} for arm, vals in acc.items() for k, v in enumerate(vals)]
    out = signature.gap_recovered(rows, "gac")
    assert out["gap_recovered"] == pytest.approx((0.3 - 0.1) / (0.6 - 0.1))
    assert out["gap_low"] <= out["gap_recovered"] <= out["gap_high"] and out["seeds_paired"] == 3
    assert signature.gap_recovered(rows, "naive")["gap_recovered"] == 0.0
    assert signature.gap_recovered(rows, "sync")["gap_recovered"] == pytest.approx(1.0)


def test_gaps_paired_by_seed():
    def row(config, s, seed, value):
        return {"config": config, "staleness": s, "seed": seed, "snr_halves": 0.1,
                **{key: value for key in figs2_llm_signature.GAP_KEYS}}

    rows = [row("base", 0, 0, 0.1), row("base", 0, 1, 0.3), row("base", 16, 0, 0.5), row("base", 16, 1, 0.4),
            row("base", 4, 0, 9.0), row("sync only", 0, 0, 0.2)]
    (gap,) = figs2_llm_signature.gaps(rows)
    assert gap["staleness"] == 16 and gap["seeds"] == 2
    assert gap["gap_cos_prev"] == pytest.approx(((0.5 - 0.1) + (0.4 - 0.3)) / 2)
    assert gap["gap_cos_prev_low"] <= gap["gap_cos_prev"] <= gap["gap_cos_prev_high"]


def test_every_gac_table_arm_builds_its_trainer_args():
    # The arms name trainer settings; after the CLI moved GAC's parameters into a config group, a stale
    # field name made `python -m experiments.signature gac-table` fail before any run.
    from experiments.signature import GAC_ARMS, GAC_TABLE, gac_runs

    runs = gac_runs()
    assert len(runs) == len(GAC_ARMS) * len(GAC_TABLE["seeds"])
    for run in runs:
        method, staleness, threshold = GAC_ARMS[run.roles[0]]
        assert (run.args.method, run.args.staleness) == (method, staleness)
        if threshold is not None:
            assert run.args.gac.threshold == threshold


def test_drift_correlation_leaves_out_sync_and_tis():
    from experiments.signature import drift_correlation

    rows = [dict(staleness=16, method="naive", kl_behaviour_mean=k, final_accuracy=a)
            for k, a in [(0.1, 0.5), (0.2, 0.4), (0.3, 0.45), (0.4, 0.1)]]
    # Would turn the correlation positive if counted: sync (KL 0, low accuracy) and TIS (large KL, high accuracy).
    rows += [dict(staleness=0, method="naive", kl_behaviour_mean=0.0, final_accuracy=0.0),
             dict(staleness=16, method="tis", kl_behaviour_mean=0.9, final_accuracy=0.9)]
    rho, n = drift_correlation(rows)
    assert n == 4
    assert rho == pytest.approx(-0.8)  # ranks KL 1,2,3,4 vs accuracy 4,2,3,1: 1 − 6·(9+0+0+9)/(4·15)


def test_gac_table_seeds_option_builds_every_arm_on_those_seeds_and_rejects_bad_ones(tmp_path, capsys):
    from experiments.signature import GAC_ARMS, gac_runs, main

    runs = gac_runs(("sync", "gac τ=0 update"), seeds=(3, 4, 5))
    assert [(r.roles[0], r.args.seed) for r in runs] == [(arm, seed) for arm in ("sync", "gac τ=0 update")
                                                         for seed in (3, 4, 5)]
    assert len(gac_runs(seeds=(7,))) == len(GAC_ARMS)
    out = tmp_path / "table.csv"
    for bad in (["1", "1"], []):
        assert main(["gac-table", str(out), "--seeds", *bad]) == 2  # before any run is built or computed
        assert "--seeds needs distinct non-negative integers" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
