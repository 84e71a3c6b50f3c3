"""The tuned-baselines protocol: every method at its own best step size, on the quadratic, the Gaussian
bandit and the LLM (fig8_tuned).

A ``TuningGrid`` says what runs (methods × staleness × a log-spaced step-size grid × tuning and
reporting seeds); ``toy_rows`` / ``llm_table`` run it into one row per run; the pure functions
below pick each method's step size on the tuning seeds, report it on the disjoint reporting seeds with a
seed-bootstrap interval, and give its robust range of step sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from experiments import stats, toy
from experiments.llm import Run, dry_run_args, results_of
from experiments.profiles import lookup
from sim.bandit import run_bandit
from sim.grid import setting
from sim.llm.train import Args
from sim.quadratic import run_quadratic
from sim.stabilizers import NAIVE, STABILIZERS, STALE_DATA, STALE_GRADIENT, SYNC, get_stabilizer

COLUMNS = ("method", "staleness", "lr", "seed", "final_gap")
"""Input columns. ``final_gap`` >= 0, lower is better: the final loss (quadratic), the reward gap
J* − J (bandits) or the accuracy gap to the best accuracy (LLM); NaN or inf marks a diverged run."""
METHODS = (SYNC, *STABILIZERS)
MIN_LRS = 4
NEAR_BEST = 1.0
"""fig8's robust range: the step sizes whose mean final gap is within 100 % of the best (at most twice the best)."""


def check_table(table: pd.DataFrame, methods=METHODS) -> None:
    """One-line ValueError for a table the protocol cannot use, before any computation (``methods``: the names
    the ``method`` column may hold; None for any, e.g. the verdict's arms)."""
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"tuning table lacks column(s) {missing}; it needs {list(COLUMNS)}")
    if table.empty:
        raise ValueError("tuning table is empty (no runs)")
    unknown = sorted(set(table["method"]) - set(methods)) if methods is not None else []
    if unknown:
        raise ValueError(f"unknown method(s) {unknown} in tuning table; known: {', '.join(methods)}")
    lrs = table.groupby(["method", "staleness"])["lr"].nunique()
    if (lrs < MIN_LRS).any():
        raise ValueError(f"each (method, staleness) needs >= {MIN_LRS} step sizes; got {lrs[lrs < MIN_LRS].to_dict()}")


def check_seeds(table: pd.DataFrame, tuning_seeds, reporting_seeds=None) -> None:
    """One-line ValueError unless the seed sets are non-empty, disjoint and all in the table."""
    tuning, reporting = set(tuning_seeds), set(reporting_seeds if reporting_seeds is not None else [])
    if not tuning or (reporting_seeds is not None and not reporting):
        raise ValueError("need at least one tuning seed and one reporting seed")
    if tuning & reporting:
        raise ValueError(f"tuning and reporting seeds overlap: {sorted(tuning & reporting)}")
    absent = (tuning | reporting) - set(table["seed"])
    if absent:
        raise ValueError(f"seeds {sorted(absent)} not all in the table (it has {sorted(set(table['seed']))})")


def lr_scores(table: pd.DataFrame, seeds) -> pd.DataFrame:
    """Mean final gap over ``seeds`` per (method, staleness, lr); a diverged seed makes the score inf."""
    runs = table[table["seed"].isin(list(seeds))].copy()
    runs["final_gap"] = runs["final_gap"].where(np.isfinite(runs["final_gap"]), math.inf)
    return runs.groupby(["method", "staleness", "lr"], as_index=False)["final_gap"].mean()


def pick_lrs(table: pd.DataFrame, tuning_seeds) -> pd.DataFrame:
    """Each (method, staleness)'s step size with the lowest mean final gap on the tuning seeds (``stats.best_step``:
    ties go to the smaller step size). Columns: method, staleness, lr, tuning_gap."""
    rows = []
    for (method, staleness), group in lr_scores(table, tuning_seeds).groupby(["method", "staleness"]):
        scores = group.set_index("lr")["final_gap"]
        lr = stats.best_step(scores.to_dict(), higher_is_better=False)
        rows.append({"method": method, "staleness": staleness, "lr": lr, "tuning_gap": scores[lr]})
    return pd.DataFrame(rows, columns=["method", "staleness", "lr", "tuning_gap"])


