"""The LLM verdict: what closes the async − sync gap at the signature configuration, each arm at its own step size.

Protocol: every arm — sync included — is tuned on a warm start that is never
reported (``TUNING_WARM``), over a log step grid with neighbours 2× apart that is widened until the arm's best
lies inside it; each arm is then run at its best step on the reporting warm starts × RL seeds, and summarised with
a hierarchical bootstrap (warm starts, then seeds within them). Controls separate "a smaller step" from "a better
direction": naive async at the arm's measured mean applied step norm ‖Δθ‖, and sync + the arm (s = 0). The key
arms are also run at a milder configuration (s = 4) at their tuned steps.

``python -m experiments.verdict --profile full --out docs/data/verdict_llm.csv`` runs (cached) and writes the table,
the per-run rows (``*_runs.csv``) and the tuning grid (``*_tuning.csv``). ``--stage`` stops after tuning or
reporting or the controls, so a long run can be committed in parts.

Profile ``v2`` runs the protocol on the reproducible testbed (``experiments.llm_figures.BASE``) instead of the
signature configuration: its 8 reported warm starts × 2 seeds, 200 RL steps, VCPO among the arms, and
``docs/data/verdict_llm_v2.csv``.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np

from experiments.profiles import Verdict, lookup
from runtime.cli import check_device, choice, folder, parse, whole
from sim.schema import nonfinite

if TYPE_CHECKING:
    from experiments.llm import Run

# the trainer and the run graph are imported where they run (--help answers without them)

SIGNATURE = "updates=2"
"""The GAC table's configuration: 2 optimizer updates per RL step, clip ratio to π_b, no grad clip, 3 digits."""

NEAR_BEST = 0.1
"""The robust range (``stats.near_best_range``): the tried step sizes whose tuning score is within 10 % of the best."""
LR_LADDER = tuple(3e-4 * 2.0 ** k for k in range(-6, 4))
"""Step sizes an arm can be tuned on: neighbours 2× apart, 4.7e-6 … 2.4e-3."""


@dataclass(frozen=True)
class Arm:
    """One arm of the verdict: a method name (axes joined by +), its Args changes and, where it uses GAC, GAC's τ
    (its GACConfig is made with the arm's Args)."""

    method: str
    changes: tuple = ()
    gac_threshold: float | None = None

    def args_changes(self) -> dict:
        changes = dict(self.changes)
        if self.gac_threshold is not None:
            from sim.stabilizers import gac_config

            changes["gac"] = gac_config(threshold=self.gac_threshold)
        return changes


def gac_arm(space: str, method: str = "gac") -> Arm:
    """GAC (τ = 0, project, reference: the previous optimizer update) in ``space``, combined as ``method`` says."""
    return Arm(method, (("gac_space", space),), gac_threshold=0.0)


ARMS: dict[str, Arm] = {
    "sync": Arm("sync"),
    "naive": Arm("naive"),
    "gac gradient": gac_arm("gradient"),
    "gac update": gac_arm("update"),
    "gac momentum": gac_arm("momentum"),
    "braking": Arm("braking"),
    "tis": Arm("tis"),
    "kl_target": Arm("kl_target"),
    "m2po": Arm("m2po"),
    "bapo": Arm("bapo"),
    "vcpo": Arm("vcpo"),
}
"""The arms tuned first; the combinations with the best GAC placement (``combination_arms``) follow."""
GAC_PLACEMENTS = ("gac gradient", "gac update", "gac momentum")
SHRINKING = ("gac gradient", "gac update", "gac momentum", "braking", "kl_target", "gac + tis", "kl_target + gac")
"""Arms that shrink or redirect the step: each gets the step-norm control and the sync + arm control."""


def arm_args(profile: Verdict, arm: Arm, lr: float, warm: int, seed: int, staleness: int | None = None,
             device: str = "cpu"):
    """The Args of one verdict run (the profile's configuration with its horizon)."""
    from experiments.signature import config_args
    from sim.llm.train import Args

    s = profile.staleness if staleness is None else staleness
    method = "naive" if arm.method == "sync" else arm.method
    changes = dict(method=method, staleness=0 if arm.method == "sync" else s, seed=seed, warm_seed=warm, lr=lr,
                   steps=profile.steps, eval_every=profile.eval_every, **arm.args_changes())
    if profile.config == "testbed":
        from experiments.llm_figures import BASE
        return Args(**{**BASE, **dict(profile.base), **changes}, device=device, progress=False, on_nonfinite="mark")
    return config_args(SIGNATURE, dict(profile.base), device, **changes)


