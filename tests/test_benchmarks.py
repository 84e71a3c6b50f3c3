"""The pipeline benchmark runs the figure command from an empty cache and reports wall and CPU time."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pipeline_benchmark_smoke_run(tmp_path):
    command = [sys.executable, "-m", "benchmarks.pipeline", "fig4_stability_region", "--keep", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("fig4_stability_region figures, empty cache:")
    assert "s wall" in last and "cores × wall" in last and "target" not in last  # a smoke run has no target
    assert (tmp_path / "fig4_stability_region.csv").stat().st_size > 0