def report(table: pd.DataFrame, tuning_seeds, reporting_seeds, confidence: float = 0.95, resamples: int = 2000,
           rng_seed: int = 0, methods=METHODS) -> pd.DataFrame:
    """Each (method, staleness) at its tuned step size, measured on the reporting seeds only.

    Columns: method, staleness, lr, mean (mean final gap over reporting seeds), low, high (percentile
    seed-bootstrap interval of that mean; NaN with one seed; inf if a seed diverged),
    diverged (reporting seeds that diverged).
    """
    check_table(table, methods)
    check_seeds(table, tuning_seeds, reporting_seeds)
    picks = pick_lrs(table, tuning_seeds)
    runs = table[table["seed"].isin(list(reporting_seeds))]
    rows = []
    for pick in picks.itertuples(index=False):
        gaps = runs[(runs["method"] == pick.method) & (runs["staleness"] == pick.staleness)
                    & (runs["lr"] == pick.lr)]["final_gap"].to_numpy(dtype=float)
        rows.append({"method": pick.method, "staleness": pick.staleness, "lr": pick.lr,
                     **_mean_interval(gaps, confidence, resamples, rng_seed),
                     "diverged": int((~np.isfinite(gaps)).sum())})
    return pd.DataFrame(rows)


def _mean_interval(gaps: np.ndarray, confidence: float, resamples: int, rng_seed: int) -> dict:
    """Mean and seed-bootstrap interval of the final gaps (``stats.bootstrap_interval``); inf if a seed diverged."""
    if not np.isfinite(gaps).all():
        return {"mean": math.inf, "low": math.inf, "high": math.inf}
    mean, low, high = stats.bootstrap_interval(gaps, confidence=confidence, n_resamples=resamples, seed=rng_seed)
    return {"mean": mean, "low": low, "high": high}


def robust_range(table: pd.DataFrame, seeds, within: float = NEAR_BEST, methods=METHODS) -> pd.DataFrame:
    """Per (method, staleness): the step sizes near the best (``stats.near_best_range`` of the mean gaps over
    ``seeds``: the contiguous run of grid step sizes around the best whose mean gap is <= (1 + within) × the best)
    and their ratio largest / smallest.

    A range of 1 means only the best step size qualifies, NaN that every step size diverged. ``finite_range`` is the
    same ratio over the step sizes where no seed diverged (however poor their gap). Columns: method, staleness,
    best_gap, lr_low, lr_high, robust_range, finite_range.
    """
    if not within >= 0:
        raise ValueError(f"robust-range tolerance must be >= 0 (a fraction of the best gap), got {within}")
    check_table(table, methods)
    check_seeds(table, seeds)
    rows = []
    for (method, staleness), group in lr_scores(table, seeds).groupby(["method", "staleness"]):
        scores = group.set_index("lr")["final_gap"].to_dict()
        low, high = stats.near_best_range(scores, within, higher_is_better=False)
        finite = group[np.isfinite(group["final_gap"])]["lr"]
        rows.append({"method": method, "staleness": staleness, "best_gap": float(group["final_gap"].min()),
                     "lr_low": low, "lr_high": high, "robust_range": high / low,
                     "finite_range": finite.max() / finite.min() if len(finite) else math.nan})
    return pd.DataFrame(rows)


def winners(reported: pd.DataFrame) -> pd.DataFrame:
    """Per staleness, the method with the lowest reported mean gap, and whether its interval is apart.

    ``separated`` is True when the winner's upper bound is below every other method's lower bound.
    """
    rows = []
    for staleness, group in reported.groupby("staleness"):
        ordered = group.sort_values("mean")
        first, rest = ordered.iloc[0], ordered.iloc[1:]
        rows.append({"staleness": staleness, "winner": first["method"], "mean": first["mean"], "low": first["low"],
                     "high": first["high"], "separated": bool((first["high"] < rest["low"]).all())})
    return pd.DataFrame(rows)


