"""The figure pipeline from an empty cache: wall time against the issue's targets, and how busy the cores were.

Runs ``python -m paper_figs NAMES --profile quick`` in a child process with a fresh cache and warm-start folder
(``GAC_LAB_CACHE``, ``GAC_LAB_RUNS`` in a temporary directory: what a fresh clone computes; the install is not
timed). Prints the wall time next to its target, and the CPU time of the whole process tree over (wall time ×
cores): 1.0 means no core ever waited, which is the most a scheduler can give on this machine.
Run: ``python -m benchmarks.pipeline [--figures all|first-release] [--keep DIR] [NAME ...]`` from the repository root
(all twelve figures: 2161 s wall and 3522 CPU-s from an empty cache on 2 cores at bf19d96, with other work on the
machine; ``first-release`` is fig1–fig7 and figs1).

``--plan`` computes nothing: it declares the figures' units (as ``python -m paper_figs`` does) and prints where the
CPU goes by the cost estimates the scheduler orders the work with (``Unit.cost``: estimated seconds on one core):
per figure its distinct units, GRPO runs, estimated core-seconds and how many of its units another figure shares,
then the GRPO runs that train the same policy under different cache keys (equal in every argument but what they
measure on the way: ``MEASURE_ONLY``), which one run could serve, and the biggest units.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIRST_RELEASE = ("fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region",
                 "fig5_llm_grpo", "fig6_ablation", "fig7_bound", "figs1_bandit_snr")
TARGET_S = {"all": 10 * 60.0, "first-release": 5 * 60.0}
"""The targets on 2 idle cores: every figure in at most 10 min (issue 24; it was 15 min before fig10 and figs2
were added), the eight of ``FIRST_RELEASE`` in at most 5 min."""


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def plan(names: list[str], profile: str = "quick", log=print) -> dict[str, dict[str, float]]:
    """Per figure of ``names`` (figure names, or "all"): {"units", "grpo", "core_s", "shared"} by the cost estimates,
    plus "all" (every distinct unit once), logged as a table with the duplicate check and the biggest units."""
    from collections import Counter

    from paper_figs.driver import FIGURES, FigureArgs, declare

    figures = tuple(FIGURES) if "all" in names else tuple(names)
    declared = declare(FigureArgs(names=figures, profile=profile))
    owners = Counter(name for units in declared.values() for name in {u.name for u in units})
    table = {}
    for figure, units in declared.items():
        mine = {u.name: u for u in units}.values()
        table[figure] = {"units": len(mine), "grpo": sum(u.kind == "llm_grpo" for u in mine),
                         "core_s": sum(u.cost for u in mine), "shared": sum(owners[u.name] > 1 for u in mine)}
    every = {u.name: u for units in declared.values() for u in units}.values()
    table["all"] = {"units": len(every), "grpo": sum(u.kind == "llm_grpo" for u in every),
                    "core_s": sum(u.cost for u in every), "shared": sum(owners[u.name] > 1 for u in every)}
    log(f"{'figure':<26} {'units':>6} {'GRPO':>5} {'est. core-s':>12} {'shared':>7}")
    for figure, row in table.items():
        log(f"{figure:<26} {row['units']:>6} {row['grpo']:>5} {row['core_s']:>12.0f} {row['shared']:>7}")
    same = Counter(_training_key(u) for u in every if u.kind == "llm_grpo")
    log(f"GRPO runs that train the same policy as another under a different key (differing only in "
        f"{', '.join(MEASURE_ONLY)}): {sum(n - 1 for n in same.values())}")
    for u in sorted(every, key=lambda u: -u.cost)[:5]:
        log(f"  biggest: {u.kind} {u.cost:.0f} est. core-s ({', '.join(f for f, us in declared.items() if u in us)})")
    return table


MEASURE_ONLY = ("eval_every", "eval_problems", "snr_every")
"""Run arguments that set what a GRPO run measures on the way (evaluation and SNR-probe schedules), not the policy
it trains."""


def _training_key(unit) -> str:
    """A GRPO unit's cache key without ``MEASURE_ONLY``: runs with equal ones train the same policy."""
    import json

    return json.dumps({k: v for k, v in unit.key.items() if k not in MEASURE_ONLY}, sort_keys=True, default=str)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", choices=sorted(TARGET_S), default="all")
    parser.add_argument("names", nargs="*", help="these figures instead of --figures (no target: a smoke run)")
    parser.add_argument("--keep", type=Path, default=None, help="write the figures here (default: a temp folder)")
    parser.add_argument("--plan", action="store_true",
                        help="compute nothing: where the CPU goes by the cost estimates, per figure")
    args = parser.parse_args(argv)
    names = args.names or (["all"] if args.figures == "all" else list(FIRST_RELEASE))
    if args.plan:
        plan(names)
        return 0
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
