"""The LLM scale: the sweep behind fig5 (and the signature, tuning and verdict runs' plumbing): cached GRPO runs.

fig1's and fig3's LLM panels run on the reproducible testbed instead (experiments/llm_figures.py).

``sweep(profile)`` lists the runs: naive async on a step size × staleness grid (the regime map),
the cosine-vs-staleness line at the main step size, GAC at high staleness and the controls that
separate a staleness fix from damping (sync + GAC; naive async at a smaller step size, which the
grid holds), the peers TIS, M2PO and BAPO, and naive async with the clip ratio taken against the behaviour
policy (``ratio_to="behaviour"``, the CLI default). The sweep's naive/GAC runs use ``ratio_to="proximal"``:
the learner recomputes the old log-probs, i.e. stale data used as if fresh (the registry's "naive"),
which TIS then corrects. GAC also runs at the small step size, where naive async's cosine is highest.
Every run is a cached unit (``run_unit``), so the figures share them; missing runs are computed by
``runtime.graph.compute``. The ``*_rows`` functions return per-step records (the ``sim.schema``
columns); ``summary_rows`` and ``aggregate`` reduce them per run and per setting.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from experiments.aggregate import measured, seed_std
from experiments.profiles import lookup
from runtime import cache, graph
from runtime.graph import Task
from sim.llm.train import Args, run_records
from sim.llm.warmstart import warm_start, warm_start_path
from sim.schema import nonfinite
from sim.stabilizers import NO_CONTROL

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
    p = lookup("llm_sweep", profile)
    base = Args(**p.base, device=device, progress=False, on_nonfinite="mark")
    if profile == "full" and device.startswith("cuda"):
        base = replace(base, size="gpu")  # the 25M-parameter model on one GPU
    seeds = p.seeds[:1] if dry_run else p.seeds
    runs: dict[tuple, list[str]] = {}

    def add(role, method, staleness, lr, ratio_to="proximal"):
        for seed in seeds:
            runs.setdefault((method, staleness, lr, seed, ratio_to), []).append(role)

    high, main = p.high_staleness, p.main_lr
    for lr, stalenesses in p.grid.items():
        for s in stalenesses:
            add("regime", "naive", s, lr)
    for s in p.line_staleness:
        add("cosine", "naive", s, main)
    for method in ("naive", "gac", "tis", "m2po", "bapo"):
        add("methods", method, high, main)
    add("methods", "naive", 0, main)
    add("control_sync_gac", "gac", 0, main)
    for lr in p.small_lrs:
        add("control_small_step", "naive", high, lr)
    add("behaviour_ratio", "naive", high, main, ratio_to="behaviour")
    for lr in p.gac_small_lrs:
        add("gac_small_step", "gac", high, lr)
    for lr in p.sync_gac_small_lrs:
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


WARM_START_FOUND_SECONDS = 1.0
"""The cost of a warm-start task whose checkpoint is already on disk (it only checks it): counted at the training
cost, the finished work would look far ahead of the time it took and the seconds left read too few."""


def warm_start_task(args: Args) -> Task:
    """The task that trains (or finds) the warm start of ``args``, named by ``warm_start_name``; its cost is the
    training's estimate, or ``WARM_START_FOUND_SECONDS`` when the checkpoint is already saved. A warm start to train
    says so as it starts (it runs for minutes before anything else can be reported)."""
    config = args.warm_start()
    what = f"warm start {args.size} {args.digits}-digit, warm seed {args.warm_seed}"
    if warm_start_path(config).exists():
        return Task(warm_start_name(args), _warm_start, (args,), WARM_START_FOUND_SECONDS, done=f"{what} found")
    cost = WARM_START_SECONDS.get(config.size, 40.0)
    return Task(warm_start_name(args), _warm_start, (args,), cost,
                started=f"training the {what} (estimate {cost:.0f} s)", done=f"{what} trained")


GRPO_KIND = "llm_grpo"
"""The kind of a GRPO run's unit: the prefix of its cache files."""


