"""The LLM sweep and fig5 end to end on a tiny profile (tiny model, 3 steps, 1 seed; cache in tmp)."""

import runtime.cache
from experiments import llm, profiles
from tests.figures import make_figure


def test_sweep_feeds_fig5(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setitem(profiles.LLM_SWEEP, "test", profiles.LLMSweep(
        base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=3, prompts_per_step=4, group_size=4,
                  minibatches=2, eval_every=2, eval_problems=8, temperature=0.5, ratio_to="proximal"),
        seeds=(0,), main_lr=3e-3, small_lrs=(1e-3,), grid={1e-3: (0, 2), 3e-3: (0, 2), 1e-2: (0,)},
        line_staleness=(0, 2), high_staleness=2))
    runs = llm.sweep("test")
    assert len({(r.args.method, r.args.staleness, r.args.lr, r.args.ratio_to) for r in runs}) == len(runs)
    results = llm.results_of(runs, log=lambda *a: None)
    assert {r["sim"] for _, res in results for r in res["records"]} == {"llm"}
    cached_files = sorted((tmp_path / "cache").glob("llm_grpo-*.json"))
    assert len(cached_files) == len(runs)
    from paper_figs import fig5_llm_grpo
    from tests.figure_reader import assert_a_reader_understands, capture

    figures = capture(fig5_llm_grpo, monkeypatch)
    make_figure("fig5_llm_grpo", "test", tmp_path / "out")  # reads the cache
    assert figures and all(assert_a_reader_understands(fig, "fig5") is None for fig in figures)
    assert sorted((tmp_path / "cache").glob("llm_grpo-*.json")) == cached_files
    for ext in ("png", "pdf", "csv"):
        assert (tmp_path / "out" / f"fig5_llm_grpo.{ext}").exists()
    table = (tmp_path / "out" / "fig5_llm_grpo_table.csv").read_text()
    assert "tis" in table and "m2po" in table and "bapo" in table and "behaviour" in table

    # the quick profile computes no run: it draws the committed run table (here: this run's) by the same code
    from paper_figs import committed

    monkeypatch.setattr(committed, "DATA", tmp_path / "data")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "fig5_llm_grpo.csv").write_bytes((tmp_path / "out" / "fig5_llm_grpo.csv").read_bytes())
    assert fig5_llm_grpo.runs("quick") == [] and fig5_llm_grpo.runs("quick", dry_run=True) == []
    figures.clear()
    make_figure("fig5_llm_grpo", "quick", tmp_path / "quick")
    for name in ("fig5_llm_grpo.csv", "fig5_llm_grpo_table.csv"):
        assert (tmp_path / "quick" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()
    assert not (tmp_path / "quick" / "fig5_llm_grpo_steps.csv").exists()  # the committed table has no steps
    assert figures and "committed runs" in figures[0]._suptitle.get_text()
    assert sorted((tmp_path / "cache").glob("llm_grpo-*.json")) == cached_files


def test_results_of_trains_each_warm_start_once_before_its_runs(tmp_path, monkeypatch):
    # Parallel workers only load a warm start, so each run must wait for its own, trained once.
    from sim.llm.train import Args

    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    events = []
    monkeypatch.setattr(llm, "warm_start", lambda config, log: events.append(("warm", config.digits)))
    monkeypatch.setattr(llm, "run_records", lambda args, log: events.append(("run", args.digits)) or
                        {"records": [], "summary": {"final_accuracy": 0.0}})
    # Costs that would put every run before a warm start, were it not for the wait.
    monkeypatch.setitem(llm.WARM_START_SECONDS, "tiny", 0.001)
    monkeypatch.setattr(llm, "estimated_seconds", lambda args: 100.0)
    runs = [llm.Run(Args(size="tiny", digits=d, seed=s), ("r",)) for d, s in [(2, 0), (3, 0), (2, 1), (3, 1)]]
    llm.results_of(runs, jobs=1, log=lambda *a: None)
    assert sorted(events) == [("run", 2), ("run", 2), ("run", 3), ("run", 3), ("warm", 2), ("warm", 3)]
    assert all(("warm", d) in events[:i] for i, (kind, d) in enumerate(events) if kind == "run")


def test_fig5_kl_rho_ranks_the_naive_proximal_runs_only():
    from paper_figs.fig5_llm_grpo import outcome_rho

    def kl_rho(runs):
        return outcome_rho(runs, "kl_behaviour_mean")

    def run(method, ratio_to, kl, delta):
        return {"method": method, "ratio_to": ratio_to, "kl_behaviour_mean": kl, "delta_accuracy": delta}

    naive = [run("naive", "proximal", kl, -kl) for kl in (0.1, 0.3, 0.2, 0.5)]  # more drift, less gained
    others = [run("gac", "proximal", 0.9, 0.9), run("naive", "behaviour", 1.0, 1.0)]  # would raise ρ if counted
    assert kl_rho(naive + others) == -1.0
    assert kl_rho([run("naive", "proximal", kl, kl) for kl in (0.1, 0.3, 0.2)]) == 1.0


def test_a_saved_warm_start_is_not_counted_as_training_work(tmp_path, monkeypatch):
    # Counted at the training's cost, a warm start found on disk in a second would make the progress line's speed
    # look many times what it is.
    from sim.llm.train import Args

    args = Args(size="small", digits=2)
    monkeypatch.setattr(llm, "warm_start_path", lambda config: tmp_path / "absent")
    assert llm.warm_start_task(args).cost == llm.WARM_START_SECONDS["small"]
    monkeypatch.setattr(llm, "warm_start_path", lambda config: tmp_path)  # exists
    assert llm.warm_start_task(args).cost == llm.WARM_START_FOUND_SECONDS < llm.WARM_START_SECONDS["small"]


def test_the_quick_pipeline_weighs_a_tiny_and_a_small_run_as_they_took():
    """The progress line's seconds left need the cost estimates in proportion across the quick pipeline's LLM runs:
    the ratios below are a small testbed run over a fig8 tiny run and a small warm start's attempt over a small run,
    the medians of one timeline of the quick pipeline (GAC_LAB_TIMELINE; the commit body of 1be434d gives them),
    each allowed ±30 % (issue 48's bound)."""
    from experiments import llm_figures, tuning

    def median_cost(runs):
        costs = sorted(llm.estimated_seconds(r.args) for r in runs)
        return costs[len(costs) // 2]

    small, tiny = median_cost(llm_figures.runs("quick", "cpu")), median_cost(tuning.llm_runs("quick", "cpu"))
    assert 13.3 / 1.3 < small / tiny < 13.3 * 1.3
    assert 7.2 / 1.3 < llm.WARM_START_SECONDS["small"] / small < 7.2 * 1.3
