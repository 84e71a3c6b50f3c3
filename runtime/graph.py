"""The one road from cached units to their results: ``compute`` reads each unit's cache entry once and computes the
missing ones as a graph of tasks (a unit after the tasks it waits for, e.g. a GRPO run after its warm start), with one
progress line; the figures and every study's command line go through it.

``run_tasks`` schedules the graph (``graphlib``, longest chain first) on an executor: by default a local process pool
whose workers end when the process that started it dies (``runtime.cluster`` opens a Ray cluster as the other one).
Without that, a ``kill -9`` of a parallel ``paper_figs`` run leaves the workers re-parented, computing on, then idle
at hundreds of MB each. Each worker runs a watchdog thread that polls its parent's pid (portable: no signals or
prctl, whose Linux death signal follows the creating thread rather than the process).
"""

from __future__ import annotations

import csv
import math
import multiprocessing
import os
import re
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any, Protocol

from runtime import cache, paths

PARENT_POLL_S = 0.5
"""How often a worker checks that its parent is alive."""


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)  # re-parented: the pool's process is gone, and with it whoever wanted this result


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: start the watchdog (it exits at once if the parent is already gone)."""
    threading.Thread(target=_watch_parent, args=(parent,), name="exit-with-parent", daemon=True).start()


def process_pool(jobs: int) -> ProcessPoolExecutor:
    """``jobs`` spawned worker processes (fresh interpreters: no forked torch state) that exit with this process."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_exit_with_parent, initargs=(os.getpid(),))


class Executor(Protocol):
    """Where ``run_tasks`` sends the tasks that do not run here: the part of ``concurrent.futures.Executor`` it uses
    (``process_pool``'s ProcessPoolExecutor; ``runtime.cluster.RayExecutor``)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


@dataclass(frozen=True)
class Task:
    """One unit of work for ``run_tasks``: ``fn(*args)`` (module-level, so a spawned worker can import it)."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    cost: float = 1.0
    """estimated seconds on one core: it orders the work, it cannot change a result"""
    after: tuple[str, ...] = ()
    """names of the tasks that must have finished before this one starts"""
    here: bool = False
    """run in this process, not a worker (short work that needs what only this process holds, e.g. a plot that
    receives the results of the tasks before it)"""
    unit: cache.Unit | None = None
    """the unit whose result the task computes (None: a warm start, a plot); it stays in this process: a worker
    receives ``fn`` and ``args`` only"""
    started: str | None = None
    """the line that says the task has started (a long task before which nothing else can be reported)"""
    done: str | None = None
    """the line that says a task without a unit is done"""


def _graph(tasks: list[Task]) -> TopologicalSorter:
    """The tasks' dependency graph; one-line ValueError for a duplicate name, an unknown wait or a cycle."""
    names = {t.name for t in tasks}
    if len(names) != len(tasks):
        raise ValueError("task names must be unique")
    for t in tasks:
        for before in t.after:
            if before not in names:
                raise ValueError(f"task {t.name!r} waits for {before!r}, which is not among the tasks")
    graph = TopologicalSorter({t.name: t.after for t in tasks})
    try:
        graph.prepare()
    except CycleError as err:
        raise ValueError(f"the tasks wait for each other in a cycle: {' -> '.join(err.args[1])}") from None
    return graph


def priorities(tasks: list[Task]) -> dict[str, float]:
    """Each task's cost plus the longest chain of tasks waiting on it (its critical path to the end)."""
    by_name = {t.name: t for t in tasks}
    waiting: dict[str, list[str]] = {t.name: [] for t in tasks}
    for t in tasks:
        for before in t.after:
            waiting.setdefault(before, []).append(t.name)
    order = list(TopologicalSorter({t.name: t.after for t in tasks}).static_order())
    level: dict[str, float] = {}
    for name in reversed(order):  # every task after all the tasks that wait for it
        level[name] = by_name[name].cost + max((level[w] for w in waiting[name]), default=0.0)
    return level


