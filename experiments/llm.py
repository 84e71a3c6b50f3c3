"""The LLM scale: the sweep behind fig5 (and the signature, tuning and verdict runs' plumbing): cached GRPO runs.

fig1's and fig3's LLM panels run on the reproducible testbed instead (experiments/llm_figures.py).

``sweep(profile)`` lists the runs: naive async on a step size × staleness grid (the regime map),
the cosine-vs-staleness line at the main step size, GAC at high staleness and the controls that
separate a staleness fix from damping (sync + GAC; naive async at a smaller step size, which the
grid holds), the peers TIS, M2PO and BAPO, and naive async with the clip ratio taken against the behaviour
policy (``ratio_to="behaviour"``, the CLI default). The sweep's naive/GAC runs use ``ratio_to="proximal"``:
the learner recomputes the old log-probs, i.e. stale data used as if fresh (the registry's "naive"),
which TIS then corrects. GAC also runs at the small step size, where naive async's cosine is highest.
Every run is a cached unit (``run_unit``), so the figures share them; missing runs are computed in a process
pool. The ``*_rows`` functions return per-step records (the ``sim.schema``
columns); ``summary_rows`` and ``aggregate`` reduce them per run and per setting.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from experiments import cache, cluster
from experiments.aggregate import measured, seed_std
from experiments.pool import Progress, Task, run_tasks
from sim import paths
from sim.llm.train import Args, run_records
from sim.llm.warmstart import warm_start, warm_start_path
from sim.schema import nonfinite
from sim.stabilizers import NO_CONTROL

# What each profile runs. quick: the "small" 0.6M model (the CPU time of every quick figure: benchmarks/README.md,
# "figure pipeline").
PROFILES = {
    "quick": dict(base=dict(size="small", steps=80, prompts_per_step=16, group_size=8, minibatches=2,
                            eval_every=20, eval_problems=256, ratio_to="proximal"),
                  seeds=(0, 1, 2), main_lr=3e-4, small_lrs=(1e-4, 3e-5),
                  # step size -> staleness values of the regime map (the line adds s = 2, 8 at 3e-4); at the
                  # small-step edge 0 and 16 suffice, and at 1e-3 sync alone (it collapses there): 48 runs
                  grid={3e-5: (0, 16), 1e-4: (0, 4, 16), 3e-4: (0, 4, 16), 1e-3: (0,)},
                  line_staleness=(0, 2, 4, 8, 16), high_staleness=16, gac_small_lrs=(3e-5,)),
    "full": dict(base=dict(size="cpu", steps=300, prompts_per_step=16, group_size=8, minibatches=2,
                           eval_every=20, eval_problems=512, ratio_to="proximal"),
                 seeds=(0, 1, 2, 3, 4), main_lr=3e-4, small_lrs=(1e-4, 3e-5),
                 grid={lr: (0, 2, 4, 8, 16) for lr in (3e-5, 1e-4, 3e-4, 1e-3)},
                 line_staleness=(0, 2, 4, 8, 16), high_staleness=16, gac_small_lrs=(1e-4, 3e-5),
                 sync_gac_small_lrs=(1e-4, 3e-5)),
    # gpu: the 25M-parameter model, 64 prompts × 16 samples, 300 steps, 3 seeds of the key cells (sync, naive
    # async, GAC, TIS, M2PO at s = 16 and the controls), several runs at once on one GPU (sized by
    # estimate; not yet run on a device).
    "gpu": dict(base=dict(size="gpu", steps=300, prompts_per_step=64, group_size=16, minibatches=2,
                          eval_every=50, eval_problems=512, ratio_to="proximal"),
                seeds=(0, 1, 2), main_lr=3e-4, small_lrs=(1e-4,), grid={3e-4: (0, 16)},
                line_staleness=(0, 16), high_staleness=16),
}
# Args that cannot change a run's numbers; threads stays in the key: it changes the last bits of long sums.
KEY_EXCLUDE = ("progress", "out_dir", "resume", "checkpoint_every", "overwrite", "allow_code_change")


@dataclass(frozen=True)
class Run:
    """One run of the sweep and the roles it plays in the figures."""

    args: Args
    roles: tuple[str, ...]


def sweep(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Run]:
    """The runs of ``profile`` (deduplicated: a run in several roles is listed once); a dry run keeps one seed and
    shrinks each run with ``dry_run_args``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    p = PROFILES[profile]
    base = Args(**p["base"], device=device, progress=False, on_nonfinite="mark")
    if profile == "full" and device.startswith("cuda"):
        base = replace(base, size="gpu")  # the 25M-parameter model on one GPU
    seeds = p["seeds"][:1] if dry_run else p["seeds"]
    runs: dict[tuple, list[str]] = {}

    def add(role, method, staleness, lr, ratio_to="proximal"):
        for seed in seeds:
            runs.setdefault((method, staleness, lr, seed, ratio_to), []).append(role)

    high, main = p["high_staleness"], p["main_lr"]
    for lr, stalenesses in p["grid"].items():
        for s in stalenesses:
            add("regime", "naive", s, lr)
    for s in p["line_staleness"]:
        add("cosine", "naive", s, main)
    for method in ("naive", "gac", "tis", "m2po", "bapo"):
        add("methods", method, high, main)
    add("methods", "naive", 0, main)
    add("control_sync_gac", "gac", 0, main)
    for lr in p["small_lrs"]:
        add("control_small_step", "naive", high, lr)
    add("behaviour_ratio", "naive", high, main, ratio_to="behaviour")
    for lr in p.get("gac_small_lrs", ()):
        add("gac_small_step", "gac", high, lr)
    for lr in p.get("sync_gac_small_lrs", ()):
        add("control_sync_gac", "gac", 0, lr)
    shrink = dry_run_args if dry_run else (lambda args: args)
    return [Run(shrink(replace(base, method=m, staleness=s, lr=lr, seed=seed, ratio_to=ratio)),
                tuple(dict.fromkeys(roles)))
            for (m, s, lr, seed, ratio), roles in runs.items()]