def late_accuracy(result: dict, steps: int) -> float:
    """Mean held-out accuracy over the evaluations in the second half of the run, the final one included
    (the tuning score: less noisy than the final accuracy alone)."""
    values = [r["accuracy"] for r in result["records"] if r["step"] >= steps // 2 and r["accuracy"] == r["accuracy"]]
    values.append(result["summary"]["final_accuracy"])
    return float(np.mean(values))


def run_row(arm_name: str, role: str, item: Run, result: dict) -> dict:
    """One row per run: the arm, its axes, warm start, seed, step size, accuracy and the drift/alignment means."""
    from sim.stabilizers import parse_method

    a, records = item.args, [r for r in result["records"] if not nonfinite(r)]
    axes = parse_method(a.method)

    def mean(key):
        values = [r[key] for r in records if r[key] == r[key]]
        return float(np.mean(values)) if values else math.nan

    return {"arm": arm_name, "role": role, "method": a.run_method, "objective_fn": axes.objective,
            "direction_control": axes.direction, "step_control": axes.step, "gac_space": a.gac_space
            if axes.direction == "gac" else "", "staleness": a.staleness, "warm_seed": a.warm_seed, "seed": a.seed,
            "lr": a.lr, "steps": a.steps, "final_accuracy": result["summary"]["final_accuracy"],
            "late_accuracy": late_accuracy(result, a.steps),
            "start_accuracy": result["summary"]["warm_start"].get("heldout_accuracy", math.nan),
            "kl_behaviour_mean": mean("kl_behaviour"), "cos_prev": mean("cos_prev"),
            "cos_prev_step": mean("cos_prev_step"), "cos_update": mean("cos_update"),
            "step_norm_mean": mean("step_norm"), "lr_mean": mean("lr"), "parallel_scale_mean": mean("parallel_scale"),
            "ess_ratio_mean": mean("ess_ratio"), "diverged": result["summary"]["nonfinite_at"] is not None}


# -- tuning -----------------------------------------------------------------------------------------------------
def neighbours(lr: float) -> tuple[float | None, float | None]:
    """The ladder's step sizes just below and above ``lr`` (None past the ladder's ends)."""
    i = min(range(len(LR_LADDER)), key=lambda k: abs(math.log(LR_LADDER[k] / lr)))
    return (LR_LADDER[i - 1] if i > 0 else None), (LR_LADDER[i + 1] if i + 1 < len(LR_LADDER) else None)


def needs_widening(scores: dict[float, float]) -> float | None:
    """The next step size to try when the best sits at an edge of the tried ones (None when it is inside)."""
    from experiments import stats

    lrs, best = sorted(scores), stats.best_step(scores, higher_is_better=True)
    below, above = neighbours(best)
    if best == lrs[0] and below is not None:
        return below
    if best == lrs[-1] and above is not None:
        return above
    return None


def tune(profile: Verdict, arms: dict[str, Arm], device: str = "cpu", log=print, max_rounds: int = 4,
         jobs: int | None = None) -> list[dict]:
    """Tuning rows (arm, lr, score, …) on the tuning warm start: the start grid, then widened at an edge best."""
    from experiments import stats
    from experiments.llm import Run, results_of

    tried: dict[str, dict[float, tuple[Run, dict]]] = {name: {} for name in arms}
    pending = {name: list(profile.start_lrs) for name in arms}
    for _ in range(max_rounds):
        runs = [Run(arm_args(profile, arms[name], lr, profile.tuning_warm, profile.tuning_seed, device=device),
                    (name,)) for name, lrs in pending.items() for lr in lrs]
        if not runs:
            break
        for item, result in results_of(runs, device, log, jobs, name="verdict tuning"):
            tried[item.roles[0]][item.args.lr] = (item, result)
        pending = {}
        for name, done in tried.items():
            nxt = needs_widening({lr: late_accuracy(res, profile.steps) for lr, (_, res) in done.items()})
            if nxt is not None:
                pending[name] = [nxt]
    rows = []
    for name, done in tried.items():
        scores = {lr: late_accuracy(res, profile.steps) for lr, (_, res) in done.items()}
        best = stats.best_step(scores, higher_is_better=True)
        low, high = stats.near_best_range(scores, NEAR_BEST, higher_is_better=True)
        edge = needs_widening(scores) is not None or best in (LR_LADDER[0], LR_LADDER[-1])
        for lr, (item, res) in sorted(done.items()):
            rows.append({**run_row(name, "tuning", item, res), "score": scores[lr], "best_lr": best,
                         "robust_low": low, "robust_high": high, "best_at_edge": edge})
    return rows


def tuned_lrs(tuning_rows: list[dict]) -> dict[str, float]:
    return {r["arm"]: r["best_lr"] for r in tuning_rows}


def combination_arms(tuning_rows: list[dict]) -> dict[str, Arm]:
    """GAC + TIS and KL-target + GAC, each with the GAC placement that scored best on the tuning warm start."""
    best = {r["arm"]: r["score"] for r in tuning_rows if r["lr"] == r["best_lr"]}
    space = max(GAC_PLACEMENTS, key=lambda a: best.get(a, -math.inf)).split()[-1]
    return {"gac + tis": gac_arm(space, "gac+tis"), "kl_target + gac": gac_arm(space, "gac+kl_target")}


# -- reporting --------------------------------------------------------------------------------------------------
def reporting_runs(profile: Verdict, arms: dict[str, Arm], lrs: dict[str, float], role: str = "report",
                   staleness: int | None = None, device: str = "cpu",
                   seeds: tuple[int, ...] | None = None) -> list[Run]:
    from experiments.llm import Run

    seeds = profile.reporting_seeds if seeds is None else seeds
    return [Run(arm_args(profile, arm, lrs[name], warm, seed, staleness, device), (name, role))
            for name, arm in arms.items() for warm in profile.reporting_warms for seed in seeds]


def step_norm_controls(profile: Verdict, report_rows: list[dict], lrs: dict[str, float],
                       device: str = "cpu") -> list[Run]:
    """Naive async at each shrinking arm's measured mean ‖Δθ‖: lr = naive's best × ‖Δθ_arm‖ / ‖Δθ_naive‖ (AdamW's
    step norm is proportional to its step size at fixed gradient statistics), rounded to 2 digits."""
    from experiments.llm import Run

    def norm(arm):
        return np.nanmean([r["step_norm_mean"] for r in report_rows if r["arm"] == arm and r["role"] == "report"])

    runs = []
    for arm in SHRINKING:
        if arm in lrs and arm in {r["arm"] for r in report_rows}:
            lr = float(f"{lrs['naive'] * norm(arm) / norm('naive'):.2g}")
            runs += [Run(arm_args(profile, ARMS["naive"], lr, w, s, device=device), (f"naive @ ‖Δθ‖ of {arm}",
                                                                                      "control_step_norm"))
                     for w in profile.reporting_warms for s in profile.control_seeds]
    return runs


def gap_of_means(x: np.ndarray):
    """``stats.gap_recovered`` of the column means of an (..., n, 3) array [arm, naive, sync]: a hierarchical
    bootstrap's statistic."""
    from experiments import stats

    m = x.mean(-2)
    return stats.gap_recovered(m[..., 0], m[..., 1], m[..., 2])


def mean_of(column: int):
    """The hierarchical bootstrap's statistic: the mean of one column of an (..., n, k) array."""
    return lambda x: x[..., column].mean(-1)


def mean_difference(first: int, second: int):
    """The hierarchical bootstrap's statistic: the mean paired difference of two columns of an (..., n, k) array."""
    return lambda x: (x[..., first] - x[..., second]).mean(-1)


def verdict_table(rows: list[dict], tuning_rows: list[dict], metric: str = "final_accuracy") -> list[dict]:
    """Per arm and role: accuracy with a hierarchical interval, gap recovered (paired with naive and sync on the same
    warm start and seed of the same staleness), robust range, and the drift/alignment means."""
    from experiments import stats

    tuning = {r["arm"]: r for r in tuning_rows if r["lr"] == r["best_lr"]}
    table = []
    for (arm, role, s) in dict.fromkeys((r["arm"], r["role"], r["staleness"]) for r in rows):
        mine = [r for r in rows if (r["arm"], r["role"], r["staleness"]) == (arm, role, s)]
        base_role = "mild" if role == "mild" else "report"
        ref = {name: {(r["warm_seed"], r["seed"]): r[metric] for r in rows
                      if r["arm"] == name and r["role"] == base_role} for name in ("naive", "sync")}
        own = {(r["warm_seed"], r["seed"]): r[metric] for r in mine}
        acc, lo, hi = stats.hierarchical_bootstrap({k: np.array([v]) for k, v in own.items()}, mean_of(0))
        paired = {k: np.array([own[k], ref["naive"][k], ref["sync"][k]]) for k in own
                  if k in ref["naive"] and k in ref["sync"]}
        gap, gap_lo, gap_hi = stats.hierarchical_bootstrap(paired, gap_of_means) if paired else (math.nan,) * 3
        # The paired differences stay defined where the gap (the ratio's denominator) is small.
        diff, diff_lo, diff_hi = stats.hierarchical_bootstrap(paired, mean_difference(0, 1)) \
            if paired else (math.nan,) * 3
        below, below_lo, below_hi = stats.hierarchical_bootstrap(paired, mean_difference(0, 2)) \
            if paired else (math.nan,) * 3
        t = tuning.get(arm, {})
        table.append({"arm": arm, "role": role, "staleness": s, "method": mine[0]["method"],
                      "objective_fn": mine[0]["objective_fn"], "direction_control": mine[0]["direction_control"],
                      "step_control": mine[0]["step_control"], "lr": mine[0]["lr"],
                      "warm_starts": len({r["warm_seed"] for r in mine}), "runs": len(mine),
                      metric: acc, f"{metric}_low": lo, f"{metric}_high": hi,
                      "gap_recovered": gap, "gap_low": gap_lo, "gap_high": gap_hi,
                      "minus_naive": diff, "minus_naive_low": diff_lo, "minus_naive_high": diff_hi,
                      "minus_sync": below, "minus_sync_low": below_lo, "minus_sync_high": below_hi,
                      "robust_low": t.get("robust_low", math.nan), "robust_high": t.get("robust_high", math.nan),
                      "best_at_edge": t.get("best_at_edge", ""),
                      **{k: float(np.nanmean([r[k] for r in mine])) for k in
                         ("kl_behaviour_mean", "cos_prev_step", "cos_update", "step_norm_mean", "lr_mean",
                          "parallel_scale_mean")},
                      "diverged_runs": sum(bool(r["diverged"]) for r in mine)})
    return table


def control_differences(rows: list[dict], metric: str = "final_accuracy") -> list[dict]:
    """Per shrinking arm: arm − its step-norm control (naive at the arm's ‖Δθ‖) and (sync + arm) − sync, paired on
    the controls' warm starts and seeds, with hierarchical intervals: does the arm do more than shrink the step, and
    does it cost anything without staleness?"""
    from experiments import stats

    def by_key(arm, role):
        return {(r["warm_seed"], r["seed"]): r[metric] for r in rows if r["arm"] == arm and r["role"] == role}

    out = []
    for arm in SHRINKING:
        comparisons = (("arm − naive at its ‖Δθ‖", by_key(arm, "report"),
                        by_key(f"naive @ ‖Δθ‖ of {arm}", "control_step_norm")),
                       ("(sync + arm) − sync", by_key(f"sync + {arm}", "control_sync"), by_key("sync", "report")))
        for comparison, first, second in comparisons:
            paired = {k: np.array([first[k], second[k]]) for k in first if k in second}
            if paired:
                diff, low, high = stats.hierarchical_bootstrap(paired, mean_difference(0, 1))
                out.append({"arm": arm, "comparison": comparison, "pairs": len(paired), "difference": diff,
                            "low": low, "high": high})
    return out


def drift_correlation(rows: list[dict], metric: str = "final_accuracy") -> tuple[float, int]:
    """Spearman ρ(mean KL to π_b, accuracy) over every stale reporting run of the arms that do not reweight by the
    importance ratio (TIS does, so a large KL means less there)."""
    from scipy.stats import spearmanr

    stale = [r for r in rows if r["staleness"] > 0 and r["objective_fn"] != "tis" and r["role"] != "tuning"]
    kl, accuracy = [r["kl_behaviour_mean"] for r in stale], [r[metric] for r in stale]
    if len(stale) < 3 or np.ptp(kl) == 0 or np.ptp(accuracy) == 0:  # no ranking to correlate
        return math.nan, len(stale)
    return float(spearmanr(kl, accuracy).statistic), len(stale)


def code_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1])
        dirty = subprocess.run(["git", "status", "--porcelain", "gac", "sim", "experiments"], capture_output=True,
                               text=True, cwd=Path(__file__).resolve().parents[1]).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def dry_run_profile(profile: Verdict) -> Verdict:
    """A dry run's profile: two reporting warm starts, one seed, no tuning (its runs shrunk by ``dry_run_args``)."""
    return replace(profile, reporting_warms=profile.reporting_warms[:2], reporting_seeds=(0,), tune=False)