def run_tasks(tasks: list[Task], jobs: int, on_done: Callable[[Task, Any], None] = lambda task, result: None,
              executor: Callable[[int], Executor] | None = None,
              on_start: Callable[[Task], None] = lambda task: None) -> dict[str, Any]:
    """Every task's result by name, ``jobs`` at a time, each once the tasks it waits for are done.

    ``graphlib`` keeps the bookkeeping (which tasks may start); among those, the one with the longest chain of
    work behind it goes first (critical-path list scheduling): with the estimated costs, the cores stay busy until
    the end and the last tasks are short. ``jobs`` ≤ 1 runs them here, one after another in the same order; a task
    marked ``here`` always runs here, as soon as it is ready, the workers busy or not. A task that raises stops the
    rest: tasks not yet started are dropped and the error is raised here (a task already running in another worker
    ends with it). Only ``jobs`` tasks are handed to the pool at a time, so the order is this function's, not a
    queue's, and ``on_start(task)`` is called as a task starts (is handed to a worker, or runs here).

    ``executor(jobs)`` opens where the tasks go (default: ``process_pool``, spawned local processes; with it,
    ``jobs`` ≤ 1 runs here). Whatever the executor, a task computes the same bits: it is the same function on the
    same arguments, seeded on its own, on one torch thread.
    """
    graph = _graph(tasks)
    by_name = {t.name: t for t in tasks}
    level = priorities(tasks)
    rank = {t.name: i for i, t in enumerate(tasks)}
    ready: list[Task] = []
    results: dict[str, Any] = {}

    def refill() -> None:
        ready.extend(by_name[name] for name in graph.get_ready())
        ready.sort(key=lambda t: (-level[t.name], rank[t.name]))

    def finish(task: Task, result: Any) -> None:
        results[task.name] = result
        on_done(task, result)
        graph.done(task.name)
        refill()

    refill()
    if executor is None and (jobs <= 1 or sum(not t.here for t in tasks) <= 1):
        while ready:
            task = ready.pop(0)
            on_start(task)
            finish(task, task.fn(*task.args))
        return results
    pool = (process_pool if executor is None else executor)(max(1, jobs))
    running: dict[Future, Task] = {}
    try:
        while ready or running:
            while task := _next(ready, len(running) < jobs):
                ready.remove(task)
                on_start(task)
                if task.here:
                    finish(task, task.fn(*task.args))
                else:
                    running[pool.submit(task.fn, *task.args)] = task
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    finish(running.pop(future), future.result())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def _next(ready: list[Task], worker_free: bool) -> Task | None:
    """The ready task to start now: the first for a worker while one is free, else the first that runs here (a plot
    draws while the workers compute, rather than after every task queued before it)."""
    return next((t for t in ready if worker_free or t.here), None)


def _into_try(ran: float, expected: float) -> float:
    """How far a task that has run ``ran`` seconds is into its current try of ``expected`` seconds: a task past its
    estimate is taken to be retrying (a warm start that misses its acceptance range trains again from the next seed,
    each try about one estimate), so what is left of it is the rest of that try, not nothing."""
    if expected <= 0 or ran <= 0:
        return 0.0
    return ran - (math.ceil(ran / expected - 1e-9) - 1) * expected  # at its estimate a try is done, not begun


def _weighted_median(pairs: list[tuple[float, float]]) -> float:
    """The value at which the (value, weight) pairs' weights, in order of value, reach half their sum."""
    pairs = sorted(pairs)
    half, reached = sum(w for _, w in pairs) / 2, 0.0
    for value, weight in pairs:
        reached += weight
        if reached >= half:
            return value
    return pairs[-1][0]


def task_family(name: str, here: bool) -> str:
    """The family whose finished tasks set a task's speed (``Progress``): "plot" for a task run here, else the task
    name's first word up to a '-', '/' or space (a unit's kind, "warm" for a warm start)."""
    return "plot" if here else re.match(r"[^-/ ]*", name).group() or name


