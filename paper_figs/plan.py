"""How ``python -m paper_figs`` spreads its work over the cores: one graph of tasks for all the figures asked for.

On the CPU with two or more workers, every GRPO run the figures read (each LLM figure's ``llm_runs``, one task
per distinct run however many figures share it), the warm starts those runs begin from, and every figure itself
are the tasks of one ``experiments.pool.run_tasks`` call. A run waits for its warm start, a figure for its runs;
the tasks that may start go longest-chain first. So the two warm starts train side by side, the toy figures fill
the cores while runs compute, and no core waits on the tail of one figure's runs before the next figure begins.

Each task does what the one-figure-at-a-time loop did, in a worker process: a run through the same cached
``run_records`` (one thread, as always); a figure through ``make_figure`` with torch on one thread (the figures'
CSVs do not depend on it: checked for every figure, see benchmarks/README.md) and every run it reads already in
the cache. A run the plan missed would be computed inside the figure's task, one at a time: slower, same numbers.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from experiments.llm import Run, in_worker, run_name, run_tasks_for, worker_folders
from experiments.pool import Task, run_tasks
from sim.record import publish_together

FIGURE_SECONDS = {"fig1_cosine": 8.0, "fig2_cosine_vs_staleness": 20.0, "fig3_divergence": 4.0,
                  "fig4_stability_region": 2.0, "fig5_llm_grpo": 2.0, "fig6_ablation": 11.0, "fig7_bound": 9.0,
                  "fig8_tuned": 30.0, "fig9_early_warning": 2.0, "figs1_bandit_snr": 9.0, "figs2_llm_signature": 3.0}
"""Rough seconds of each figure's own work on one core (quick profile, its GRPO runs cached): they order the
tasks, they cannot change a result."""


def make_figure(name: str, args) -> list[Path]:
    """Run figure ``name`` into a temp folder inside ``args.out``, then publish its files together.

    A figure that fails or is killed leaves the previous outputs as they were (and no half of a new set).
    """
    args.out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=args.out, prefix=f".{name}."))
    try:
        importlib.import_module(f"paper_figs.{name}").main(args.profile, staging, args.device)
        return publish_together(staging, args.out, name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def figure_runs(name: str, profile: str, device: str) -> list[Run]:
    """The GRPO runs figure ``name`` reads (none for a toy figure)."""
    llm_runs = getattr(importlib.import_module(f"paper_figs.{name}"), "llm_runs", None)
    return [] if llm_runs is None else llm_runs(profile, device)


def _figure_task(name: str, profile: str, device: str, out: str) -> list[str]:
    """A figure in a worker: one torch thread; a run it still lacks is computed here (no pool inside a pool),
    with a warning (``GAC_LAB_PLANNED``: the figure's ``llm_runs`` missed it). Plain arguments only: the
    command line's ``FigureArgs`` lives in ``__main__`` under ``python -m paper_figs``, which a worker cannot
    unpickle."""
    os.environ.update(GAC_LAB_JOBS="1", GAC_LAB_PLANNED="1")
    torch.set_num_threads(1)
    args = SimpleNamespace(profile=profile, device=device, out=Path(out))
    return [str(p) for p in make_figure(name, args)]


def tasks_for(names: tuple[str, ...], args) -> tuple[list[Task], dict[str, Run]]:
    """(every task of the figures ``names``: warm starts, the missing runs, the figures; every run they read,
    cached ones included, by task name)."""
    reads = {name: {run_name(r.args): r for r in figure_runs(name, args.profile, args.device)} for name in names}
    every = {key: run for runs in reads.values() for key, run in runs.items()}
    _, run_tasks_ = run_tasks_for(list(every.values()))
    missing = {t.name for t in run_tasks_}
    figures = [Task(f"figure {name}", in_worker,
                    (_figure_task, *worker_folders(), name, args.profile, args.device, str(args.out)),
                    FIGURE_SECONDS.get(name, 10.0), tuple(key for key in reads[name] if key in missing))
               for name in names]
    return run_tasks_ + figures, every


def make_figures(names: tuple[str, ...], args, jobs: int, log=print) -> None:
    """Every figure of ``names`` and the runs they read, as one graph of tasks on ``jobs`` worker processes."""
    tasks, every = tasks_for(names, args)
    runs = [t for t in tasks if t.name in every]
    warm = len(tasks) - len(runs) - len(names)
    log(f"[paper_figs] {len(names)} figures, {len(every)} GRPO runs ({len(every) - len(runs)} cached), "
        f"{warm} warm starts to train: {len(tasks)} tasks on {jobs} workers", flush=True)
    start, done = time.perf_counter(), {"runs": 0}

    def report(task: Task, result) -> None:
        elapsed = time.perf_counter() - start
        if task.name.startswith("figure "):
            name = task.name.removeprefix("figure ")
            log(f"[paper_figs] {name} done at {elapsed:.0f} s -> {args.out}/{name}.*", flush=True)
        elif task.name in every:
            done["runs"] += 1
            a = every[task.name].args
            log(f"[paper_figs run {done['runs']}/{len(runs)}] {a.size} {a.digits}-digit {a.label} s={a.staleness} "
                f"lr={a.lr:g} seed={a.seed}: final acc {result['summary']['final_accuracy']:.3f} "
                f"({elapsed:.0f} s elapsed)", flush=True)
        else:
            w = task.args[-1]  # a warm start: in_worker(_warm_start, cache, runs, args)
            log(f"[paper_figs] warm start {w.size} {w.digits}-digit trained ({elapsed:.0f} s elapsed)", flush=True)

    run_tasks(tasks, jobs, report)