_print_now = functools.partial(print, flush=True)


def dry_run_args(args: Args) -> Args:
    """``args`` shrunk to a smoke test of its command (``python -m paper_figs ... --dry-run``): the tiny model on
    1-digit sums (its warm start stops after 25 supervised steps), 2 RL steps, 4 × 4 samples, on the CPU."""
    return replace(args, size="tiny", model=None, digits=1, steps=2, prompts_per_step=4, group_size=4,
                   minibatches=min(args.minibatches, 2), eval_every=1, eval_problems=8, snr_every=1,
                   warm_target=0.0, warm_ceiling=1.0, warm_max_steps=25, device="cpu")


RUN_SOURCE_DIRS = ("gac", "sim")
"""The code a GRPO run executes: its cache key holds a fingerprint of these folders, so editing them recomputes."""


def run_key(args: Args) -> dict:
    """The run's cache key: every argument that can change its numbers, and the fingerprint of its code."""
    key = {k: v for k, v in asdict(args).items() if k not in KEY_EXCLUDE}
    return {**key, "code": cache.code_fingerprint(RUN_SOURCE_DIRS)}


def compute_run(args: Args) -> dict:
    """One run's {"records", "summary"}: what the cache stores for a GRPO run."""
    start = time.perf_counter()
    result = run_records(args, log=lambda *a: None)
    result["summary"].update(wall_s=time.perf_counter() - start)
    return result


def warm_start_name(args: Args) -> str | None:
    """The task name of the warm start a run of ``args`` waits for (None when it starts from ``--model``)."""
    config = args.warm_start()
    return None if config is None else f"warm start {config}"


GRPO_KIND = "llm_grpo"
"""The kind of a GRPO run's unit: the prefix of its cache files."""


@dataclass(frozen=True, eq=False)
class RunUnit(cache.Unit):
    """A GRPO run as a unit: kind GRPO_KIND, keyed by ``run_key``, its ``spec`` the ``Run`` (typed: readers tell a GRPO
    unit by its class, not by its kind's string)."""

    spec: Run | None = None


def run_unit(run: Run) -> RunUnit:
    """A GRPO run as a cacheable unit (kind "llm_grpo", keyed by ``run_key``), after its warm start."""
    after = warm_start_name(run.args)
    return RunUnit(GRPO_KIND, run_key(run.args), compute_run, (run.args,), spec=run,
                   after=() if after is None else (after,), cost=estimated_seconds(run.args))


class TaskSpec(Protocol):
    """What a task of the run graph stands for (its ``Task.spec``), to the code that receives its result: a unit
    (``cache.Unit``), a ``Batch`` of GRPO runs, a ``WarmStart``, or a figure (``paper_figs.driver.Figure``)."""

    @property
    def units(self) -> tuple[cache.Unit, ...]:
        """The units whose results the task computes (none for a warm start or a figure)."""

    def unit_results(self, result: Any) -> list[tuple[cache.Unit, Any]]:
        """(unit, its result) for each of ``units``, given the task's result."""

    def done_line(self, where: str, elapsed_s: float) -> str | None:
        """The line that reports the task done (None: its units are reported one by one)."""