class Progress:
    """How far a graph of tasks is, by the cost estimates (``Task.cost``): the estimated core-seconds of the tasks
    done, of all of them, and the seconds left (``eta_s``).

    The estimates are rough, and a machine is faster or slower than the one they were measured on, and not by the same
    factor for every kind of task (a warm start, a GRPO run, a toy grid, a plot). So the seconds left are, per family
    of tasks (``task_family``), the family's estimated work left at the speed its finished tasks ran at, less the time
    the running tasks have already had, over the workers that still have work. A family's speed is the median of its
    finished tasks' own speeds (estimated core-seconds per second spent on each, from ``started`` to ``done``), each
    weighted by its estimate: one task far over its estimate (a warm start retrained from another seed) is that
    estimate's error, not the machine's speed. A family with none finished yet runs at the middle family's speed (each
    family one vote, so that no one family's large estimates stand for all). Without start times (``done`` alone)
    the speed is the work done over the time elapsed, which early on, with one task finished and others half done
    beside it, reads up to ``jobs`` times too slow. Before anything is done: the estimate over ``jobs`` workers. Tasks
    that run here (plots) count with their estimate: they take the time of the graph's last minutes.
    """

    def __init__(self, tasks: list[Task], jobs: int, clock: Callable[[], float] = time.perf_counter):
        self.total = sum(t.cost for t in tasks)
        self.done_cost = 0.0
        self.jobs = max(1, jobs)
        self.clock = clock
        self.start = clock()
        self.left = len(tasks)
        self.family_left: dict[str, float] = {}  # each family's estimated work not done
        for t in tasks:
            family = task_family(t.name, t.here)
            self.family_left[family] = self.family_left.get(family, 0.0) + t.cost
        self.running: dict[str, tuple[float, float, str]] = {}  # name -> (start time, estimated cost, family)
        self.speeds: dict[str, list[tuple[float, float]]] = {}  # family -> its finished tasks' (speed, estimate)

    def started(self, task: Task) -> None:
        self.running[task.name] = (self.clock(), task.cost, task_family(task.name, task.here))

    def done(self, task: Task) -> None:
        family = task_family(task.name, task.here)
        self.done_cost += task.cost
        self.family_left[family] -= task.cost
        self.left -= 1
        if task.name in self.running:
            took = self.clock() - self.running.pop(task.name)[0]
            self.speeds.setdefault(family, []).append((task.cost / max(took, 1e-9), task.cost))

    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def eta_s(self) -> float:
        """Seconds left: (Σ over families of the work left / the family's speed − the running tasks' time into their
        current try, see ``_into_try``) / the workers still busy; work left / jobs before anything is done."""
        left = max(0.0, self.total - self.done_cost)
        if self.done_cost <= 0:
            return left / self.jobs
        if not any(cost for pairs in self.speeds.values() for _, cost in pairs):  # no start times: elapsed time
            return left * self.elapsed_s() / self.done_cost
        known = {family: _weighted_median(pairs) for family, pairs in self.speeds.items()}
        middle = sorted(known.values())[len(known) // 2]

        def speed(family: str) -> float:
            return known.get(family, middle)

        work = sum(max(0.0, cost) / speed(family) for family, cost in self.family_left.items())
        now = self.clock()
        had = sum(_into_try(now - t0, cost / speed(family)) for t0, cost, family in self.running.values())
        return max(0.0, work - had) / max(1, min(self.jobs, self.left))

    def line(self) -> str:
        """``"E s elapsed, P% of the estimated work, ~L s left"``: the end of a progress log line."""
        share = self.done_cost / self.total if self.total > 0 else 1.0
        return f"{self.elapsed_s():.0f} s elapsed, {share:.0%} of the estimated work, ~{self.eta_s():.0f} s left"


CUDA_WORKERS = 4
"""Most worker processes that share one CUDA device: a few keep the device busy while one samples on the host; more
would add CUDA contexts, not throughput (a judgement, not measured on a device)."""


def default_jobs(jobs: int | None = None, device: str = "cpu") -> int:
    """Worker processes that compute at once: one per core (each worker runs one task on one thread), at most
    CUDA_WORKERS on a CUDA ``device``. ``jobs`` (``--jobs``), else ``GAC_LAB_JOBS`` (read, never set), overrides it
    up to that limit: more is warned about and capped; a value that is not a whole number >= 1 is a one-line
    ValueError. Every run is seeded on its own, so the results do not depend on the count."""
    cores = os.cpu_count() or 1
    limit = min(cores, CUDA_WORKERS) if device.startswith("cuda") else cores
    if jobs is None:
        text = paths.jobs_setting()
        if not text:
            return limit
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"GAC_LAB_JOBS must be a whole number of worker processes >= 1, got {text!r}; unset "
                             f"it to use the default")
        jobs, source = int(text), f"GAC_LAB_JOBS={text}"
    else:
        if jobs < 1:
            raise ValueError(f"--jobs must be a whole number of worker processes >= 1, got {jobs}")
        source = f"--jobs {jobs}"
    if jobs > limit:
        where = f"{CUDA_WORKERS} workers per CUDA device" if device.startswith("cuda") else f"{cores} cores"
        warnings.warn(f"{source} is more than this machine runs at once ({where}); using {limit}", RuntimeWarning,
                      stacklevel=2)
        return limit
    return jobs


def unit_tasks(units: list[cache.Unit], folder: Path, force: bool = False) -> tuple[dict[str, Any], list[Task]]:
    """(the cached results of ``units`` by unit name, read once each; the tasks that compute the others).

    Every missing unit is one task, after the tasks it waits for (``Unit.before``: a GRPO run's warm start, one task
    however many runs share it, so parallel workers only load it and two warm starts train side by side). ``force``
    reads nothing: every unit is computed.
    """
    distinct = {u.name: u for u in units}
    results = {} if force else {name: u.lookup(folder) for name, u in distinct.items()}
    results = {name: r for name, r in results.items() if r is not None}
    tasks: dict[str, Task] = {}
    for name, u in distinct.items():
        if name in results:
            continue
        for before in u.before:
            tasks.setdefault(before.name, before)
        tasks[name] = Task(name, cache.compute_unit, (u, str(folder)), u.cost, tuple(b.name for b in u.before), unit=u)
    return results, list(tasks.values())


Consumer = tuple[list[cache.Unit], Callable[[list[tuple[cache.Unit, Any]]], Any]]
"""Units and a function of their (unit, result) pairs, run in this process once they are done (a figure's plot)."""