def verdict(profile_name: str = "quick", device: str = "cpu", log=print, stage: str = "all",
            dry_run: bool = False, jobs: int | None = None) -> dict[str, list[dict]]:
    """Every stage of the protocol (cached runs, ``jobs`` at a time: ``experiments.llm.results_of``): {"tuning",
    "runs", "table"} rows."""
    from experiments.llm import Run, dry_run_args, results_of

    profile = lookup("verdict", profile_name)
    if profile_name == "gpu" and not device.startswith("cuda") and not dry_run:
        raise ValueError("profile gpu needs --device cuda (the 25M model); use quick or full on the CPU")
    if dry_run:
        profile = dry_run_profile(profile)
    arms = {name: ARMS[name] for name in profile.arms}
    if profile.tune:
        tuning_rows = tune(profile, arms, device, log, jobs=jobs)
        if profile.combinations:
            combos = combination_arms(tuning_rows)
            tuning_rows += tune(profile, combos, device, log, jobs=jobs)
            arms.update(combos)
    else:
        tuning_rows = []
    lrs = tuned_lrs(tuning_rows) if tuning_rows else {name: profile.fixed_lr for name in arms}
    if stage == "tuning":
        return {"tuning": tuning_rows, "runs": [], "table": []}
    commit = code_commit()

    def rows_of(runs):
        runs = [Run(dry_run_args(r.args), r.roles) for r in runs] if dry_run else runs
        return [{**run_row(item.roles[0], item.roles[1], item, res), "code": commit}
                for item, res in results_of(runs, device, log, jobs, name="verdict")]

    rows = rows_of(reporting_runs(profile, arms, lrs, device=device))
    if stage != "reporting" and profile.tune:
        controls = step_norm_controls(profile, rows, lrs, device)
        sync_plus = {f"sync + {a}": arms[a] for a in SHRINKING if a in arms}
        controls += reporting_runs(profile, sync_plus, {f"sync + {a}": lrs[a] for a in SHRINKING if a in arms},
                                   "control_sync", staleness=0, device=device, seeds=profile.control_seeds)
        rows += rows_of(controls)
    if stage == "all" and profile.tune:
        best_gac = max(GAC_PLACEMENTS, key=lambda a: np.mean([r["final_accuracy"] for r in rows if r["arm"] == a]))
        combos = [a for a in ("gac + tis", "kl_target + gac") if a in arms]
        best_combo = max(combos, key=lambda a: np.mean([r["final_accuracy"] for r in rows if r["arm"] == a])) \
            if combos else None
        mild = {name: arms[name] for name in ("sync", "naive", best_gac, "kl_target", "tis", best_combo)
                if name is not None}
        rows += rows_of(reporting_runs(profile, mild, lrs, "mild", profile.mild_staleness, device,
                                       profile.control_seeds))
    return {"tuning": tuning_rows, "runs": rows, "table": verdict_table(rows, tuning_rows)}


