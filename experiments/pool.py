"""The process pool that computes a graph of tasks in parallel (``run_tasks``, over ``graphlib``); its workers end
when the process that started it dies.

Without that, a ``kill -9`` of a parallel ``paper_figs`` run leaves the workers re-parented, computing on, then
idle at hundreds of MB each. Each worker runs a watchdog thread that polls its parent's pid (portable: no
signals or prctl, whose Linux death signal follows the creating thread rather than the process).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from typing import Any

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
    spec: Any = None
    """what the task stands for to whoever reads its result (a unit, a batch of runs, a warm start, a figure); it
    stays in this process: a worker receives ``fn`` and ``args`` only"""


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


def run_tasks(tasks: list[Task], jobs: int, on_done: Callable[[Task, Any], None] = lambda task, result: None
              ) -> dict[str, Any]:
    """Every task's result by name, ``jobs`` at a time, each once the tasks it waits for are done.

    ``graphlib`` keeps the bookkeeping (which tasks may start); among those, the one with the longest chain of
    work behind it goes first (critical-path list scheduling): with the estimated costs, the cores stay busy until
    the end and the last tasks are short. ``jobs`` ≤ 1 runs them here, one after another in the same order; a task
    marked ``here`` always runs here. A task that raises stops the rest: tasks not yet started are dropped and the
    error is raised here (a task already running in another worker ends with it). Only ``jobs`` tasks are handed
    to the pool at a time, so the order is this function's, not a queue's.
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
    if jobs <= 1 or sum(not t.here for t in tasks) <= 1:
        while ready:
            task = ready.pop(0)
            finish(task, task.fn(*task.args))
        return results
    pool = process_pool(jobs)
    running: dict[Future, Task] = {}
    try:
        while ready or running:
            while ready and (ready[0].here or len(running) < jobs):
                task = ready.pop(0)
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