def compute(units: list[cache.Unit], jobs: int | None = None, force: bool = False, folder: Path | None = None,
            consumers: dict[str, Consumer] | None = None, log=print, executor: Callable[[int], Executor] | None = None,
            progress: bool = False, name: str = "runs", device: str = "cpu") -> dict[str, Any]:
    """Every unit's result by name: cached ones read once each, the others computed on ``jobs`` workers of
    ``executor`` into the cache ``folder`` (default ``runtime.cache.CACHE_DIR``); ``consumers`` run here as soon as
    their units are done.

    Without an executor, a process connected to a Ray cluster (``runtime.cluster.current``: a Ray worker computing
    the full verdict's unit) sends the tasks to that cluster, ``jobs`` (default: its CPUs) at a time; elsewhere they
    go to local processes (``jobs`` default: ``default_jobs``). The log has a first line with the work to do, a line
    when a long task starts, and one per finished unit or consumer, each ending with the elapsed time and the seconds
    left by the cost estimates (``Progress``); ``progress`` also draws a tqdm bar on a terminal's stderr.
    """
    from runtime import cluster

    folder = cache.CACHE_DIR if folder is None else Path(folder)
    if executor is None and (connected := cluster.current()) is not None:
        executor, jobs = connected.executor, jobs or connected.cpus
    jobs = default_jobs(device=device) if jobs is None else jobs
    values, tasks = unit_tasks(units, folder, force)
    holder = {t.unit.name: t.name for t in tasks if t.unit is not None}
    for consumer, (mine, then) in (consumers or {}).items():
        tasks.append(Task(consumer, _consume, (then, mine, values), PLOT_SECONDS,
                          tuple(dict.fromkeys(holder[u.name] for u in mine if u.name in holder)), here=True,
                          done=f"{consumer} done"))
    every = {u.name for u in units}
    log(f"[{name}] {len(every)} units, {len(values)} cached; {len(holder)} to compute: {len(tasks)} tasks on {jobs} "
        f"workers", flush=True)
    meter, count = Progress(tasks, jobs), 0
    bar = _progress_bar(meter, name) if progress else None
    say = log if bar is None else (lambda text, **_: bar.write(text))
    record = _timeline(paths.timeline_file(), name, meter)

    def started(task: Task) -> None:
        meter.started(task)
        record(task)
        if task.started is not None:
            say(f"[{name}] {task.started}", flush=True)

    def finished(task: Task, result: Any) -> None:
        nonlocal count
        meter.done(task)
        record(task)
        if bar is not None:
            bar.set_postfix_str(f"~{meter.eta_s():.0f} s left", refresh=False)
            bar.update(round(meter.done_cost) - bar.n)
        if task.unit is not None:
            values[task.unit.name] = result
            count += 1
            say(f"[{name} {count}/{len(holder)}] {task.unit.describe(result)} ({meter.line()})", flush=True)
        elif task.done is not None:
            say(f"[{name}] {task.done} ({meter.line()})", flush=True)

    try:
        run_tasks(tasks, jobs, finished, executor, on_start=started)
    finally:
        if bar is not None:
            bar.close()
    return values


def _timeline(file: Path | None, graph: str, meter: Progress) -> Callable[[Task], None]:
    """Called as a task starts and again as it is done: with a ``file`` (``GAC_LAB_TIMELINE``), the second call
    appends the row ``graph,task,cost,here,started_s,done_s`` (seconds on the progress line's clock), from which the
    cost estimates can be checked against the time each task took and the progress line replayed."""
    if file is None:
        return lambda task: None
    starts: dict[str, float] = {}

    def record(task: Task) -> None:
        now = meter.elapsed_s()
        if task.name not in starts:
            starts[task.name] = now
            return
        with open(file, "a", newline="") as out:
            csv.writer(out).writerow([graph, task.name, task.cost, int(task.here), f"{starts[task.name]:.3f}",
                                      f"{now:.3f}"])
    return record


PLOT_SECONDS = 3.0
"""Rough seconds of one consumer (a figure's plot: matplotlib, PNG and PDF): orders the tasks, never changes a
result."""


def _consume(then: Callable[[list], Any], units: list[cache.Unit], values: dict[str, Any]) -> Any:
    return then([(u, values[u.name]) for u in units])


def _progress_bar(progress: Progress, name: str):
    """A tqdm bar over the graph's estimated core-seconds (shown on a terminal only); the seconds left it shows are
    ``Progress.eta_s``'s (tqdm's own rate would count the tasks still running as no work)."""
    from tqdm import tqdm

    return tqdm(total=round(progress.total), unit="est. core-s", disable=None, dynamic_ncols=True, desc=f"[{name}]",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} est. core-s [{elapsed}{postfix}]")
