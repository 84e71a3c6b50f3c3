"""The run graph's scheduler (``run_tasks``, over ``graphlib``) and its default executor, a local process pool whose
workers end when the process that started it dies; ``experiments.cluster`` opens a Ray cluster as the other executor.

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
from typing import Any, Protocol

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
    (``process_pool``'s ProcessPoolExecutor; ``experiments.cluster.RayExecutor``)."""

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
    spec: Any = None
    """what the task stands for to whoever reads its result; in the run graph an ``experiments.llm.TaskSpec`` (a unit,
    a batch of runs, a warm start, a figure: the units it computes and their results); it stays in this process: a
    worker receives ``fn`` and ``args`` only"""


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
    marked ``here`` always runs here. A task that raises stops the rest: tasks not yet started are dropped and the
    error is raised here (a task already running in another worker ends with it). Only ``jobs`` tasks are handed
    to the pool at a time, so the order is this function's, not a queue's, and ``on_start(task)`` is called as a task
    starts (is handed to a worker, or runs here).

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
            while ready and (ready[0].here or len(running) < jobs):
                task = ready.pop(0)
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


class Progress:
    """How far a graph of tasks is, by the cost estimates (``Task.cost``): the estimated core-seconds of the tasks
    done, of all of them, and the seconds left (``eta_s``).

    The estimates are rough and a machine is faster or slower than the one they were measured on, so the seconds
    left are the estimated work left at the speed the finished tasks ran at (estimated core-seconds per second a
    worker spent on them, from ``started`` to ``done``), less the time the running tasks have already had, over the
    workers that still have work. Without start times (``done`` alone) the speed is the work done over the time
    elapsed, which early on, with one task finished and others half done beside it, reads up to ``jobs`` times too
    slow. Before anything is done: the estimate over ``jobs`` workers. Tasks that run here (plots) count as nothing.
    """

    def __init__(self, tasks: list[Task], jobs: int, clock: Callable[[], float] = time.perf_counter):
        self.total = sum(t.cost for t in tasks if not t.here)
        self.done_cost = 0.0
        self.jobs = max(1, jobs)
        self.clock = clock
        self.start = clock()
        self.left = sum(not t.here for t in tasks)
        self.running: dict[str, tuple[float, float]] = {}  # name -> (start time, estimated cost)
        self.worker_s_done = 0.0

    def started(self, task: Task) -> None:
        if not task.here:
            self.running[task.name] = (self.clock(), task.cost)

    def done(self, task: Task) -> None:
        if not task.here:
            self.done_cost += task.cost
            self.left -= 1
            if task.name in self.running:
                self.worker_s_done += self.clock() - self.running.pop(task.name)[0]

    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def eta_s(self) -> float:
        """Seconds left: (estimated work left / speed − the running tasks' time so far, each at most its own
        estimate at that speed) / the workers still busy; work left / jobs before anything is done."""
        left = max(0.0, self.total - self.done_cost)
        if self.done_cost <= 0:
            return left / self.jobs
        if self.worker_s_done <= 0:  # no start times: the speed of the whole elapsed time
            return left * self.elapsed_s() / self.done_cost
        speed = self.done_cost / self.worker_s_done
        now = self.clock()
        had = sum(min(now - t0, cost / speed) for t0, cost in self.running.values())
        return max(0.0, left / speed - had) / max(1, min(self.jobs, self.left))

    def line(self) -> str:
        """``"E s elapsed, P% of the estimated work, ~L s left"``: the end of a progress log line."""
        share = self.done_cost / self.total if self.total > 0 else 1.0
        return f"{self.elapsed_s():.0f} s elapsed, {share:.0%} of the estimated work, ~{self.eta_s():.0f} s left"
