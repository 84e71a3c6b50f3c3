"""The stale-aligned signature at LLM scale (figs2_llm_signature) and the GAC table where it exists.

``sweep(profile)`` lists GRPO runs: a base configuration and one factor varied at a time (``FACTORS``), each
at several staleness values and seeds. ``run_row`` reduces a run to one row (every cosine granularity, the
SNR probe, accuracy, KL). ``gac_runs``/``gac_table`` compare GAC with naive async, the peers and the controls
at the configuration with the largest async − sync gap. Every run goes through ``experiments.llm``'s cache.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
import tyro

from experiments.profiles import Signature, lookup
from runtime.cli import choice, folder, parse
from runtime.files import check_output_files

if TYPE_CHECKING:
    from experiments.llm import Run
    from sim.llm.train import Args

# the trainer, the run graph and scipy are imported where they run (--help answers without them)

# The base: one optimizer update per RL step, behaviour-policy clip ratio, no gradient-norm clipping, 3-digit
# sums, the 0.6M "small" model (the leads of the issue: where a stale-aligned signature could show on a CPU).
BASE = dict(size="small", digits=3, prompts_per_step=16, group_size=8, minibatches=1, ratio_to="behaviour",
            max_grad_norm=math.inf, lr=3e-4, steps=200, eval_every=20, eval_problems=256, snr_every=10)
# factor -> its non-base levels (name, overrides of BASE); configurations are "base" and "factor=level".
FACTORS = {
    "batch": {"64x8": dict(prompts_per_step=64), "64x16": dict(prompts_per_step=64, group_size=16)},
    "updates": {"2": dict(minibatches=2), "4": dict(minibatches=4)},
    "ratio": {"proximal": dict(ratio_to="proximal")},
    "clip": {"1.0": dict(max_grad_norm=1.0)},
    "digits": {"2": dict(digits=2)},
    "lr": {"1e-4": dict(lr=1e-4)},
}
GRANULARITIES = ("cos_prev", "cos_prev_step", "cos_update")
"""The cosine granularities: consecutive optimizer updates' raw gradients, RL steps' summed gradients, Δθ."""


def overrides(config: str) -> dict:
    """The overrides of BASE that make ``config`` ("base" or "factor=level"); ValueError if unknown."""
    if config == "base":
        return {}
    factor, _, level = config.partition("=")
    if level not in FACTORS.get(factor, {}):
        known = ", ".join(["base"] + [f"{f}={lv}" for f, levels in FACTORS.items() for lv in levels])
        raise ValueError(f"unknown configuration {config!r}; choose from {known}")
    return FACTORS[factor][level]


def config_args(config: str, profile_base: dict | None = None, device: str = "cpu", **changes) -> Args:
    """The Args of ``config`` (on top of BASE and the profile's base), with ``changes`` (method, staleness...)."""
    from sim.llm.train import Args

    settings = {**BASE, **(profile_base or {}), **overrides(config), **changes}
    return Args(**settings, device=device, progress=False, on_nonfinite="mark")


def check_profile(profile: str, device: str, dry_run: bool = False) -> Signature:
    """The profile's settings; one-line ValueError for an unknown profile or gpu without a CUDA device (unless it
    is a dry run, which runs on the CPU)."""
    p = lookup("signature", profile)
    if profile == "gpu" and not device.startswith("cuda") and not dry_run:
        raise ValueError("profile gpu needs --device cuda (the 25M model); use quick or full on the CPU")
    return p


def sweep(profile: str, device: str = "cpu", dry_run: bool = False) -> list[Run]:
    """The runs of ``profile``: naive async (sync at s = 0) for each configuration × staleness × seed; a dry run
    keeps one seed and shrinks each run with ``dry_run_args``."""
    from experiments.llm import Run, dry_run_args

    p = check_profile(profile, device, dry_run)
    seeds = p.seeds[:1] if dry_run else p.seeds
    shrink = dry_run_args if dry_run else (lambda args: args)
    return [Run(shrink(config_args(config, p.base, device, method="naive", staleness=s, seed=seed)), (config,))
            for config, stalenesses in p.cells.items() for s in stalenesses for seed in seeds]


def _mean(records: list[dict], key: str) -> float:
    from experiments.aggregate import measured

    values = [r[key] for r in records if measured(r.get(key))]
    return float(np.mean(values)) if values else math.nan


def snr_reference(snr_h: float) -> float:
    """Signal-only cosine of two independent full batches at one θ: 2·SNR_h/(1 + 2·SNR_h) (NaN if unmeasured)."""
    return 2 * snr_h / (1 + 2 * snr_h) if snr_h == snr_h and snr_h >= 0 else math.nan


def run_row(item: Run, result: dict, device: str = "cpu") -> dict:
    """One row per run: configuration, s, seed, the mean of every cosine after the first tenth of the steps (and
    per quarter of the run), the SNR probe, accuracy (start, per quarter, final), KL to π_b, divergence."""
    from experiments.aggregate import measured
    from sim.schema import nonfinite

    a, records = item.args, result["records"]
    ok = [r for r in records if not nonfinite(r)]
    late = [r for r in ok if r["step"] >= a.steps // 10]
    halves = _mean(late, "cos_halves")
    snr_h = halves / (1 - halves) if halves == halves and 0 < halves < 1 else math.nan
    row = {"config": item.roles[0], "method": a.run_method, "staleness": a.staleness, "seed": a.seed, "lr": a.lr,
           "steps": a.steps, "device": device, **{g: _mean(late, g) for g in GRANULARITIES},
           "cos_halves": halves, "snr_halves": snr_h, "snr_reference_cos": snr_reference(snr_h)}
    quarter = max(1, a.steps // 4)
    for q in range(4):
        part = [r for r in ok if q * quarter <= r["step"] < (q + 1) * quarter]
        row[f"cos_prev_q{q + 1}"] = _mean(part, "cos_prev")
        row[f"cos_prev_step_q{q + 1}"] = _mean(part, "cos_prev_step")
        row[f"accuracy_q{q + 1}"] = _mean(part, "accuracy")
    accuracies = [r["accuracy"] for r in ok if measured(r.get("accuracy"))]
    row.update(start_accuracy=accuracies[0] if accuracies else math.nan,
               final_accuracy=result["summary"]["final_accuracy"], kl_behaviour_mean=_mean(ok, "kl_behaviour"),
               kl_behaviour_max=max((r["kl_behaviour"] for r in ok if measured(r.get("kl_behaviour"))),
                                    default=math.nan),
               clip_frac_mean=_mean(ok, "clip_frac"), parallel_scale_mean=_mean(ok, "parallel_scale"),
               diverged=any(nonfinite(r) for r in records))
    return row


def seed_interval(values, confidence: float = 0.9) -> tuple[float, float, float]:
    """(mean, low, high): the mean over seeds and a percentile seed-bootstrap interval (``stats.bootstrap_interval``),
    NaN values (not measured) left out; NaN bounds with < 2 seeds."""
    from experiments import stats

    values = np.asarray([v for v in values if v == v], dtype=float)
    if not len(values):
        return math.nan, math.nan, math.nan
    return stats.bootstrap_interval(values, confidence=confidence)


# -- GAC where the signature exists ------------------------------------------------------------------------
GAC_TABLE = dict(config="updates=2", staleness=16, steps=300, seeds=(0, 1, 2), eval_every=50)
"""The GAC table's configuration: 2 updates per RL step (behaviour ratio, no grad clip, 3 digits, lr 3e-4), the
one with the largest async − sync gap in both cosine and accuracy in the pilot map (see paper_figs/README.md)."""
# The committed table also has "step" arms (reference: the previous RL step's summed gradient), made by the trainer
# before it stepped with gac.wrap, whose reference is the previous optimizer update: they are not rerun.
GAC_ARMS = {  # name -> (method, staleness, GAC's τ or None); in priority order (the first ones run first)
    "sync": ("naive", 0, None),
    "naive": ("naive", GAC_TABLE["staleness"], None),
    "gac τ=0 update": ("gac", GAC_TABLE["staleness"], 0.0),
    "tis": ("tis", GAC_TABLE["staleness"], None),
    "m2po": ("m2po", GAC_TABLE["staleness"], None),
    "bapo": ("bapo", GAC_TABLE["staleness"], None),
    "sync + gac τ=0": ("gac", 0, 0.0),
    "gac τ=0.5 update": ("gac", GAC_TABLE["staleness"], 0.5),
    "gac τ=0.2 update": ("gac", GAC_TABLE["staleness"], 0.2),
}


def gac_runs(arms=tuple(GAC_ARMS), device: str = "cpu", seeds: tuple[int, ...] = GAC_TABLE["seeds"]) -> list[Run]:
    """The GAC table's runs of ``arms`` on ``seeds`` (every seed of an arm before the next arm)."""
    from experiments.llm import Run
    from sim.stabilizers import gac_config

    t = GAC_TABLE
    runs = []
    for arm in arms:
        method, staleness, threshold = GAC_ARMS[arm]
        changes = {} if threshold is None else dict(gac=gac_config(threshold=threshold))
        runs += [Run(config_args(t["config"], None, device, method=method, staleness=staleness, seed=seed,
                                 steps=t["steps"], eval_every=t["eval_every"], **changes), (arm,)) for seed in seeds]
    return runs


def small_step_run(gac_rows: list[dict], device: str = "cpu",
                   seeds: tuple[int, ...] = GAC_TABLE["seeds"]) -> list[Run]:
    """The damping control: naive async at lr × (mean parallel scale of GAC τ = 0, update reference), on ``seeds``."""
    from experiments.llm import Run

    scale = np.mean([r["parallel_scale_mean"] for r in gac_rows if r["config"] == "gac τ=0 update"])
    lr = float(f"{BASE['lr'] * scale:.2g}")
    t = GAC_TABLE
    return [Run(config_args(t["config"], None, device, method="naive", staleness=t["staleness"], seed=seed,
                            steps=t["steps"], eval_every=t["eval_every"], lr=lr), (f"naive lr={lr:g}",))
            for seed in seeds]


def gap_recovered(rows: list[dict], arm: str, confidence: float = 0.9) -> dict:
    """(acc_arm − acc_naive)/(acc_sync − acc_naive) over seeds, with a paired seed-bootstrap percentile interval."""
    from experiments import stats

    names = (arm, "naive", "sync")
    by = {name: {r["seed"]: r["final_accuracy"] for r in rows if r["config"] == name} for name in names}
    seeds = sorted(set(by[arm]) & set(by["naive"]) & set(by["sync"]))
    x, n, s = (np.array([by[name][k] for k in seeds]) for name in names)

    def ratio(x, n, s, axis=-1):
        return stats.gap_recovered(x.mean(axis), n.mean(axis), s.mean(axis))

    value = low = high = math.nan
    if seeds:
        value, low, high = stats.bootstrap_interval(x, n, s, statistic=ratio, confidence=confidence, paired=True)
    if len(seeds) < 3:  # two seeds give at most three distinct resampled ratios: no interval
        low = high = math.nan
    return {"gap_recovered": value, "gap_low": low, "gap_high": high, "seeds_paired": len(seeds)}


def gac_table(rows: list[dict]) -> list[dict]:
    """Per arm: final accuracy (seed mean and bootstrap interval), mean cosines, KL, and the gap recovered."""
    table = []
    for arm in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == arm]
        acc, acc_low, acc_high = seed_interval([r["final_accuracy"] for r in mine])
        table.append({"arm": arm, "seeds": len(mine), "lr": mine[0]["lr"], "final_accuracy": acc,
                      "acc_low": acc_low, "acc_high": acc_high,
                      **{g: float(np.nanmean([r[g] for r in mine])) for g in GRANULARITIES},
                      "kl_behaviour_mean": float(np.nanmean([r["kl_behaviour_mean"] for r in mine])),
                      "parallel_scale_mean": float(np.nanmean([r["parallel_scale_mean"] for r in mine])),
                      **gap_recovered(rows, arm)})
    return table


def drift_correlation(rows: list[dict]) -> tuple[float, int]:
    """(Spearman ρ of final accuracy against the mean KL to π_b, number of runs) over the stale runs of the
    methods that do not reweight by the importance ratio (TIS does, so a large KL means less there)."""
    from scipy.stats import spearmanr

    stale = [r for r in rows if r["staleness"] > 0 and r["method"] != "tis"]
    if len(stale) < 3:
        return math.nan, len(stale)
    rho = spearmanr([r["kl_behaviour_mean"] for r in stale], [r["final_accuracy"] for r in stale]).statistic
    return float(rho), len(stale)


def cached_only(runs: list[Run]) -> list[tuple[Run, dict]]:
    """The runs already in the cache, with their results (nothing is computed); the missing ones are named."""
    from experiments.llm import run_unit

    found = [(run, run_unit(run).lookup()) for run in runs]
    for run, result in found:
        if result is None:
            print(f"not in the cache (left out): {run.roles[0]} seed {run.args.seed}", file=sys.stderr)
    return [(run, result) for run, result in found if result is not None]


@dataclass(frozen=True)
class GacTableArgs:
    """Run the GAC table (cached) and write it, its runs beside it."""

    command: tyro.conf.Positional[Annotated[Literal["gac-table"], choice("the command", ("gac-table",))]]
    out: tyro.conf.Positional[Annotated[Path, folder("OUT", "give the table's CSV path, e.g. out/gac_table.csv")]]
    """table CSV (OUT_runs.csv beside it)"""
    arms: tuple[str, ...] = ()
    """arms of ``GAC_ARMS`` to run (default: all)"""
    cached: bool = False
    """compute nothing: tabulate the runs already in the cache"""
    seeds: tuple[int, ...] = GAC_TABLE["seeds"]
    """RL seeds of every arm (the table's: 0 1 2; others give a replication on fresh seeds)"""


def main(argv=None) -> int:
    """``python -m experiments.signature gac-table OUT.csv [--arms ARM ...] [--seeds N ...] [--cached]``."""
    from runtime.files import write_records

    args = parse(GacTableArgs, argv, prog="python -m experiments.signature")
    from experiments.llm import results_of
    try:  # before any run: a table that cannot be written is refused now, not after hours of runs
        check_output_files(args.out, [args.out, args.out.with_name(args.out.stem + "_runs.csv")], "full", True, "OUT")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    arms = args.arms or tuple(GAC_ARMS)
    unknown = [a for a in arms if a not in GAC_ARMS]
    if unknown:
        print(f"error: unknown arm(s) {unknown}; choose from {list(GAC_ARMS)}", file=sys.stderr)
        return 2
    if not args.seeds or min(args.seeds) < 0 or len(set(args.seeds)) < len(args.seeds):
        print(f"error: --seeds needs distinct non-negative integers, got {list(args.seeds)}", file=sys.stderr)
        return 2
    out, only_cached = args.out, args.cached

    def computed(runs):
        return results_of(runs, log=lambda *a: print(*a, flush=True), name="gac table")

    run_all = cached_only if only_cached else computed
    rows = [run_row(item, res) for item, res in run_all(gac_runs(arms, seeds=args.seeds))]
    if any(r["config"] == "gac τ=0 update" for r in rows):
        rows += [run_row(item, res) for item, res in run_all(small_step_run(rows, seeds=args.seeds))]
    write_records(rows, out.with_name(out.stem + "_runs.csv"))
    write_records(gac_table(rows), out)
    rho, n = drift_correlation(rows)
    print(f"Spearman rho(mean KL to behaviour policy, final accuracy) over {n} stale non-TIS runs: {rho:+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
