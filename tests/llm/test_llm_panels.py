"""The LLM panels of fig1 and fig3 draw from the shared LLM sweep (tiny profile, cache in tmp)."""

import csv
import json

import experiments.cache
from experiments import llm, signature
from paper_figs import driver


def test_llm_panels_of_fig1_and_fig3(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setitem(llm.PROFILES, "test", dict(
        base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=3, prompts_per_step=4, group_size=4,
                  minibatches=2, eval_every=2, eval_problems=8, temperature=0.5, ratio_to="proximal"),
        seeds=(0,), main_lr=3e-3, small_lrs=(1e-3,), grid={3e-3: (0, 2)}, line_staleness=(0, 2), high_staleness=2))
    monkeypatch.setitem(signature.PROFILES, "test", dict(signature.PROFILES["quick"], cells={}))  # no signature panel
    def sweep_runs(name):
        return [u for u in driver.module(name).runs("test") if u.kind == "llm_grpo"]

    driver.make_figure("fig1_cosine", "test", tmp_path, units=sweep_runs("fig1_cosine"))
    with open(tmp_path / "fig1_cosine_table.csv") as handle:
        table = list(csv.DictReader(handle))
    assert {(row["sim"], row["staleness"]) for row in table} == {("llm", "0"), ("llm", "2")}
    assert all(-1.0 <= float(row["mean_cos_prev_before_divergence"]) <= 1.0 for row in table)
    driver.make_figure("fig3_divergence", "test", tmp_path, units=sweep_runs("fig3_divergence"))
    with open(tmp_path / "fig3_divergence_summary.csv") as handle:
        assert {row["label"] for row in csv.DictReader(handle)} == {"sync", "naive", "gac"}
    with open(tmp_path / "fig3_divergence.csv") as handle:
        assert {row["sim"] for row in csv.DictReader(handle)} == {"llm"}
    assert (tmp_path / "fig1_cosine.png").stat().st_size > 0 and (tmp_path / "fig3_divergence.png").exists()


def test_parallel_sweep_equals_serial(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setitem(llm.PROFILES, "test", dict(
        base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=3, prompts_per_step=4, group_size=4,
                  minibatches=2, eval_every=2, eval_problems=8, temperature=0.5, ratio_to="proximal"),
        seeds=(0, 1), main_lr=3e-3, small_lrs=(), grid={3e-3: (0, 2)}, line_staleness=(0, 2), high_staleness=2))
    outcomes = []
    for jobs in (1, 2):
        monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path / f"cache{jobs}")
        results = llm.sweep_results("test", log=lambda *a: None, jobs=jobs)
        outcomes.append([(item.args.run_method, item.args.staleness, item.args.seed, res["records"])
                         for item, res in results])
        assert len(list((tmp_path / f"cache{jobs}").glob("llm_grpo-*.json"))) == len(results)  # workers used it
    assert json.dumps(outcomes[0]) == json.dumps(outcomes[1])  # records hold NaN (never equal to itself)