@dataclass(frozen=True)
class WarmStart:
    """What a warm-start task stands for (its ``Task.spec``): the warm start of runs like ``args``."""

    args: Args
    units = ()

    def unit_results(self, result: Any) -> list[tuple[cache.Unit, Any]]:
        return []

    def done_line(self, where: str, elapsed_s: float) -> str:
        return f"warm start {self.args.size} {self.args.digits}-digit trained ({where})"


def start_line(task: Task) -> str | None:
    """The line that says a task has started, for a warm start to train (the one task that runs for minutes before
    anything else can be reported); None for the others, which are reported as they finish."""
    if not isinstance(task.spec, WarmStart) or task.cost <= WARM_START_FOUND_SECONDS:
        return None
    a = task.spec.args
    return f"training the warm start {a.size} {a.digits}-digit, warm seed {a.warm_seed} (estimate {task.cost:.0f} s)"


WARM_START_FOUND_SECONDS = 1.0
"""The cost of a warm-start task whose checkpoint is already on disk (it only checks it): counted at the training
cost, the finished work would look far ahead of the time it took and the seconds left read too few."""


def warm_start_task(args: Args) -> Task:
    """The task that trains (or finds) the warm start of ``args``, named by ``warm_start_name``; its cost is the
    training's estimate, or ``WARM_START_FOUND_SECONDS`` when the checkpoint is already saved."""
    config = args.warm_start()
    found = warm_start_path(config).exists()
    cost = WARM_START_FOUND_SECONDS if found else WARM_START_SECONDS.get(config.size, 40.0)
    return Task(warm_start_name(args), _warm_start, (args,), cost, spec=WarmStart(args))


def _warm_start(args: Args) -> None:
    """Train and cache the warm start of ``args`` unless it is cached (its runs then only load it)."""
    import torch

    torch.set_num_threads(args.threads)
    warm_start(args.warm_start(), log=lambda *a: None)


GIB = 1 << 30
MEASURED_PEAK_GIB = {"tiny": 0.48, "small": 0.58, "cpu": 0.68, "gpu": 4.49}
"""Peak RSS of one worker process computing one GRPO run on the CPU, one thread, torch and transformers loaded
(``resource.getrusage`` ru_maxrss after ``run_records``): tiny 1-digit 8 × 8 samples; small 2-digit 16 × 8 (the
quick profile's batch); cpu 16 × 8; gpu (25M parameters) 2-digit 64 × 16, the gpu profile's batch, one step on the
CPU. On a CUDA device the tensors live on the GPU, so the host figure is an upper bound there; GPU memory per
worker is not measured."""
WORKER_MEMORY = {"tiny": 0.75 * GIB, "small": 1 * GIB, "cpu": 1 * GIB, "gpu": 6 * GIB}
"""Memory a worker may take, by model size: MEASURED_PEAK_GIB with about a third to a half more for room. It holds
for a task of ``batch_limit`` runs too: on the CPU only tiny runs are batched, and a worker training 8 of fig8's tiny
runs peaks little above one run, inside the tiny budget."""
CUDA_WORKERS = 4
"""Most worker processes that share one CUDA device: each trains a batch of up to CUDA_BATCH_RUNS runs, so a few
processes keep the device busy while one samples on the host; more would add CUDA contexts, not throughput (a
judgement, not measured on a device)."""


def largest_size(units: list[cache.Unit]) -> str:
    """The largest GRPO model size among ``units`` ("small" when there is none): it sets the memory per worker."""
    sizes = [u.spec.args.size for u in units if isinstance(u, RunUnit)]
    return max(sizes, key=lambda s: WORKER_MEMORY.get(s, 0), default="small")