@dataclass(frozen=True)
class VerdictArgs:
    """The LLM verdict: every arm at its own step size over warm starts; writes the table, runs and tuning."""

    profile: Annotated[Literal["quick", "full", "v2", "gpu"], choice("--profile", ("quick", "full", "v2", "gpu"))] = \
        "quick"
    """the run sizes (the ``verdict`` profiles of ``experiments.profiles``)"""
    out: Annotated[Path | None, folder("--out", "give the table's CSV path, e.g. --out out/verdict.csv")] = None
    """table CSV (runs, tuning and controls beside it); default: docs/data/verdict_llm.csv for the full profile and
    docs/data/verdict_llm_v2.csv for v2 (the committed tables), paper_figs/out/verdict_llm_PROFILE.csv for the
    others"""
    stage: Annotated[Literal["tuning", "reporting", "controls", "all"],
                     choice("--stage", ("tuning", "reporting", "controls", "all"))] = "all"
    """stop after this stage (tuning, reporting, the controls, or all incl. the milder one)"""
    device: str = "cpu"
    """cpu, cuda or cuda:N"""
    force: bool = False
    """overwrite committed (git-tracked) CSVs with a profile other than full or v2"""
    jobs: Annotated[int | None, whole("--jobs", 1, "runs at once")] = None
    """runs at once (default: runtime.graph.default_jobs, one per core; with --executor ray, the
    cluster's CPUs)"""
    executor: Annotated[Literal["local", "ray"], choice("--executor", ("local", "ray"))] = "local"
    """where the runs are computed: local worker processes, or a Ray cluster (pip install -e '.[cluster]')"""
    address: str | None = None
    """with --executor ray: the cluster to join (host:port, or auto); default: a local cluster for this command"""


