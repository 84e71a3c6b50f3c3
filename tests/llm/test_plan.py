"""``paper_figs.plan``: the figures and every GRPO run they read, as one graph of tasks on two worker processes."""

import csv

import pytest

import experiments.cache
import sim.llm.warmstart
from experiments import llm
from paper_figs import fig5_llm_grpo, figs2_llm_signature, plan
from paper_figs.__main__ import FigureArgs

NAMES = ("fig3_divergence", "figs2_llm_signature", "fig5_llm_grpo")  # fig3 and fig5 share the sweep


@pytest.fixture
def dry_gpu_profile(tmp_path, monkeypatch):
    """The quick profile with its GRPO runs shrunk to tiny dry runs (the environment reaches the workers)."""
    monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(sim.llm.warmstart, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setenv("GAC_LAB_DRY_RUN", "1")
    return FigureArgs(names=NAMES, profile="quick", device="cpu", out=tmp_path / "out")


def test_plan_computes_each_shared_run_once_then_the_figures(dry_gpu_profile, tmp_path, capfd):
    args = dry_gpu_profile
    runs = {llm.run_name(r.args) for name in NAMES for r in plan.figure_runs(name, args.profile, args.device)}
    tasks, every = plan.tasks_for(NAMES, args)
    assert set(every) == runs and len(runs) < sum(len(plan.figure_runs(n, "quick", "cpu")) for n in NAMES)  # shared
    assert {t.name for t in tasks} == runs | {f"figure {n}" for n in NAMES} | {t.name for t in tasks
                                                                               if t.name.startswith("warm start")}
    figure5 = next(t for t in tasks if t.name == "figure fig5_llm_grpo")
    assert set(figure5.after) == {llm.run_name(r.args) for r in fig5_llm_grpo.llm_runs("quick", "cpu")}

    plan.make_figures(NAMES, args, jobs=2, log=print)
    out = capfd.readouterr()
    assert "not computed ahead" not in out.err  # no figure had to compute a run of its own
    assert len(list((tmp_path / "cache").glob("llm_grpo-*.json"))) == len(runs)
    with open(args.out / "figs2_llm_signature.csv") as handle:
        assert {r["steps"] for r in csv.DictReader(handle)} == {"2"}
    assert (args.out / "fig5_llm_grpo.png").stat().st_size > 0
    assert all(f"{name} done at" in out.out for name in NAMES)
    assert (args.out / "fig3_divergence.csv").stat().st_size > 0


def test_a_run_the_plan_misses_is_computed_with_a_warning(dry_gpu_profile, monkeypatch):
    monkeypatch.setattr(figs2_llm_signature, "llm_runs", lambda profile, device: [])
    monkeypatch.setenv("GAC_LAB_PLANNED", "1")  # what a figure task sets in its worker
    with pytest.warns(RuntimeWarning, match="not computed ahead"):
        plan.make_figures(("figs2_llm_signature",), dry_gpu_profile, jobs=1)
    assert (dry_gpu_profile.out / "figs2_llm_signature.csv").exists()