# -- what runs ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TuningGrid:
    """The runs of one scale: sync (s = 0) and each method at each staleness, each at every step size of
    ``lrs``, on ``tuning_seeds`` seeds (indices 0..) and then ``reporting_seeds`` fresh ones."""

    model: str
    """the staleness model: stale-gradient (quadratic) or stale-data (bandits, LLM); the methods must apply"""
    methods: tuple[str, ...]
    staleness: tuple[int, ...]
    lrs: tuple[float, ...]
    tuning_seeds: int
    reporting_seeds: int

    def __post_init__(self) -> None:
        if not self.methods:
            raise ValueError("tuning grid has no methods")
        for method in self.methods:
            get_stabilizer(method, self.model)  # unknown or not applicable: one-line ValueError
        if len(set(self.lrs)) < MIN_LRS or not all(lr > 0 for lr in self.lrs):
            raise ValueError(f"tuning grid needs >= {MIN_LRS} distinct step sizes > 0, got {list(self.lrs)}")
        if not self.staleness or min(self.staleness) < 1:
            raise ValueError(f"tuning grid needs staleness values >= 1 (sync is added), got {list(self.staleness)}")
        if min(self.tuning_seeds, self.reporting_seeds) < 1:
            raise ValueError("tuning grid needs >= 1 tuning seed and >= 1 reporting seed")

    @property
    def tuning(self) -> list[int]:
        return list(range(self.tuning_seeds))

    @property
    def reporting(self) -> list[int]:
        return list(range(self.tuning_seeds, self.tuning_seeds + self.reporting_seeds))

    def cells(self) -> list[tuple[str, int, float]]:
        """(registry method, staleness, lr) of every setting; sync is (NAIVE, 0, lr)."""
        return [(NAIVE, 0, lr) for lr in self.lrs] + [
            (m, s, lr) for m in self.methods for s in self.staleness for lr in self.lrs]