@dataclass(frozen=True, eq=False)
class RunUnit(cache.Unit):
    """A GRPO run as a unit: kind GRPO_KIND, keyed by ``run_key``, its ``spec`` the ``Run`` (typed: readers tell a GRPO
    unit by its class, not by its kind's string)."""

    spec: Run | None = None

    def describe(self, result: dict) -> str:
        a = self.spec.args
        return (f"{a.size} {a.digits}-digit {a.run_method} s={a.staleness} lr={a.lr:g} seed={a.seed}: final acc "
                f"{result['summary']['final_accuracy']:.3f}")


def run_unit(run: Run) -> RunUnit:
    """A GRPO run as a cacheable unit (kind "llm_grpo", keyed by ``run_key``), after its warm start."""
    before = () if run.args.warm_start() is None else (warm_start_task(run.args),)
    return RunUnit(GRPO_KIND, run_key(run.args), compute_run, (run.args,), spec=run, before=before,
                   cost=estimated_seconds(run.args))


def _warm_start(args: Args) -> None:
    """Train and cache the warm start of ``args`` unless it is cached (its runs then only load it)."""
    import torch

    torch.set_num_threads(args.threads)
    warm_start(args.warm_start(), log=lambda *a: None)


STEP_SECONDS = {"tiny": 0.045, "small": 0.24, "cpu": 0.4, "gpu": 0.5}
"""Rough CPU seconds per RL step by model size, for 2-digit sums, 16 × 8 samples, one update per step, the
behaviour-policy ratio and no direction control; ``estimated_seconds`` scales them to a run. They order the work of
``runtime.graph.run_tasks`` and give the progress line's seconds left; a wrong value costs time, not results."""
WARM_START_SECONDS = {"tiny": 7.5, "small": 105.0}
"""Rough seconds to train a warm start; the same use as STEP_SECONDS. Too low a value makes the first seconds left
of a run too many: the speed read off a finished warm start is then too slow. A warm start that misses its acceptance
range is retrained (up to ``warm_attempts`` times), so one seed can take a multiple of another: the value is one
attempt, the usual case."""


def estimated_seconds(args: Args) -> float:
    """A rough cost of the run of ``args`` on one core (orders the work; never changes a number): ``STEP_SECONDS`` per
    step, scaled by the samples per step, the sum's width (× (digits + 12) / 14: most of a small model's step is
    per-op overhead), the extra forward of a proximal ratio or TIS (× 1.15), each further update per step (+10 %) and
    a direction control's cosines and projections (+12 % per update)."""
    samples = args.prompts_per_step * args.group_size / 128
    width = (args.digits + 12) / 14
    axes = args.axes
    proximal = 1.15 if args.ratio_to == "proximal" or axes.objective == "tis" else 1.0
    updates = 1 + 0.1 * (args.minibatches - 1)
    control = 1 + 0.12 * args.minibatches if axes.direction != NO_CONTROL else 1.0
    return args.steps * STEP_SECONDS.get(args.size, 1.0) * samples * width * proximal * updates * control


def results_of(runs: list[Run], device: str = "cpu", log=_print_now, jobs: int | None = None,
               name: str = "llm sweep") -> list[tuple[Run, dict]]:
    """Every run of ``runs`` with its result, through the cache (``runtime.graph.compute``: missing runs computed
    ``jobs`` at a time, longest first, each after its warm start)."""
    units = [run_unit(r) for r in runs]
    values = graph.compute(units, jobs, log=lambda text, **_: log(text), name=name, device=device)
    return [(r, values[u.name]) for r, u in zip(runs, units, strict=True)]


def summary_rows(results) -> list[dict]:
    """One row per run: its setting, start/final held-out accuracy, mean cosine, failure flags (``nonfinite``,
    ``collapsed``)."""
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
            "nonfinite": any(nonfinite(r) for r in records), "collapsed": bool(res["summary"].get("collapsed")),
            "wall_s": res["summary"].get("wall_s"),
            "device": a.device, "size": a.size, "steps": a.steps,
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
                    **{failure: int(runs[failure].astype(bool).sum()) for failure in ("nonfinite", "collapsed")
                       if failure in runs},
                    "roles": runs["roles"].iloc[0]})
    return out
