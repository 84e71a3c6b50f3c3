"""How long each ``python -m`` command of the checkout takes to answer ``--help``: wall and CPU seconds of a fresh
process, the median over ``--rounds``; with ``--baseline DIR`` another checkout's same command alternately beside it.

Run: ``python -m benchmarks.cli_help [--rounds 3] [--baseline DIR] [NAME ...]`` from the repository root.
"""

from __future__ import annotations

import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from runtime.cli import parse

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmarks", "course", "experiments", "paper_figs", "sim", "theory")


def commands(root: Path = ROOT) -> list[str]:
    """Each module with a ``__main__`` guard, and each package with a ``__main__.py``, as ``python -m`` names it."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            if path.name == "__main__.py":
                found.append(module.removesuffix(".__main__"))
            elif re.search(r"^if __name__ == .__main__.:", path.read_text(), re.M):
                found.append(module)
    return found


def help_seconds(command: str, root: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of ``python -m command --help`` run in ``root``; NaN where it fails (a command the
    baseline does not have)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", command, "--help"], cwd=root, capture_output=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        return math.nan, math.nan
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@dataclass(frozen=True)
class HelpArgs:
    """Time each command's --help."""

    names: tyro.conf.Positional[tuple[str, ...]] = ()
    """commands to time (default: every one)"""
    rounds: int = 3
    """fresh processes per command (medians)"""
    baseline: str | None = None
    """another checkout whose same commands run alternately beside these"""

    def __post_init__(self):
        if self.rounds < 1:
            raise ValueError(f"--rounds must be >= 1, got {self.rounds}")
        if self.baseline is not None and not Path(self.baseline, "sim").is_dir():
            raise ValueError(f"--baseline {self.baseline}: not a checkout of this package (no sim/)")


def main(argv=None) -> None:
    args = parse(HelpArgs, argv, prog="python -m benchmarks.cli_help")
    roots = {"here": ROOT} if args.baseline is None else {"here": ROOT, "baseline": Path(args.baseline).resolve()}
    print(f"--help of each command: median wall s / CPU s over {args.rounds} fresh processes, load average "
          f"{os.getloadavg()[0]:.1f}")
    for command in args.names or commands():
        times = {name: [] for name in roots}
        for _ in range(args.rounds):
            for name, root in roots.items():
                times[name].append(help_seconds(command, root))
        cells = [f"{name} {statistics.median(w for w, _ in t):5.2f} / {statistics.median(c for _, c in t):5.2f}"
                 for name, t in times.items()]
        print(f"{command:<28} " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
