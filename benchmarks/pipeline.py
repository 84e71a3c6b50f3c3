"""The figure pipeline from an empty cache: wall time against the issue's targets, and how busy the cores were.

Runs ``python -m paper_figs NAMES --profile quick`` in a child process with a fresh cache and warm-start folder
(``GAC_LAB_CACHE``, ``GAC_LAB_RUNS`` in a temporary directory: what a fresh clone computes; the install is not
timed). Prints the wall time next to its target, and the CPU time of the whole process tree over (wall time ×
cores): 1.0 means no core ever waited, which is the most a scheduler can give on this machine.
Run: ``python -m benchmarks.pipeline [--figures all|first-release] [--keep DIR] [NAME ...]`` from the repository root
(all twelve figures: 2161 s wall and 3522 CPU-s from an empty cache on 2 cores at bf19d96, with other work on the
machine; ``first-release`` is fig1–fig7 and figs1).

``--plan`` computes nothing: it runs ``python -m paper_figs NAMES --profile quick --plan``, which declares the
figures' units and prints where the CPU goes by the cost estimates the scheduler orders the work with
(``paper_figs.driver.plan``): per figure its distinct units, GRPO runs, estimated core-seconds and how many of its
units another figure shares, then the GRPO runs that train the same policy under different cache keys, and the
biggest units.
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
from typing import Annotated, Literal

import tyro

from sim.cli import choice, folder, parse

FIRST_RELEASE = ("fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region",
                 "fig5_llm_grpo", "fig6_ablation", "fig7_bound", "figs1_bandit_snr")
TARGET_S = {"all": 10 * 60.0, "first-release": 5 * 60.0}
"""The targets on 2 idle cores: every figure in at most 10 min (issue 24; it was 15 min before fig10 and figs2
were added), the eight of ``FIRST_RELEASE`` in at most 5 min."""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class PipelineArgs:
    """The figure pipeline from an empty cache: wall time against the issue's targets, and how busy the cores were."""

    names: tyro.conf.Positional[tuple[str, ...]] = ()
    """these figures instead of --figures (no target: a smoke run)"""
    figures: Annotated[Literal["all", "first-release"], choice("--figures", tuple(sorted(TARGET_S)))] = "all"
    """the figures timed against their target: all, or first-release (fig1–fig7 and figs1)"""
    keep: Annotated[Path, folder("--keep")] | None = None
    """write the figures here (default: a temp folder, removed)"""
    plan: bool = False
    """compute nothing: where the CPU goes by the cost estimates, per figure"""

    def __post_init__(self):
        if self.figures not in TARGET_S:
            raise ValueError(f"--figures must be one of {', '.join(sorted(TARGET_S))}, got {self.figures!r}")
        if self.keep is not None and self.keep.is_file():  # paper_figs would refuse it after the cache was set up
            raise ValueError(f"--keep {self.keep} is a file, not a folder")


def main(argv=None) -> int:
    args = parse(PipelineArgs, argv, prog="python -m benchmarks.pipeline", description=__doc__.splitlines()[0])
    names = args.names or (["all"] if args.figures == "all" else list(FIRST_RELEASE))
    if args.plan:  # the figures' declarations live in paper_figs, which benchmarks do not import
        return subprocess.run([sys.executable, "-m", "paper_figs", *names, "--profile", "quick", "--plan"]).returncode
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
    what, target = (" ".join(args.names), None) if args.names else (args.figures, TARGET_S[args.figures])
    verdict = "" if target is None else f" (target ≤ {target:.0f} s: {'met' if wall <= target else 'NOT met'})"
    print(f"{what} figures, empty cache: {wall:.0f} s wall{verdict}; CPU {cpu:.0f} s = {cpu / (wall * cores):.2f} "
          f"of {cores} cores × wall (1.0: no core idle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