def available_memory() -> int:
    """Bytes of memory available to new processes (Linux MemAvailable; free pages elsewhere)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40  # unknown: let the core count decide


def default_jobs(size: str = "small", jobs: int | None = None, device: str = "cpu") -> int:
    """Worker processes that compute at once: ``max(1, min(cores, available memory // WORKER_MEMORY[size]))``,
    ``size`` being the largest model the runs use. Each worker runs one task (a unit, or a batch of tiny runs) on
    one thread, so one per core keeps the cores busy, and the memory bound keeps them out of swap. With cores = 16
    and 128 GiB available: 16 workers of every size (gpu: 128 GiB / 6 GiB = 21 > 16); 5 gpu-size ones if only 30 GiB
    are free.

    On a CUDA ``device`` the workers share the GPU, each with a batch of runs: at most CUDA_WORKERS of them (the
    host's cores and memory bound them as on the CPU).

    ``jobs`` (``--jobs``), else ``GAC_LAB_JOBS`` (read, never set), overrides it up to that limit: more is warned
    about and capped; a value that is not a whole number ≥ 1 is a one-line ValueError. Every run is seeded on its
    own, so the results do not depend on the count.
    """
    cores, memory = os.cpu_count() or 1, available_memory()
    per_worker = WORKER_MEMORY.get(size, max(WORKER_MEMORY.values()))
    limit = max(1, min(cores, memory // per_worker, CUDA_WORKERS if device.startswith("cuda") else cores))
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
        on_device = f", {CUDA_WORKERS} workers per CUDA device" if device.startswith("cuda") else ""
        warnings.warn(f"{source} is more than this machine runs at once ({cores} cores, {memory / GIB:.1f} GiB "
                      f"available at {per_worker / GIB:.1f} GiB per {size} worker{on_device}); using {limit}",
                      RuntimeWarning, stacklevel=2)
        return limit
    return jobs


STEP_SECONDS = {"tiny": 0.05, "small": 0.18, "cpu": 0.4, "gpu": 0.5}
"""Rough CPU seconds per RL step by model size, for 2-digit sums, 16 × 8 samples, one update per step, the
behaviour-policy ratio and no direction control (small: read off ``COST_CALIBRATION``; tiny: off 40-step
runs); ``estimated_seconds`` scales them to a run. They order the work of ``run_tasks`` and give the progress
line's seconds left; a wrong value costs time, not results."""
COST_CALIBRATION = (
    # (what was timed, its Args overrides on the small model, CPU-s): ``experiments.llm.compute_run`` on one
    # thread, idle, one run of each configuration the quick figures run
    ("testbed sync, 60 steps", dict(steps=60, eval_problems=1000, method="sync"), 10.9),
    ("testbed naive s=16", dict(steps=60, eval_problems=1000, staleness=16), 10.7),
    ("testbed gac s=16", dict(steps=60, eval_problems=1000, staleness=16, method="gac"), 12.2),
    ("fig5 naive, 2 updates, proximal ratio", dict(steps=80, minibatches=2, ratio_to="proximal", staleness=16), 17.2),
    ("fig5 gac, 2 updates, proximal ratio", dict(steps=80, minibatches=2, ratio_to="proximal", method="gac",
                                                 staleness=16), 21.6),
    ("fig5 tis, 2 updates", dict(steps=80, minibatches=2, ratio_to="proximal", method="tis", staleness=16), 17.0),
    ("fig5 naive, 2 updates, behaviour ratio", dict(steps=80, minibatches=2, staleness=16), 14.9),
    ("fig10 naive, 8 × 8 samples, 40 steps", dict(steps=40, prompts_per_step=8, staleness=16), 3.95),
    ("fig10 gac, 8 × 8 samples", dict(steps=40, prompts_per_step=8, method="gac", staleness=16), 4.95),
    ("figs2 3 digits, 200 steps", dict(steps=200, digits=3, staleness=16), 38.6),
    ("figs2 3 digits, 2 updates", dict(steps=200, digits=3, minibatches=2, staleness=16), 42.3),
    ("figs2 3 digits, proximal ratio", dict(steps=200, digits=3, ratio_to="proximal", staleness=16), 46.9),
)
"""What ``estimated_seconds``'s factors were read off (tests/llm/test_experiments.py checks it stays within 25 %)."""
WARM_START_SECONDS = {"tiny": 5.0, "small": 90.0}
"""Rough seconds to train a warm start; the same use as STEP_SECONDS, and the progress line's seconds left
(``experiments.pool.Progress``) start from them. small: the quick pipeline's plateau-trained warm starts, timed beside
``COST_CALIBRATION``'s runs. Too low a value makes the first seconds left of a run too many: the speed read off a
finished warm start is then too slow."""


def estimated_seconds(args: Args) -> float:
    """A rough cost of the run of ``args`` on one core (orders the work; never changes a number): ``STEP_SECONDS`` per
    step, scaled by the samples per step, the sum's width (longer sequences, × (digits + 12) / 14: most of a small
    model's step is per-op overhead), the extra forward of a proximal ratio or TIS (× 1.15), each further update per
    step (+10 %) and a direction control's cosines and projections (+12 % per update); see
    ``COST_CALIBRATION``."""
    samples = args.prompts_per_step * args.group_size / 128
    width = (args.digits + 12) / 14
    axes = args.axes
    proximal = 1.15 if args.ratio_to == "proximal" or axes.objective == "tis" else 1.0
    updates = 1 + 0.1 * (args.minibatches - 1)
    control = 1 + 0.12 * args.minibatches if axes.direction != NO_CONTROL else 1.0
    return args.steps * STEP_SECONDS.get(args.size, 1.0) * samples * width * proximal * updates * control


def units_of(task: Task) -> tuple[cache.Unit, ...]:
    """The units whose results ``task`` computes (its ``TaskSpec``'s): its unit, or none (a warm start, a figure)."""
    return task.spec.units


def run_name(args: Args) -> str:
    """The task name of a run: its unit's name (runs with the same key are one task)."""
    return run_unit(Run(args, ())).name


def unit_tasks(units: list[cache.Unit], folder: Path, force: bool = False) -> tuple[dict[str, Any], list[Task]]:
    """(the cached results of ``units`` by unit name, read once each; the tasks that compute the others).

    Every missing unit is one task, a GRPO run's after the warm start it waits for; and one task per warm start (so
    parallel workers only load it, and two warm starts train side by side). ``units_of(task)`` tells which units a
    task computes. ``force`` reads nothing: every unit is computed.
    """
    distinct = {u.name: u for u in units}
    results = {} if force else {name: u.lookup(folder) for name, u in distinct.items()}
    results = {name: r for name, r in results.items() if r is not None}
    missing = [u for name, u in distinct.items() if name not in results]
    tasks: dict[str, Task] = {}
    for u in missing:
        for after in u.after:  # a GRPO run's warm start
            tasks.setdefault(after, warm_start_task(u.spec.args))
        tasks[u.name] = Task(u.name, cache.compute_unit, (u, str(folder)), u.cost, u.after, spec=u)
    return results, list(tasks.values())


def results_of(runs: list[Run], device: str = "cpu", log=_print_now, jobs: int | None = None,
               name: str = "llm sweep") -> list[tuple[Run, dict]]:
    """Every run of ``runs`` with its result (cached; missing runs are computed ``jobs`` at a time, longest first,
    each after its warm start; see ``unit_tasks``). For the experiments' own command lines and the full verdict's
    protocol; the figures go through ``python -m paper_figs``, which computes every figure's runs in one graph.

    In a process connected to a Ray cluster (``experiments.cluster.current``: a Ray worker computing the full
    verdict's unit) the runs go to that cluster as tasks of their own, ``jobs`` (default: its CPUs) at a time;
    elsewhere to the local process pool (``default_jobs``)."""
    units = [run_unit(r) for r in runs]
    ray_cluster = cluster.current()
    if jobs is None:
        jobs = default_jobs(largest_size(units), device=device) if ray_cluster is None else ray_cluster.cpus
    results, tasks = unit_tasks(units, cache.CACHE_DIR)
    done, total, progress = len(results), len({u.name for u in units}), Progress(tasks, jobs)
    log(f"[{name}] {total} runs, {done} cached; {len(tasks)} tasks on {jobs} workers")

    def started(task: Task) -> None:
        progress.started(task)
        if (line := start_line(task)) is not None:
            log(f"[{name}] {line}")

    def report(task: Task, result) -> None:
        nonlocal done
        progress.done(task)
        for u, value in task.spec.unit_results(result):
            results[u.name] = value
            done += 1
            a = u.spec.args
            log(f"[{name} {done}/{total}] {a.run_method} s={a.staleness} lr={a.lr:g} seed={a.seed}: final acc "
                f"{value['summary']['final_accuracy']:.3f} ({progress.line()})")
        if (line := task.spec.done_line(progress.line(), progress.elapsed_s())) is not None:
            log(f"[{name}] {line}")

    run_tasks(tasks, jobs, report, None if ray_cluster is None else ray_cluster.executor, on_start=started)
    return [(r, results[u.name]) for r, u in zip(runs, units, strict=True)]


def sweep_results(profile: str, device: str = "cpu", log=_print_now, jobs: int | None = None) -> list[tuple[Run, dict]]:
    """Every run of the sweep with its result (``results_of``)."""
    return results_of(sweep(profile, device), device, log, jobs)


def _rows(results, role: str) -> list[dict]:
    """Per-step records of the runs in ``role``, plus one row per run at step = steps holding only the
    held-out accuracy of the final policy (``final_eval`` True), so accuracy curves reach the end."""
    rows = []
    for item, res in results:
        if role not in item.roles:
            continue
        rows += [dict(r, final_eval=False) for r in res["records"]]
        a = item.args
        if not any(nonfinite(r) for r in res["records"]):
            rows.append({"sim": "llm", "step": a.steps, "seed": a.seed, "method": a.run_method,
                         "staleness": a.staleness, "lr": a.lr, "ratio_to": a.ratio_to,
                         "accuracy": res["summary"]["final_accuracy"], "diverged": False, "final_eval": True})
    return rows


def with_run_means(rows: list[dict], key: str = "cos_prev") -> list[dict]:
    """``rows`` (per-step records of one configuration), each carrying its run's mean ``key`` after the first
    fifth of the steps (NaN if the run diverged), its mean over all steps before divergence, and whether it
    diverged: the per-run columns of fig1's toy panels (named run_mean_cos_prev whatever ``key`` is)."""
    for run_id in {(r["staleness"], r["seed"]) for r in rows}:
        run = [r for r in rows if (r["staleness"], r["seed"]) == run_id]
        warmup = max(r["step"] for r in run) // 5
        alive = [r[key] for r in run if not nonfinite(r) and measured(r.get(key))]
        late = [r[key] for r in run if r["step"] >= warmup and not nonfinite(r) and measured(r.get(key))]
        diverged = any(nonfinite(r) for r in run)
        for r in run:
            r.update(run_mean_cos_prev=sum(late) / len(late) if late and not diverged else float("nan"),
                     run_mean_cos_prev_alive=sum(alive) / len(alive) if alive else float("nan"),
                     run_diverged=diverged)
    return rows


def summary_rows(results) -> list[dict]:
    """One row per run: its setting, start/final held-out accuracy, mean cosine, failure flags."""
    rows = []
    for item, res in results:
        a, records = item.args, res["records"]
        ok = [r for r in records if not nonfinite(r)]
        start_acc = next((r["accuracy"] for r in ok if measured(r.get("accuracy"))), math.nan)
        half = [r["cos_prev"] for r in ok[: max(1, len(ok) // 2)] if measured(r.get("cos_prev"))]
        rows.append({
            "method": a.run_method, "staleness": a.staleness, "lr": a.lr, "ratio_to": a.ratio_to, "seed": a.seed,
            "roles": "+".join(item.roles),
            "start_accuracy": start_acc, "final_accuracy": res["summary"]["final_accuracy"],
            "delta_accuracy": res["summary"]["final_accuracy"] - start_acc,
            "cos_prev_first_half": float(np.mean(half)) if half else math.nan,
            "cos_prev_mean": float(np.mean([r["cos_prev"] for r in ok if measured(r.get("cos_prev"))] or [np.nan])),
            "kl_behaviour_mean": float(np.mean([r["kl_behaviour"] for r in ok] or [np.nan])),
            "clip_frac_mean": float(np.mean([r["clip_frac"] for r in ok] or [np.nan])),
            "diverged": any(nonfinite(r) for r in records), "wall_s": res["summary"].get("wall_s"),
            "device": a.device,
        })
    return rows


def aggregate(rows: list[dict], keys=("method", "staleness", "lr", "ratio_to")) -> list[dict]:
    """Mean and spread (sample std over seeds, and min..max) of final accuracy per setting."""
    out = []
    for _, runs in pd.DataFrame(rows).groupby(list(keys), sort=False):
        # numpy's means (pairwise sums), not pandas' (compensated sums): the table keeps its bits
        final, delta, cosine = (runs[c].to_numpy() for c in ("final_accuracy", "delta_accuracy", "cos_prev_mean"))
        out.append({**{k: rows[runs.index[0]][k] for k in keys}, "seeds": len(runs), "final_mean": float(final.mean()),
                    "final_std": seed_std(final), "final_min": float(final.min()), "final_max": float(final.max()),
                    "delta_mean": float(delta.mean()), "cos_prev_mean": float(cosine.mean()),
                    "diverged": int(runs["diverged"].sum()), "roles": runs["roles"].iloc[0]})
    return out