COMMITTED_PROFILES = {"full": "verdict_llm.csv", "v2": "verdict_llm_v2.csv"}
"""The profiles whose tables are committed (docs/data/), by file name."""
OUTPUT_SUFFIXES = ("", "_tuning", "_runs", "_controls")
"""The files a verdict writes: the table and, beside it, its tuning grid, its runs and its controls."""


def default_out(profile: str) -> Path:
    """Where a verdict of ``profile`` goes without --out: only the full and v2 profiles write committed tables."""
    root = Path(__file__).resolve().parents[1]
    if profile in COMMITTED_PROFILES:
        return root / "docs" / "data" / COMMITTED_PROFILES[profile]
    return root / "paper_figs" / "out" / f"verdict_llm_{profile}.csv"


def committed_verdict(profile: str = "v2") -> dict[str, list[dict]]:
    """{"tuning", "runs", "table"} as committed in docs/data/ for ``profile`` (``COMMITTED_PROFILES``): what
    ``verdict`` returned when the files were written (the command is in RESULTS.md; the code commit in the runs'
    ``code`` column). fig10's full profile draws these instead of rerunning hours of protocol inside one figure."""
    from runtime.files import read_records

    if profile not in COMMITTED_PROFILES:
        raise ValueError(f"no committed verdict for profile {profile!r}; committed: {', '.join(COMMITTED_PROFILES)}")
    table = default_out(profile)
    paths = {key: table.with_name(table.stem + suffix + ".csv")
             for key, suffix in (("table", ""), ("runs", "_runs"), ("tuning", "_tuning"))}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"committed verdict files missing: {', '.join(missing)} (make them with python -m "
                                f"experiments.verdict --profile {profile})")
    result = {key: read_records(path) for key, path in paths.items()}
    for row in result["runs"] + result["tuning"]:  # an empty text cell reads back as None; the code writes ""
        if row.get("gac_space") is None:
            row["gac_space"] = ""
    return result


