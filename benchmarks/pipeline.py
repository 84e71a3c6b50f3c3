"""The figure pipeline from an empty cache: CPU time against the target, wall time, and how busy the cores were.

Runs ``python -m paper_figs NAMES --profile quick`` in a child process with a fresh cache and warm-start folder
(``GAC_LAB_CACHE``, ``GAC_LAB_RUNS`` in a temporary directory: what a fresh clone computes; the install is not
timed). Prints the wall time, the CPU time of the whole process tree next to its target (every figure), that CPU
time over (wall time × cores): 1.0 means no core ever waited, which is the most a scheduler can give here, and how
far the progress line's seconds left were from the time really left (``eta_errors``, from the run's
``GAC_LAB_TIMELINE``).
Run: ``python -m benchmarks.pipeline [--keep DIR] [NAME ...]`` from the repository root (measurements:
benchmarks/README.md).
"""

from __future__ import annotations

import csv
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


ETA_WINDOW = (0.2, 0.9)
"""The shares of the estimated work between which the seconds left are judged (issue 48: within ±30 % once 20 % of
the work is done; near the end a few seconds off is a large share of what is left)."""


def read_timeline(path: Path, graph: str = "paper_figs") -> list[dict]:
    """The rows of one graph in a ``GAC_LAB_TIMELINE`` file: name, cost, here, started_s, done_s."""
    with open(path, newline="") as file:
        return [{"name": name, "cost": float(cost), "here": here == "1", "started_s": float(start),
                 "done_s": float(done)} for row_graph, name, cost, here, start, done in csv.reader(file)
                if row_graph == graph]


def eta_errors(rows: list[dict], jobs: int, costs: dict[str, float] | None = None) -> list[tuple[float, float]]:
    """(share of the estimated work done, (seconds left − the seconds the graph really ran on) / the latter) as each
    task is done: the timeline replayed through ``runtime.graph.Progress`` on its own clock, with the rows' cost
    estimates or ``costs`` by task name (the same schedule, other estimates)."""
    from runtime.graph import Progress, Task  # here: --help answers without torch

    tasks = {r["name"]: Task(r["name"], str, cost=(costs or {}).get(r["name"], r["cost"]), here=r["here"])
             for r in rows}
    now = [0.0]
    meter = Progress(list(tasks.values()), jobs, clock=lambda: now[0])
    end = max(r["done_s"] for r in rows)
    events = sorted([(r["started_s"], 1, r["name"]) for r in rows] + [(r["done_s"], 0, r["name"]) for r in rows])
    errors = []
    for time_s, is_start, name in events:  # a task done before one started at the same time, as run_tasks does
        now[0] = time_s
        if is_start:
            meter.started(tasks[name])
            continue
        meter.done(tasks[name])
        if time_s < end:
            errors.append((meter.done_cost / meter.total, (meter.eta_s() - (end - time_s)) / (end - time_s)))
    return errors


def eta_range(errors: list[tuple[float, float]], window=ETA_WINDOW) -> tuple[float, float] | None:
    """The lowest and highest relative error of the seconds left within ``window`` of the estimated work (None: no
    task ended there)."""
    inside = [error for share, error in errors if window[0] <= share <= window[1]]
    return (min(inside), max(inside)) if inside else None


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class PipelineArgs:
    """The figure pipeline from an empty cache: wall time against the issue's targets, and how busy the cores were."""

    names: tyro.conf.Positional[tuple[str, ...]] = ()
    """these figures instead of all of them (no target: a smoke run)"""
    keep: Annotated[Path, folder("--keep")] | None = None
    """write the figures here, and the run's GAC_LAB_TIMELINE as timeline.csv (default: a temp folder, removed)"""

    def __post_init__(self):
        if self.keep is not None and self.keep.is_file():  # paper_figs would refuse it after the cache was set up
            raise ValueError(f"--keep {self.keep} is a file, not a folder")


def main(argv=None) -> int:
    args = parse(PipelineArgs, argv, prog="python -m benchmarks.pipeline", description=__doc__.splitlines()[0])
    names = args.names or ["all"]
    with tempfile.TemporaryDirectory(prefix="gac-lab-pipeline-") as tmp:
        out = args.keep or Path(tmp) / "out"
        timeline = (args.keep or Path(tmp)) / "timeline.csv"
        timeline.parent.mkdir(parents=True, exist_ok=True)
        timeline.unlink(missing_ok=True)  # the rows are appended: none from an earlier run
        env = {**os.environ, "GAC_LAB_CACHE": f"{tmp}/cache", "GAC_LAB_RUNS": f"{tmp}/runs",
               "GAC_LAB_TIMELINE": str(timeline)}
        env.pop("GAC_LAB_JOBS", None)
        command = [sys.executable, "-m", "paper_figs", *names, "--profile", "quick", "--out", str(out)]
        print("$ " + " ".join(command[1:]), flush=True)
        cpu0, start = children_cpu_s(), time.perf_counter()
        subprocess.run(command, env=env, check=True)
        wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu0
        rows = read_timeline(timeline)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    window = f"{ETA_WINDOW[0]:.0%}–{ETA_WINDOW[1]:.0%} of the estimated work"
    if (errors := eta_range(eta_errors(rows, cores))) is not None:
        print(f"seconds left against the time really left, {window}: {errors[0]:+.0%} to {errors[1]:+.0%}")
    else:
        print(f"seconds left: no task ended within {window}")
    what = " ".join(args.names) or "all"
    met = "met" if cpu <= TARGET_CPU_S else "NOT met"
    verdict = "" if args.names else f" (target ≤ {TARGET_CPU_S:.0f} CPU-s: {met})"
    print(f"{what} figures, empty cache: {wall:.0f} s wall; CPU {cpu:.0f} s{verdict} = {cpu / (wall * cores):.2f} "
          f"of {cores} cores × wall (1.0: no core idle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