def log_grid(center: float, count: int, factor: float = 2.0) -> tuple[float, ...]:
    """``count`` step sizes spaced by ``factor``, the ``count // 2``-th (0-based) equal to ``center``."""
    return tuple(center * factor ** (k - count // 2) for k in range(count))


TOY_STALENESS = (1, 2, 4, 8, 16)
TOY_GRIDS = {
    # η·λ_max from 0.019 to 2.4 (λ_max = 1): the η = 0.15 and η·λ_max = 1.2 are on it, and lr_scale's
    # best (η/(1+s) near sync's best 0.075, so η near 1.2 at s = 16) lies inside.
    "quadratic": lambda seeds: TuningGrid(STALE_GRADIENT, (NAIVE, "gac", "lr_scale", "dc"), TOY_STALENESS,
                                          log_grid(toy.QUADRATIC_LR, 8), seeds, seeds),
    # 0.00625 to 0.8: a first grid from 0.025 had most methods' best at its lowest value.
    "bandit_gaussian": lambda seeds: TuningGrid(STALE_DATA, (NAIVE, "gac", "lr_scale", "tis", "m2po", "bapo"),
                                                TOY_STALENESS, log_grid(toy.GAUSSIAN_LR / 2, 8), seeds, seeds),
}


def toy_grid(sim: str, profile: str) -> TuningGrid:
    if sim not in TOY_GRIDS:
        raise ValueError(f"no tuning grid for {sim!r}; choose from {', '.join(TOY_GRIDS)}")
    return TOY_GRIDS[sim](lookup("toy", profile).seeds)


def toy_rows(sim: str, profile: str, device: str = "cpu", grid: TuningGrid | None = None) -> list[dict]:
    """One row per run of ``grid`` (default ``toy_grid``) on the toy ``sim``: COLUMNS (the final gap: the final
    loss on the quadratic, J* − J on the bandit, inf if the run diverged)."""
    grid = toy_grid(sim, profile) if grid is None else grid
    p = lookup("toy", profile)
    settings = [setting(m, s, lr) for m, s, lr in grid.cells()]
    seeds = grid.tuning_seeds + grid.reporting_seeds
    if sim == "quadratic":
        result = run_quadratic(toy.QUADRATIC, settings, p.quad_steps, seeds, record_every=p.quad_steps,
                               device=device)
        gap = lambda final: final
    else:
        result = run_bandit(toy.GAUSSIAN, settings, p.bandit_steps, seeds, groups=toy.BANDIT_GROUPS,
                            group_size=toy.BANDIT_GROUP_SIZE, record_every=p.bandit_steps)
        gap = lambda final, optimum=result.meta["optimal_reward"]: optimum - final  # −inf reward → inf gap
    return [{"method": r["method"], "staleness": r["staleness"], "lr": r["lr"],
             "seed": r["seed"], "final_gap": gap(r["final_objective"])} for r in result.summary_rows()]


LLM_METHODS = (NAIVE, "gac", "lr_scale", "tis", "m2po", "bapo")


def llm_grid(profile: str) -> TuningGrid:
    p = lookup("llm_tuning", profile)
    return TuningGrid(STALE_DATA, LLM_METHODS, p.staleness, p.lrs, p.tuning_seeds, p.reporting_seeds)


def llm_runs(profile: str, device: str = "cpu", grid: TuningGrid | None = None, dry_run: bool = False) -> list[Run]:
    """The GRPO runs of ``grid`` (default ``llm_grid``): every cell × every seed, naive/GAC with the proximal ratio
    as in the LLM sweep (TIS, M2PO and BAPO correct against the behaviour policy); a dry run shrinks each run with
    ``dry_run_args``."""
    grid = llm_grid(profile) if grid is None else grid
    base = Args(**lookup("llm_tuning", profile).base, device=device, progress=False, on_nonfinite="mark")
    seeds = range(grid.tuning_seeds + grid.reporting_seeds)
    shrink = dry_run_args if dry_run else (lambda args: args)
    return [Run(shrink(replace(base, method=m, staleness=s, lr=lr, seed=seed)), ("tuned",))
            for m, s, lr in grid.cells() for seed in seeds]


def llm_table(profile: str, device: str = "cpu", grid: TuningGrid | None = None, log=print) -> pd.DataFrame:
    """One row per run of ``llm_runs`` (each cached like the sweep's runs): COLUMNS, with the final gap
    1 − final held-out accuracy (the error rate; inf if the run hit a non-finite step)."""
    return llm_table_of(results_of(llm_runs(profile, device, grid), device, log, name="llm tuning"))


def llm_table_of(results: list[tuple[Run, dict]]) -> pd.DataFrame:
    """One row per GRPO run of ``results`` (pairs of ``llm_runs`` and their results): COLUMNS, with the final gap
    1 − final held-out accuracy (the error rate; inf if the run hit a non-finite step)."""
    rows = [{"method": item.args.run_method, "staleness": item.args.staleness, "lr": item.args.lr,
             "seed": item.args.seed,
             "final_gap": math.inf if res["summary"]["nonfinite_at"] is not None
             else 1.0 - res["summary"]["final_accuracy"]} for item, res in results]
    return pd.DataFrame(rows, columns=list(COLUMNS))


# -- what it shows --------------------------------------------------------------------------------------
def tuned_tables(table: pd.DataFrame, grid: TuningGrid) -> dict[str, pd.DataFrame]:
    """The protocol on one scale: ``reported`` (each method at its tuned step size, reporting seeds),
    ``ranges`` (robust ranges on the reporting seeds) and ``winners`` (per staleness ≥ 1; sync is the reference)."""
    reported = report(table, grid.tuning, grid.reporting)
    ranges = robust_range(table, grid.reporting)
    return {"reported": reported, "ranges": ranges, "winners": winners(reported[reported["staleness"] > 0])}


def per_step_size(table: pd.DataFrame, staleness: int, seeds) -> pd.DataFrame:
    """Every method at every step size at ``staleness`` (and sync): mean final gap over ``seeds`` (inf if any
    diverged), diverged seeds, and the ratio to sync's mean gap at the same step size."""
    runs = table[table["seed"].isin(list(seeds)) & table["staleness"].isin([0, staleness])]
    finite = runs.assign(diverged=~np.isfinite(runs["final_gap"]))
    out = lr_scores(runs, seeds).merge(finite.groupby(["method", "staleness", "lr"], as_index=False)["diverged"].sum())
    sync = out[out["method"] == "sync"].set_index("lr")["final_gap"]
    return out.assign(ratio_to_sync=out["final_gap"] / out["lr"].map(sync))