def main(argv=None) -> int:
    from runtime.files import check_output_files, one_line_os_error, write_records

    args = parse(VerdictArgs, argv, prog="python -m experiments.verdict")
    from runtime import cluster
    out = default_out(args.profile) if args.out is None else args.out
    try:  # before any work: a run of hours that cannot write its table is refused now
        check_device(args.device)
        check_output_files(out, [out.with_name(out.stem + s + ".csv") for s in OUTPUT_SUFFIXES],
                           "full" if args.profile in COMMITTED_PROFILES else args.profile, args.force)
        if args.profile == "gpu" and not args.device.startswith("cuda"):
            raise ValueError("profile gpu needs --device cuda (the 25M model); use quick or full on the CPU")
        if args.jobs is not None and args.jobs < 1:
            raise ValueError(f"--jobs must be a whole number of runs at once >= 1, got {args.jobs}")
        if args.address is not None and args.executor != "ray":
            raise ValueError("--address names a Ray cluster: give it with --executor ray")
    except ValueError as err:
        print(f"python -m experiments.verdict: error: {err}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        if args.executor == "ray":  # connected and checked before any run; results_of then sends the runs there
            try:
                stack.enter_context(cluster.connect(args.address))
            except ValueError as err:
                print(f"python -m experiments.verdict: error: {err}", file=sys.stderr)
                return 2
        result = verdict(args.profile, args.device, lambda *a: print(*a, flush=True), args.stage, jobs=args.jobs)
    tables = {"_tuning": result["tuning"], "_runs": result["runs"], "": result["table"] if result["runs"] else [],
              "_controls": control_differences(result["runs"]) if result["runs"] else []}
    written = []
    try:
        for suffix, rows in tables.items():
            if rows:
                written.append(write_records(rows, out.with_name(out.stem + suffix + ".csv")))
    except OSError as err:  # disk full, a folder made read-only during the run
        print(f"python -m experiments.verdict: error: {one_line_os_error(err, out)}; every run is cached (or was "
              "warned about): fix that and rerun the same command to write the tables", file=sys.stderr)
        return 4
    if result["runs"]:
        rho, n = drift_correlation(result["runs"])
        print(f"Spearman rho(mean KL to behaviour policy, final accuracy) over {n} stale non-TIS runs: {rho:+.2f}")
    print(f"wrote {', '.join(map(str, written)) or 'nothing (no rows)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
