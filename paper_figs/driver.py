"""The figures on the one road: ``python -m paper_figs`` hands every figure's units to ``runtime.graph.compute``,
one graph of tasks, warm starts → units (GRPO runs, toy simulations) → figures.

Every figure module declares ``runs(profile, device, dry_run) -> list[Unit]`` and a pure ``plot(results, out)``.
The graph reads each distinct unit's cache entry once, computes the missing ones on the worker processes (a unit
shared by several figures is computed once; a run waits for its warm start; longest chain first), and calls each
figure's ``plot`` here, in this process, with its results as soon as the tasks holding its units are done. Folders
and ``--force`` travel as arguments; the same graph runs on every device, with that device's job count.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paper_figs.args import DRY_RUN_DIR, FIGURES, LLM_FIGURES, FigureArgs, FigureName  # noqa: F401 (re-exported)
from paper_figs.common import Results
from runtime import graph
from runtime.cache import Unit
from runtime.files import OUT_LOCK, exclusive_lock, publish_together
from runtime.graph import Executor


def module(name: str):
    """The module of figure ``name``."""
    return importlib.import_module(f"paper_figs.{name}")


def plot_figure(name: str, results: Results, out: Path,
                plot: Callable[[Results, Path], Any] | None = None) -> list[Path]:
    """Draw figure ``name`` from ``results`` into a temp folder inside ``out``, then publish its files together.

    A figure that fails or is killed leaves the previous outputs as they were (and no half of a new set).
    """
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out, prefix=f".{name}."))
    try:
        (module(name).plot if plot is None else plot)(results, staging)
        if not any(staging.iterdir()):  # nothing drawn (a quick figure whose committed data is missing said so)
            return []
        return publish_together(staging, out, name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def declare(args: FigureArgs) -> dict[str, list[Unit]]:
    """Each figure's units, as its module's ``runs`` declares them (nothing is read or computed)."""
    return {name: module(name).runs(args.profile, args.device, args.dry_run) for name in args.names}


@contextlib.contextmanager
def out_lock(out: Path, log=print):
    """Hold the out folder's lock for the block. A second run into the same folder waits (one line naming the
    holder) instead of computing the same units beside the first: once it gets the lock, it finds them cached."""
    path, what = Path(out) / OUT_LOCK, f"--out {out}"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(exclusive_lock(path, what))
        except ValueError:
            try:
                holder = path.read_text().strip() or "another process"
            except OSError:
                holder = "another process"
            log(f"[paper_figs] --out {out} is in use by {holder}; waiting for it to finish (its finished runs are "
                f"cached, so this run reuses them)", flush=True)
            stack.enter_context(exclusive_lock(path, what, wait=True))
        yield


def make_figures(args: FigureArgs, jobs: int, log=print, declared: dict[str, list[Unit]] | None = None,
                 executor: Callable[[int], Executor] | None = None, progress: bool = False) -> dict[str, list[Path]]:
    """Every figure of ``args.names`` and every unit they read, as one graph of tasks on ``jobs`` workers of
    ``executor`` (default: local processes; ``runtime.cluster.connect``'s for Ray), with the out folder locked
    throughout (``out_lock``); ``progress``: a progress bar on a terminal."""
    with out_lock(args.out, log):
        return _make_figures(args, jobs, log, declared, executor, progress)


def _make_figures(args: FigureArgs, jobs: int, log, declared: dict[str, list[Unit]] | None,
                  executor: Callable[[int], Executor] | None = None, progress: bool = False) -> dict[str, list[Path]]:
    declared = declare(args) if declared is None else declared
    written: dict[str, list[Path]] = {}

    def drawer(name: str) -> Callable[[list], Any]:
        def draw(items: list) -> list[Path]:
            results = Results(args.profile, args.device, args.dry_run, tuple(items))
            written[name] = plot_figure(name, results, args.out)
            log(f"[paper_figs] {name} -> {args.out}/{name}.*" if written[name] else f"[paper_figs] {name}: not drawn",
                flush=True)
            return written[name]
        return draw

    units = [u for mine in declared.values() for u in mine]
    graph.compute(units, jobs, args.force, consumers={name: (mine, drawer(name)) for name, mine in declared.items()},
                  log=log, executor=executor, progress=progress, name="paper_figs", device=args.device)
    return written
