"""The LLM panels of fig1 and fig3 draw from the testbed's runs; the sweep is the same in parallel and serial (tiny
profiles, cache in tmp)."""

import csv
import json

import runtime.cache
from experiments import llm, profiles
from paper_figs import driver
from tests.figures import make_figure


def test_llm_panels_of_fig1_and_fig3(tiny_testbed, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")

    def testbed_runs(name):
        return [u for u in driver.module(name).runs("test") if u.kind == "llm_grpo"]

    fig1, fig3 = testbed_runs("fig1_cosine"), testbed_runs("fig3_divergence")
    assert len(fig1) == 2 * 5 and len(fig3) == 2 * 4  # 2 warm starts × the arms
    assert len({u.name for u in fig1} & {u.name for u in fig3}) == 2 * 2  # sync and naive s=16 shared
    make_figure("fig1_cosine", "test", tmp_path, units=fig1)
    with open(tmp_path / "fig1_cosine_table.csv") as handle:
        table = list(csv.DictReader(handle))
    assert {(row["sim"], row["staleness"]) for row in table} == {("llm", str(s)) for s in (0, 2, 4, 8, 16)}
    assert all(row["seeds"] == "2" for row in table)  # a run is (warm seed, seed): two per staleness
    assert all(-1.0 <= float(row["mean_cos_prev_before_divergence"]) <= 1.0 for row in table)
    make_figure("fig3_divergence", "test", tmp_path, units=fig3)
    with open(tmp_path / "fig3_divergence_summary.csv") as handle:
        assert {row["label"] for row in csv.DictReader(handle)} == {"sync", "naive s=16", "gac gradient s=16",
                                                                     "gac update s=16"}
    with open(tmp_path / "fig3_divergence.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["sim"] for row in rows} == {"llm"} and {row["warm_seed"] for row in rows} == {"1", "2"}
    assert (tmp_path / "fig1_cosine.png").stat().st_size > 0 and (tmp_path / "fig3_divergence.png").exists()


def test_parallel_sweep_equals_serial(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setitem(profiles.LLM_SWEEP, "test", profiles.LLMSweep(
        base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=3, prompts_per_step=4, group_size=4,
                  minibatches=2, eval_every=2, eval_problems=8, temperature=0.5, ratio_to="proximal"),
        seeds=(0,), main_lr=3e-3, small_lrs=(), grid={3e-3: (0, 2)}, line_staleness=(0, 2), high_staleness=2))
    outcomes = []
    for jobs in (1, 2):
        monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / f"cache{jobs}")
        results = llm.results_of(llm.sweep("test"), log=lambda *a: None, jobs=jobs)
        outcomes.append([(item.args.run_method, item.args.staleness, item.args.seed, res["records"])
                         for item, res in results])
        assert len(list((tmp_path / f"cache{jobs}").glob("llm_grpo-*.json"))) == len(results)  # workers used it
    assert json.dumps(outcomes[0]) == json.dumps(outcomes[1])  # records hold NaN (never equal to itself)


def test_the_testbed_figures_draw_from_their_per_step_csv_alone(tiny_testbed, tmp_path, monkeypatch):
    """``python -m paper_figs.llm_testbed --compute`` writes one row per (run, step) + a final-eval row per run, each
    run once with the figures it belongs to; drawing needs that CSV only (no cache, no run)."""
    import pandas as pd

    from experiments import llm_figures
    from paper_figs import llm_testbed

    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    data = tmp_path / "steps.csv"
    llm_testbed.main(llm_testbed.Cli(data=str(data), out=str(tmp_path / "figs"), compute=True, profile="test",
                                     jobs=1))
    table = pd.read_csv(data)
    runs = llm_figures.runs("test")
    assert len(table.groupby(["arm", "warm_seed", "seed"])) == len(runs) == 2 * 7  # 7 distinct arms, once each
    assert set(table.figure) == {"fig1", "fig3", "fig1+fig3"}
    assert table.final_eval.sum() == len(runs) and (table[~table.final_eval].groupby(
        ["arm", "warm_seed", "seed"]).size() == 4).all()  # 4 steps each
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "empty")  # drawing computes nothing
    paths = llm_testbed.main(llm_testbed.Cli(data=str(data), out=str(tmp_path / "again")))
    assert sorted(p.name for p in paths) == ["fig1_cosine_llm_testbed.pdf", "fig1_cosine_llm_testbed.png",
                                             "fig3_divergence_llm_testbed.pdf", "fig3_divergence_llm_testbed.png"]
    assert not (tmp_path / "empty").exists()
