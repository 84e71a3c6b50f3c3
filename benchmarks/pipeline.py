"""The figure pipeline from an empty cache: CPU time against the target, wall time, and how busy the cores were.

Runs ``python -m paper_figs NAMES --profile quick`` in a child process with a fresh cache and warm-start folder
(``GAC_LAB_CACHE``, ``GAC_LAB_RUNS`` in a temporary directory: what a fresh clone computes; the install is not
timed). Prints the wall time, the CPU time of the whole process tree next to its target (every figure), and that
CPU time over (wall time × cores): 1.0 means no core ever waited, which is the most a scheduler can give here.
Run: ``python -m benchmarks.pipeline [--keep DIR] [NAME ...]`` from the repository root (measurements:
benchmarks/README.md).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from runtime.cli import folder, parse

TARGET_CPU_S = 1200.0
"""The target for every figure (issue 47): at most 1,200 CPU-seconds from an empty cache."""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class PipelineArgs:
    """The figure pipeline from an empty cache: wall time against the issue's targets, and how busy the cores were."""

    names: tyro.conf.Positional[tuple[str, ...]] = ()
    """these figures instead of all of them (no target: a smoke run)"""
    keep: Annotated[Path, folder("--keep")] | None = None
    """write the figures here (default: a temp folder, removed)"""

    def __post_init__(self):
        if self.keep is not None and self.keep.is_file():  # paper_figs would refuse it after the cache was set up
            raise ValueError(f"--keep {self.keep} is a file, not a folder")


def main(argv=None) -> int:
    args = parse(PipelineArgs, argv, prog="python -m benchmarks.pipeline", description=__doc__.splitlines()[0])
    names = args.names or ["all"]
    with tempfile.TemporaryDirectory(prefix="gac-lab-pipeline-") as tmp:
        out = args.keep or Path(tmp) / "out"
        env = {**os.environ, "GAC_LAB_CACHE": f"{tmp}/cache", "GAC_LAB_RUNS": f"{tmp}/runs"}
        env.pop("GAC_LAB_JOBS", None)
        command = [sys.executable, "-m", "paper_figs", *names, "--profile", "quick", "--out", str(out)]
        print("$ " + " ".join(command[1:]), flush=True)
        cpu0, start = children_cpu_s(), time.perf_counter()
        subprocess.run(command, env=env, check=True)
        wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    what = " ".join(args.names) or "all"
    met = "met" if cpu <= TARGET_CPU_S else "NOT met"
    verdict = "" if args.names else f" (target ≤ {TARGET_CPU_S:.0f} CPU-s: {met})"
    print(f"{what} figures, empty cache: {wall:.0f} s wall; CPU {cpu:.0f} s{verdict} = {cpu / (wall * cores):.2f} "
          f"of {cores} cores × wall (1.0: no core idle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
