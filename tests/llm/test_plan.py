"""``paper_figs.plan``: the figures and every GRPO run they read, as one graph of tasks on two worker processes."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

import experiments.cache
import sim.llm.warmstart
from experiments import llm
from paper_figs import fig5_llm_grpo, figs2_llm_signature, plan
from paper_figs.__main__ import FigureArgs

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("fig3_divergence", "figs2_llm_signature", "fig5_llm_grpo")  # fig3 and fig5 share the sweep


@pytest.fixture
def dry_quick_profile(tmp_path, monkeypatch):
    """The quick profile with its GRPO runs shrunk to tiny dry runs (the environment reaches the workers)."""
    monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(sim.llm.warmstart, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setenv("GAC_LAB_DRY_RUN", "1")
    return FigureArgs(names=NAMES, profile="quick", device="cpu", out=tmp_path / "out")


def test_plan_lists_each_shared_run_once_and_each_figure_after_its_runs(dry_quick_profile):
    args = dry_quick_profile
    runs = {llm.run_name(r.args) for name in NAMES for r in plan.figure_runs(name, args.profile, args.device)}
    tasks, every = plan.tasks_for(NAMES, args)
    assert set(every) == runs and len(runs) < sum(len(plan.figure_runs(n, "quick", "cpu")) for n in NAMES)  # shared
    assert {t.name for t in tasks} == runs | {f"figure {n}" for n in NAMES} | {t.name for t in tasks
                                                                               if t.name.startswith("warm start")}
    figure5 = next(t for t in tasks if t.name == "figure fig5_llm_grpo")
    assert set(figure5.after) == {llm.run_name(r.args) for r in fig5_llm_grpo.llm_runs("quick", "cpu")}


def test_python_m_paper_figs_runs_the_plan_on_two_workers(tmp_path):
    # Through the real command line: under ``python -m`` its argument types live in ``__main__``, which the
    # workers must never need to unpickle. GAC_LAB_DRY_RUN set from outside shrinks the runs without --dry-run
    # (which would take the one-process path).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GAC_LAB_JOBS": "2",
           "GAC_LAB_DRY_RUN": "1", "GAC_LAB_CACHE": str(tmp_path / "cache"), "GAC_LAB_RUNS": str(tmp_path / "runs")}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "paper_figs", *NAMES, "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on 2 workers" in done.stdout and all(f"{name} done at" in done.stdout for name in NAMES)
    assert "not computed ahead" not in done.stderr  # no figure had to compute a run of its own
    runs = {llm.run_name(r.args) for name in NAMES for r in _dry_runs(name)}
    assert len(list((tmp_path / "cache").glob("llm_grpo-*.json"))) == len(runs)
    with open(out / "figs2_llm_signature.csv") as handle:
        assert {r["steps"] for r in csv.DictReader(handle)} == {"2"}
    assert (out / "fig5_llm_grpo.png").stat().st_size > 0 and (out / "fig3_divergence.csv").stat().st_size > 0


def _dry_runs(name: str) -> list:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GAC_LAB_DRY_RUN", "1")
        return plan.figure_runs(name, "quick", "cpu")


def test_a_run_the_plan_misses_is_computed_with_a_warning(dry_quick_profile, monkeypatch):
    monkeypatch.setattr(figs2_llm_signature, "llm_runs", lambda profile, device: [])
    monkeypatch.setenv("GAC_LAB_PLANNED", "1")  # what a figure task sets in its worker
    with pytest.warns(RuntimeWarning, match="not computed ahead"):
        plan.make_figures(("figs2_llm_signature",), dry_quick_profile, jobs=1)
    assert (dry_quick_profile.out / "figs2_llm_signature.csv").exists()
