"""The pipeline benchmark runs the figure command from an empty cache and reports wall and CPU time."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_pipeline_benchmark_smoke_run(tmp_path):
    command = [sys.executable, "-m", "benchmarks.pipeline", "fig4_stability_region", "--keep", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("fig4_stability_region figures, empty cache:")
    assert "s wall" in last and "cores × wall" in last and "target" not in last  # a smoke run has no target
    assert (tmp_path / "fig4_stability_region.csv").stat().st_size > 0


def test_device_check_times_both_configurations_then_runs_the_study_naming_the_device(tmp_path, monkeypatch):
    """The GPU command on the CPU at the tiny size: timing rows for both configurations, then the study's first run
    (its table and per-step records), every row naming the device."""
    import pandas as pd

    import sim.llm.warmstart
    from benchmarks import device_check
    from experiments import llm_highsnr

    monkeypatch.setattr(sim.llm.warmstart, "RUNS_DIR", tmp_path / "runs")
    first = llm_highsnr.runs("fig3")[:1]
    monkeypatch.setattr(llm_highsnr, "runs", lambda profile: first)
    assert device_check.main(device_check.Cli(out=tmp_path / "out", device="cpu", tiny=True))["runs"] == 1
    timing = pd.read_csv(tmp_path / "out" / "device_timing.csv")
    assert list(timing.config) == list(device_check.CONFIGS) and (timing.device == "cpu").all()
    assert (timing.seconds_per_step > 0).all()
    runs = pd.read_csv(tmp_path / "out" / "llm_highsnr_gpu_runs.csv")
    steps = pd.read_csv(tmp_path / "out" / "llm_highsnr_gpu_runs_steps.csv")
    assert list(runs.arm) == ["sync"] and (runs.device == "cpu").all() and (steps.device == "cpu").all()


@pytest.mark.parametrize("argv, message", [(["--out", "x", "--device", "cpu"], "--tiny only"),
                                           (["--out", "x"], "no such CUDA device"),
                                           (["--out", "x", "--budget-s", "0"], "--budget-s must be > 0")])
def test_device_check_refuses_bad_input_in_one_line(argv, message):
    result = subprocess.run([sys.executable, "-m", "benchmarks.device_check", *argv], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 2 and message in result.stderr and result.stderr.strip().count("\n") == 0


def test_the_eta_replay_matches_a_count_by_hand_with_right_and_wrong_estimates():
    """Four runs on 2 workers, two rounds of 10 clock units, then a plot of 1 unit here. With the estimates right,
    the seconds left miss only what the rule cannot see: the plot comes after the runs, not beside them. With the
    second round estimated 3 times too long, at the first run done (10 units in, 11 left) the runs' speed is 1 and
    the work left 10 + 30 + 30 + 1, less the 10 units the other run has had, over 2 workers."""
    from benchmarks.pipeline import eta_errors, eta_range

    rows = [{"name": f"run-{name}", "cost": 10.0, "here": False, "started_s": start, "done_s": start + 10.0}
            for name, start in (("a", 0.0), ("b", 0.0), ("c", 10.0), ("d", 10.0))]
    rows.append({"name": "fig", "cost": 1.0, "here": True, "started_s": 20.0, "done_s": 21.0})
    right = eta_errors(rows, jobs=2)
    assert [share for share, _ in right] == pytest.approx([10 / 41, 20 / 41, 30 / 41, 40 / 41])  # the plot ends it
    # 10.5 said against 11 twice (the plot's unit shared by 2 workers), 0.5 against 1 (run d's last moment, the plot
    # over 2 workers), then the plot alone: 1 against 1
    assert [error for _, error in right] == pytest.approx([-1 / 22, -1 / 22, -0.5, 0.0])
    wrong = eta_errors(rows, jobs=2, costs={"run-c": 30.0, "run-d": 30.0})
    assert wrong[0] == (10 / 81, pytest.approx(((10 + 30 + 30 + 1 - 10) / 2 - 11) / 11))
    assert eta_range(wrong, (0.1, 0.3)) == (wrong[0][1], wrong[0][1]) and eta_range(wrong, (0.9, 0.95)) is None
