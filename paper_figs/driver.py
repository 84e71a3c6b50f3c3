"""The one road from the figures' runs to their plots: ``python -m paper_figs`` builds one graph of tasks, warm starts
→ units (GRPO runs, toy simulations) → figures, and runs it with ``experiments.pool.run_tasks``.

Every figure module declares ``runs(profile, device, dry_run) -> list[Unit]`` and a pure ``plot(results, out)``.
The driver reads each distinct unit's cache entry once, computes the missing ones on the worker processes (a unit
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import cache, llm
from experiments.cache import Unit
from experiments.pool import Executor, Progress, Task, run_tasks
from paper_figs.args import DRY_RUN_DIR, FIGURES, LLM_FIGURES, FigureArgs, FigureName  # noqa: F401 (re-exported)
from paper_figs.common import Results
from sim.record import OUT_LOCK, exclusive_lock, publish_together

PLOT_SECONDS = 3.0
"""Rough seconds of one figure's plot (matplotlib, PNG and PDF): orders the tasks, never changes a result."""


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
        return publish_together(staging, out, name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class Figure:
    """What a figure's task stands for (its ``Task.spec``): figure ``name``, plotted here once its units are done."""

    name: str
    units = ()

    def unit_results(self, result: Any) -> list[tuple[Unit, Any]]:
        return []

    def done_line(self, where: str, elapsed_s: float) -> str:
        return f"{self.name} done at {elapsed_s:.0f} s"


def compute(units: list[Unit], jobs: int = 1, force: bool = False, folder: Path | None = None,
            figures: dict[str, tuple[list[Unit], Callable[[list], Any]]] | None = None, log=print,
            executor: Callable[[int], Executor] | None = None, progress: bool = False) -> dict[str, Any]:
    """Every unit's result by name: cached ones read once each, the others computed on ``jobs`` workers of
    ``executor`` (``experiments.pool.run_tasks``; default: local processes) into the cache ``folder`` (default
    ``experiments.cache.CACHE_DIR``). ``figures``: name → (its units, a function of their [(unit, result)] pairs)
    run here as soon as those units are done. Each log line ends with the elapsed time and the seconds left by the
    cost estimates (``experiments.pool.Progress``); ``progress`` also draws a progress bar on a terminal's stderr."""
    folder = cache.CACHE_DIR if folder is None else Path(folder)
    figures = figures or {}
    values, tasks = llm.unit_tasks(units, folder, force)
    holder = {u.name: t.name for t in tasks for u in llm.units_of(t)}  # a missing unit -> the task computing it
    for name, (mine, draw) in figures.items():
        tasks.append(Task(f"figure {name}", _draw, (draw, mine, values), PLOT_SECONDS,
                          tuple(dict.fromkeys(holder[u.name] for u in mine if u.name in holder)), here=True,
                          spec=Figure(name)))
    every = {u.name: u for u in units}
    runs = sum(isinstance(u, llm.RunUnit) for u in every.values())
    log(f"[paper_figs] {len(figures)} figures, {len(every)} units ({runs} GRPO runs), {len(values)} cached; "
        f"{len(holder)} to compute: {len(tasks)} tasks on {jobs} workers", flush=True)
    count, done = {"done": 0}, Progress(tasks, jobs)
    bar = _progress_bar(done) if progress else None
    say = log if bar is None else (lambda text, **_: bar.write(text))

    def report(task: Task, result: Any) -> None:
        done.done(task)
        elapsed, where = done.elapsed_s(), done.line()
        if bar is not None:
            bar.set_postfix_str(f"~{done.eta_s():.0f} s left", refresh=False)
            bar.update(round(done.done_cost) - bar.n)
        for item, value in task.spec.unit_results(result):
            values[item.name] = value
            count["done"] += 1
            what = item.kind
            if isinstance(item, llm.RunUnit):
                a = item.spec.args
                what = (f"{a.size} {a.digits}-digit {a.run_method} s={a.staleness} lr={a.lr:g} seed={a.seed}: "
                        f"final acc {value['summary']['final_accuracy']:.3f}")
            say(f"[paper_figs unit {count['done']}/{len(holder)}] {what} ({where})", flush=True)
        if (line := task.spec.done_line(where, elapsed)) is not None:
            say(f"[paper_figs] {line}", flush=True)

    def started(task: Task) -> None:
        done.started(task)
        if (line := llm.start_line(task)) is not None:
            say(f"[paper_figs] {line}", flush=True)

    try:
        run_tasks(tasks, jobs, report, executor, on_start=started)
    finally:
        if bar is not None:
            bar.close()
    return values


def _progress_bar(progress: Progress):
    """A tqdm bar over the graph's estimated core-seconds (shown on a terminal only); the seconds left it shows are
    ``Progress.eta_s``'s (tqdm's own rate would count the tasks still running as no work)."""
    from tqdm import tqdm

    return tqdm(total=round(progress.total), unit="est. core-s", disable=None, dynamic_ncols=True, desc="[paper_figs]",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} est. core-s [{elapsed}{postfix}]")


def _draw(draw: Callable[[list], Any], units: list[Unit], values: dict[str, Any]) -> Any:
    return draw([(u, values[u.name]) for u in units])


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
    ``executor`` (default: local processes; ``experiments.cluster.connect``'s for Ray), with the out folder locked
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
            log(f"[paper_figs] {name} -> {args.out}/{name}.*", flush=True)
            return written[name]
        return draw

    units = [u for mine in declared.values() for u in mine]
    compute(units, jobs, args.force, figures={name: (mine, drawer(name)) for name, mine in declared.items()},
            log=log, executor=executor, progress=progress)
    return written
