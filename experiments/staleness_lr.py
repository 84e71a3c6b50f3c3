"""The staleness × step-size law at the toy scales (issue 33.3): the largest stable step size at each staleness
s ∈ {1, 2, 4, 8, 16}, naive async and GAC (registry default: project, τ = 0, previous-gradient reference, gradient
space), and the exponent p of max_stable_lr ∝ s^(−p) beside theory's.

Theory: delayed GD on one eigen-direction is stable iff η·λ < a*(s) = 2 sin(π/(2(2s+1))) (``theory.stability``),
≈ π/(2s) for large s, so p → 1; fitted over s ∈ {1, …, 16} the exact curve has p ≈ 0.85. GAC's mean-field limit
1/cos(π/(2s+3)) (``theory.gac_stability``) tends to 1, p → 0.

**Stable**, two criteria (``CRITERIA``), each searched on its own: ``progress`` — a run of ``steps`` updates never
diverged (the simulator's own rule: not finite, or its loss / reward gap beyond 10⁶ × the initial one) and its final
objective gap (mean over the last tenth of the steps: the loss f(x) on the quadratic, J* − J on the bandit) is at
most ``GAP_FRACTION`` × the initial gap: it made progress and kept it; ``finite`` — it never diverged (fig4's rule).
A step size is stable for a (scale, method, s, criterion) when at least ⌈n/2⌉ of its n seeds are.
**Search.** Per seed, a geometric grid of ``grid_points`` step sizes; the bracket is the largest stable grid point
and the next one up, narrowed by ``refinements`` zooms (finer geometric points inside the seeds' brackets); the
seed's boundary is the final bracket's geometric midpoint. Each seed's noise is the same at every step size (common
random numbers), so a seed's outcome is a function of the step size alone. ``nonmonotone`` counts seeds with an
unstable grid point below their largest stable one (GAC at small steps: too slow to halve the gap within the run,
which is not instability).

Scales: ``quadratic`` (stale gradients, ``experiments.toy.QUADRATIC``, λ_max = 1), ``bandit_gaussian`` (stale data,
GRPO advantages, ``experiments.toy.GAUSSIAN``) and ``bandit_gaussian_mean`` (the same bandit with advantages r − mean
and no std: its gradient is the stale-gradient model's h⊙(μ_b − a*)(1 − 1/G) + noise, so a*(s) applies with
λ = h_max(1 − 1/G)), and ``llm``: the reproducible testbed (``experiments.llm_figures.BASE``; one 0.6M Qwen3 run per
warm start and step size, ``Law.llm_steps`` RL steps; its "seeds" are accepted warm starts), where a run is
stable under ``progress`` if it neither went non-finite nor collapsed (the trainer's rule,
``sim.schema.collapse_step``: a held-out accuracy below half of the best before it), and under ``finite`` if it
never went non-finite. No closed form gives the LLM's λ_max, so its theory_lr is NaN; its exponent is still
fitted beside theory's. ``llm_highsnr`` is the same search at the high-SNR configuration (``experiments.llm_highsnr``:
2,048 untied samples per step) with the uncorrected ratio, whose naive runs collapse at the study's shared step;
its runs cost many CPU-minutes each, so each warm start walks its grid from the top (``descend_boundaries``: down
to the first stable step, or up beyond the top while stable) and a run ends at its first collapse.
``python -m experiments.staleness_lr --profile full --out docs/data/staleness_lr_scaling.csv`` (toy scales;
``--scales`` adds ``llm`` or ``llm_highsnr``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np

from experiments.profiles import Law, lookup
from runtime.cli import choice, fail, folder, parse, whole

if TYPE_CHECKING:
    from sim.quadratic import QuadraticProblem

# the simulators, the run cache and theory/ (sympy) are imported where they run (--help answers without them)

STALENESS = (1, 2, 4, 8, 16)
METHODS = ("naive", "gac")
SCALES = ("quadratic", "bandit_gaussian", "bandit_gaussian_mean")
"""The toy scales (the default); ``ALL_SCALES`` adds the LLM testbed."""
LLM_SCALES = ("llm", "llm_highsnr")
"""The LLM scales: the 128-sample testbed, and the high-SNR configuration (``experiments.llm_highsnr.BASE``) with
the uncorrected ratio, where naive async collapses at the shared step."""
ALL_SCALES = (*SCALES, *LLM_SCALES)
DESCEND = {"llm_highsnr": 2}
"""Scales searched by ``descend_boundaries`` (runs of many CPU-minutes each, most grid points far from the
boundary), with the points its walks may climb beyond the range's top (GAC holds at the top of the high-SNR range);
the others by ``search_boundaries``."""
CRITERIA = ("progress", "finite")
GAP_FRACTION = 0.5
"""A stable run ends with its objective gap at most this share of the initial gap."""
SEARCH_RANGE = {"quadratic": (0.01, 8.0), "bandit_gaussian": (2.0**-9, 2.0**3), "bandit_gaussian_mean": (0.01, 8.0),
                "llm": (1.5e-4, 1.92e-2), "llm_highsnr": (1.5e-5, 1.92e-3)}
"""Each scale's step-size grid [low, high]: wide enough that every boundary measured so far lies inside it (a seed
stable at ``high`` or unstable at ``low`` is reported as censored, never clipped silently)."""
ADVANTAGE = {"bandit_gaussian": "grpo", "bandit_gaussian_mean": "mean"}
BOOTSTRAP_RESAMPLES = 2000
INTERVAL = 0.90


COLUMNS = ("scale", "criterion", "method", "staleness", "max_stable_lr", "lr_all_seeds", "lr_any_seed", "seeds",
           "seeds_censored_low", "seeds_censored_high", "seeds_nonmonotone", "bracket_ratio", "steps",
           "theory_lr", "theory", "criterion_rule")
"""One row per scale × method × staleness. max_stable_lr: the largest step size stable on ≥ ⌈n/2⌉ of the n seeds
(the ⌈n/2⌉-th largest per-seed boundary); lr_all_seeds / lr_any_seed: the smallest / largest per-seed boundary;
seeds_censored_low/high: seeds unstable at the grid's low end / stable at its high end (their boundary is the edge);
bracket_ratio: the largest hi/lo of the seeds' final brackets (the resolution); theory_lr: theory's largest stable
step size where a closed form applies (NaN elsewhere), named in ``theory``; criterion (``CRITERIA``) and
criterion_rule: how "stable" was decided."""
FIT_COLUMNS = ("scale", "criterion", "method", "exponent", "exponent_low", "exponent_high", "cells_censored",
               "theory_exponent", "asymptotic_exponent", "theory", "staleness", "seeds", "fit")
"""One row per scale × method: the fitted p of max_stable_lr ∝ s^(−p) (least squares in log-log over the staleness
values), its 90 % seed-bootstrap interval (NaN where ``cells_censored`` > 0: a boundary beyond the search range), and
the same fit applied to theory's exact curve over the same s."""


def criterion_rule(criterion: str, steps: int, scale: str = "quadratic") -> str:
    """The words of the CSV's ``criterion_rule`` column: how a run and a step size were judged stable on ``scale``."""
    if scale in LLM_SCALES:
        from experiments.early_warning import LLM_COLLAPSE_FRACTION

        run = "it never went non-finite"
        if criterion == "progress":
            run += (f" and its final held-out accuracy is >= {LLM_COLLAPSE_FRACTION:g} x the best of its evaluations "
                    "(the start included)")
        if scale in DESCEND:
            run = "it never went non-finite" + (" and no held-out evaluation fell below "
                                                 f"{LLM_COLLAPSE_FRACTION:g} x the best before it (the run ends at "
                                                 "such a collapse)" if criterion == "progress" else "")
            search = (f"a walk along a geometric grid (and {DESCEND[scale]} points beyond its top) from its top down "
                      "to the first stable point, or up to the first unstable one, bracketed with the next point up "
                      "and halved (geometric midpoint) per zoom")
        else:
            search = ("largest stable point of a geometric grid and the next one up, narrowed by one point inside it "
                      "per zoom")
        return (f"{steps} RL steps; a run is stable if {run}; a step size is stable if >= half of the warm starts' "
                f"runs are; boundary per warm start: {search}")
    run = "it never diverged (not finite or gap > 1e6 x initial)"
    if criterion == "progress":
        run += f" and its mean objective gap over the last tenth of the steps is <= {GAP_FRACTION:g} x the initial gap"
    return (f"{steps} steps; a run is stable if {run}; a step size is stable if >= half of the seeds are; boundary "
            "per seed: largest stable point of a geometric grid and the next one up, narrowed by finer grids inside it")


# ---------------------------------------------------------------------------------------------
# The search (generic: any vectorized predicate of (cell, step size) over seeds)
# ---------------------------------------------------------------------------------------------

Evaluate = Callable[[Sequence[tuple[int, float]]], np.ndarray]
"""(cell index, step size) pairs → bool array (pairs, seeds): which seeds' runs are stable at that step size."""


@dataclass
class Boundaries:
    """Per (cell, seed) results of ``search_boundaries``, each an array of shape (cells, seeds)."""

    boundary: np.ndarray
    """the geometric midpoint of the final bracket; the grid's edge for a censored seed"""
    low: np.ndarray
    """largest step size found stable (0 if none on the grid)"""
    high: np.ndarray
    """smallest step size found unstable (inf if none on the grid)"""
    censored_low: np.ndarray
    censored_high: np.ndarray
    nonmonotone: np.ndarray


def search_boundaries(evaluate: Evaluate, cells: int, seeds: int, low: float, high: float, grid_points: int,
                      refinements: int, refine_points: int = 8) -> Boundaries:
    """Each (cell, seed)'s largest stable step size in [low, high]: the largest stable point of a geometric grid,
    bracketed with the next grid point up, then ``refinements`` zooms: ``refine_points`` geometric points inside
    every distinct bracket of a cell's seeds, run on every seed, and each seed's bracket narrowed to its largest
    stable point inside it and the next point up (each zoom divides a bracket's log width by refine_points + 1).

    ``evaluate`` is called once for the grid (cells × grid_points pairs) and once per zoom (refine_points pairs per
    distinct open bracket); every pair runs on all seeds and seeds sharing a bracket share its points (a bisection
    per seed would run each seed's step size on every seed and use one column). A seed stable at the grid's last
    point or stable nowhere on it is censored (boundary = that edge) and not refined.
    """
    if not 0 < low < high or grid_points < 2 or refinements < 0 or refine_points < 1 or cells < 1 or seeds < 1:
        raise ValueError(f"need 0 < low < high, grid_points >= 2, refinements >= 0, refine_points >= 1, cells, seeds "
                         f">= 1; got {low}, {high}, {grid_points}, {refinements}, {refine_points}, {cells}, {seeds}")
    grid = np.geomspace(low, high, grid_points)
    stable = np.asarray(evaluate([(c, float(lr)) for c in range(cells) for lr in grid]), dtype=bool)
    stable = stable.reshape(cells, grid_points, seeds)
    index = np.arange(grid_points)[None, :, None]
    last = np.where(stable, index, -1).max(1)  # (cells, seeds): the largest stable grid point, −1 if none
    censored_low, censored_high = last < 0, last == grid_points - 1
    lo = np.where(last >= 0, grid[np.clip(last, 0, grid_points - 1)], 0.0)
    hi = np.where(last < grid_points - 1, grid[np.clip(last + 1, 0, grid_points - 1)], np.inf)
    nonmonotone = (~stable & (index < last[:, None, :])).any(1)
    open_ = ~(censored_low | censored_high)
    for _ in range(refinements):
        pairs = []  # refine_points interior geometric points in every distinct open bracket of every cell
        for c in range(cells):
            for bracket_lo, bracket_hi in sorted({(lo[c, k], hi[c, k]) for k in np.nonzero(open_[c])[0]}):
                pairs += [(c, float(lr)) for lr in np.geomspace(bracket_lo, bracket_hi, refine_points + 2)[1:-1]]
        if not pairs:
            break
        outcome = np.asarray(evaluate(pairs), dtype=bool)
        cell_of, lr_of = np.array([c for c, _ in pairs]), np.array([lr for _, lr in pairs])
        for c, k in zip(*np.nonzero(open_), strict=True):
            inside = (cell_of == c) & (lr_of > lo[c, k]) & (lr_of < hi[c, k])
            stable_inside = inside & outcome[:, k]
            if stable_inside.any():
                lo[c, k] = lr_of[stable_inside].max()
            above = inside & (lr_of > lo[c, k])
            if above.any():
                hi[c, k] = lr_of[above].min()
    boundary = np.where(censored_low, low, np.where(censored_high, high, np.sqrt(lo * np.where(open_, hi, 1.0))))
    return Boundaries(boundary, lo, hi, censored_low, censored_high, nonmonotone)


EvaluateRuns = Callable[[Sequence[tuple[int, int, float]]], Sequence[bool]]
"""(cell index, seed index, step size) triples → whether each one run is stable."""


def walk_grid(low: float, high: float, grid_points: int, above: int = 0) -> np.ndarray:
    """``grid_points`` geometric points over [low, high] and ``above`` more at the same ratio beyond ``high``."""
    grid = np.geomspace(low, high, grid_points)
    return np.concatenate([grid, high * (grid[1] / grid[0]) ** np.arange(1, above + 1)])


def descend_boundaries(evaluate: EvaluateRuns, cells: int, seeds: int, low: float, high: float, grid_points: int,
                       refinements: int, above: int = 0) -> Boundaries:
    """Each (cell, seed)'s largest stable step size, for runs too costly to grid: a walk along a geometric grid of
    ``grid_points`` over [low, high] and ``above`` more points at the same ratio beyond ``high``, from ``high`` down
    to the first stable point, or, where ``high`` is stable, up to the first unstable one; the bracket (the
    largest stable point and the one above it) then narrowed by ``refinements`` zooms at its geometric midpoint.
    Every (cell, seed) walks on its own; each call of ``evaluate`` holds the next run of every walk still open, so the
    runs of one round can run side by side.

    Where stability falls monotonically with the step this is ``search_boundaries``' boundary with one point per zoom;
    it runs no point beyond the first change, so it cannot see a non-monotone seed (``nonmonotone`` is all False).
    A seed stable at the last point or at none is censored (boundary = that end of the walk's grid).
    """
    if not 0 < low < high or grid_points < 2 or refinements < 0 or above < 0 or cells < 1 or seeds < 1:
        raise ValueError(f"need 0 < low < high, grid_points >= 2, refinements >= 0, above >= 0, cells, seeds >= 1; "
                         f"got {low}, {high}, {grid_points}, {refinements}, {above}, {cells}, {seeds}")
    grid = walk_grid(low, high, grid_points, above)
    last = len(grid) - 1
    at = np.full((cells, seeds), grid_points - 1)  # the grid point each walk tries next: ``high`` first
    first = np.full((cells, seeds), -1)  # the outcome at ``high``: −1 not yet run, 0 unstable (walk down), 1 stable
    lo, hi = np.zeros((cells, seeds)), np.full((cells, seeds), np.inf)
    walking = np.ones((cells, seeds), dtype=bool)
    while walking.any():
        open_ = list(zip(*np.nonzero(walking), strict=True))
        for (c, k), ok in zip(open_, evaluate([(c, k, float(grid[at[c, k]])) for c, k in open_]), strict=True):
            if first[c, k] < 0:
                first[c, k] = int(ok)
            if ok and first[c, k] == 0 or not ok and first[c, k] == 1:  # the outcome changed: bracketed
                walking[c, k] = False
                lo[c, k], hi[c, k] = (grid[at[c, k]], grid[at[c, k] + 1]) if ok else (grid[at[c, k] - 1],
                                                                                       grid[at[c, k]])
            elif at[c, k] == (last if ok else 0):  # stable at the last point, or unstable at the first: censored
                walking[c, k] = False
                lo[c, k], hi[c, k] = (grid[last], np.inf) if ok else (0.0, grid[0])
            else:
                at[c, k] += 1 if ok else -1
    censored_low, censored_high = lo == 0, lo == grid[last]
    open_mask = ~(censored_low | censored_high)
    for _ in range(refinements):
        open_ = list(zip(*np.nonzero(open_mask), strict=True))
        if not open_:
            break
        middle = {(c, k): float(np.sqrt(lo[c, k] * hi[c, k])) for c, k in open_}
        for (c, k), ok in zip(open_, evaluate([(c, k, middle[c, k]) for c, k in open_]), strict=True):
            lo[c, k], hi[c, k] = (middle[c, k], hi[c, k]) if ok else (lo[c, k], middle[c, k])
    top = grid[last]
    boundary = np.where(censored_low, low, np.where(censored_high, top, np.sqrt(lo * np.where(open_mask, hi, 1.0))))
    return Boundaries(boundary, lo, hi, censored_low, censored_high, np.zeros((cells, seeds), dtype=bool))


def stable_quorum(boundaries: np.ndarray) -> np.ndarray:
    """The largest step size stable on ≥ ⌈n/2⌉ of n seeds: the ⌈n/2⌉-th largest boundary along the last axis."""
    n = boundaries.shape[-1]
    return np.sort(boundaries, axis=-1)[..., n - math.ceil(n / 2)]


def fit_exponent(staleness: Sequence[float], lrs: Sequence[float]) -> float:
    """p of lr ∝ s^(−p): minus the least-squares slope of log lr against log s."""
    slope = np.polyfit(np.log(np.asarray(staleness, dtype=float)), np.log(np.asarray(lrs, dtype=float)), 1)[0]
    return float(-slope)


def bootstrap_exponent(staleness: Sequence[float], boundaries: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                       interval: float = INTERVAL, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of ``fit_exponent`` over seed resamples: ``boundaries`` is (len(staleness), seeds) for one
    (scale, method); each resample draws n seeds with replacement (the same seeds at every s: a seed's noise is
    shared across s) and refits on ``stable_quorum`` of the drawn seeds."""
    rng = np.random.default_rng(seed)
    n = boundaries.shape[1]
    draws = rng.integers(0, n, size=(resamples, n))
    quorum = stable_quorum(boundaries[:, draws].transpose(1, 0, 2))  # (resamples, len(staleness))
    log_s = np.log(np.asarray(staleness, dtype=float))
    slopes = np.polyfit(log_s, np.log(quorum).T, 1)[0]
    tail = (1 - interval) / 2
    return float(np.quantile(-slopes, tail)), float(np.quantile(-slopes, 1 - tail))


# ---------------------------------------------------------------------------------------------
# The scales: which runs a (cell, step size) pair stands for, and theory's answer
# ---------------------------------------------------------------------------------------------

def cells() -> list[tuple[str, int]]:
    """(method, staleness) of every cell, method-major."""
    return [(method, s) for method in METHODS for s in STALENESS]


def stability_of(gap: np.ndarray, initial_gap: float, diverged: np.ndarray, criterion: str = "progress") -> np.ndarray:
    """The run-level criterion: not diverged, and for ``progress`` final gap ≤ GAP_FRACTION × initial gap (a NaN
    gap is unstable)."""
    if criterion not in CRITERIA:
        raise ValueError(f"unknown criterion {criterion!r}; choose from {', '.join(CRITERIA)}")
    stable = ~np.asarray(diverged, dtype=bool)
    if criterion == "finite":
        return stable
    gap = np.asarray(gap, dtype=float)
    return stable & np.isfinite(gap) & (gap <= GAP_FRACTION * initial_gap)


def quadratic_evaluator(problem: QuadraticProblem, steps: int, seeds: int, cell_list: list[tuple[str, int]],
                        criterion: str = "progress") -> Evaluate:
    """``Evaluate`` on the noisy quadratic: every pair one setting run on all seeds in one grid."""
    from sim.grid import setting
    from sim.quadratic import run_quadratic

    initial = float(problem.objective(problem.curvatures().new_full((problem.dim,), problem.init_scale)))

    def evaluate(pairs):
        settings = [setting(cell_list[c][0], cell_list[c][1], lr) for c, lr in pairs]
        result = run_quadratic(problem, settings, steps, seeds, record_every=steps)
        return _stable_matrix(result, lambda final: final, initial, len(pairs), seeds, criterion)
    return evaluate


def bandit_evaluator(advantage: str, steps: int, seeds: int, cell_list: list[tuple[str, int]],
                     criterion: str = "progress") -> Evaluate:
    """``Evaluate`` on the Gaussian bandit (``experiments.toy`` groups) with ``advantage``."""
    from experiments import toy
    from sim.bandit import run_bandit
    from sim.grid import setting

    def evaluate(pairs):
        settings = [setting(cell_list[c][0], cell_list[c][1], lr) for c, lr in pairs]
        result = run_bandit(toy.GAUSSIAN, settings, steps, seeds, groups=toy.BANDIT_GROUPS,
                            group_size=toy.BANDIT_GROUP_SIZE, advantage=advantage, record_every=steps)
        optimum = result.meta["optimal_reward"]
        return _stable_matrix(result, lambda final: optimum - final, optimum - result.meta["initial_reward"],
                              len(pairs), seeds, criterion)
    return evaluate


LLM_BASE: dict = {}
"""Args changes of the LLM scales on top of their configuration (tests put the tiny model here)."""


def llm_config(scale: str) -> dict:
    """The trainer arguments of an LLM scale: the testbed's ``BASE``, or the high-SNR study's with the uncorrected
    ratio."""
    from experiments import llm_figures, llm_highsnr

    return llm_figures.BASE if scale == "llm" else dict(llm_highsnr.BASE, ratio_to="proximal")


def llm_runs(steps: int, warm_starts: Sequence[int], cell_list: list[tuple[str, int]], criterion: str = "progress",
             jobs: int | None = None, scale: str = "llm") -> EvaluateRuns:
    """``EvaluateRuns`` on an LLM scale: each (cell, warm start, step size) one run (RL seed 0), cached, ``jobs`` at a
    time; under ``progress`` a run ends at its first collapse (its outcome is then decided)."""
    from experiments.llm import Run, results_of
    from sim.llm.train import Args

    base = Args(**{**llm_config(scale), "snr_every": 1000, "eval_every": min(20, steps), **LLM_BASE}, steps=steps,
                progress=False, on_nonfinite="mark", stop_at_collapse=criterion == "progress")

    def evaluate(triples):
        runs = [Run(replace(base, method=cell_list[c][0], staleness=cell_list[c][1], lr=lr, warm_seed=warm_starts[k],
                            seed=0), ("staleness_lr",)) for c, k, lr in triples]
        stable = []
        for _, outcome in results_of(runs, jobs=jobs, name=f"staleness x lr ({scale})"):  # a line per finished run
            summary = outcome["summary"]
            stable.append(summary["nonfinite_at"] is None and (criterion == "finite" or not summary["collapsed"]))
        return stable
    return evaluate


def llm_evaluator(steps: int, warm_starts: Sequence[int], cell_list: list[tuple[str, int]],
                  criterion: str = "progress", jobs: int | None = None, scale: str = "llm") -> Evaluate:
    """``Evaluate`` on an LLM scale: every pair one run per warm start (``llm_runs``)."""
    runs = llm_runs(steps, warm_starts, cell_list, criterion, jobs, scale)

    def evaluate(pairs):
        triples = [(c, k, lr) for c, lr in pairs for k in range(len(warm_starts))]
        return np.asarray(runs(triples), dtype=bool).reshape(len(pairs), len(warm_starts))
    return evaluate


def _stable_matrix(result, gap_of, initial_gap: float, pairs: int, seeds: int, criterion: str) -> np.ndarray:
    final = result.summary["final_objective"].numpy().reshape(pairs, seeds)
    diverged = result.summary["diverged"].numpy().reshape(pairs, seeds)
    return stability_of(gap_of(final), initial_gap, diverged, criterion)


def evaluator(scale: str, profile: Law, criterion: str) -> tuple[Evaluate, int]:
    """The scale's ``Evaluate`` under ``criterion`` and its run length."""
    from experiments import toy

    if scale == "quadratic":
        return (quadratic_evaluator(toy.QUADRATIC, profile.quad_steps, profile.seeds, cells(), criterion),
                profile.quad_steps)
    if scale in ADVANTAGE:
        return (bandit_evaluator(ADVANTAGE[scale], profile.bandit_steps, profile.seeds, cells(), criterion),
                profile.bandit_steps)
    if scale in LLM_SCALES:
        return (llm_evaluator(profile.llm_steps, profile.llm_warm_starts, cells(), criterion, scale=scale),
                profile.llm_steps)
    raise ValueError(f"unknown scale {scale!r}; choose from {', '.join(ALL_SCALES)}")


def theory_curvature(scale: str) -> float:
    """λ_max of the scale's stale-gradient model (NaN where none is known: GRPO's std-normalized advantages)."""
    from experiments import toy

    if scale == "quadratic":
        return toy.QUADRATIC.curvature_max
    if scale == "bandit_gaussian_mean":
        return toy.GAUSSIAN.curvature_max * (1 - 1 / toy.BANDIT_GROUP_SIZE)
    return math.nan


THEORY_NAMES = {"naive": "delayed GD a*(s) = 2 sin(pi/(2(2s+1))) / lambda_max",
                "gac": "mean-field GAC limit 1/cos(pi/(2s+3)) / lambda_max (a lower bound, theory/README.md)"}


def stability_boundary_closed_form(staleness):
    """``theory.stability.stability_boundary_closed_form`` (a*(s)), imported on first use: sympy loads with it."""
    from theory.stability import stability_boundary_closed_form as closed_form

    return closed_form(staleness)


def theory_step(method: str, staleness) -> np.ndarray:
    """Theory's largest stable η·λ_max at each staleness: a*(s) (naive) or the mean-field GAC limit (gac)."""
    from theory.gac_stability import top_mode_limit

    s = np.atleast_1d(np.asarray(staleness))
    if method == "naive":
        return stability_boundary_closed_form(s)
    return np.array([top_mode_limit(int(k))["a_max"] for k in s])


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

def search_scale(scale: str, profile: str, criterion: str = "progress", refinements: int | None = None) -> dict:
    """Every cell's per-seed boundaries on ``scale`` under ``criterion`` (JSON-able: lists), with ``refinements``
    zooms of each bracket (None: the profile's); computed, not cached (``law_tables`` caches it as ``scale_unit``; a
    figure's unit is cached by the driver)."""
    p = lookup("law", profile)
    if refinements is not None:
        p = replace(p, refinements=refinements)
    if criterion not in CRITERIA:
        raise ValueError(f"unknown criterion {criterion!r}; choose from {', '.join(CRITERIA)}")
    low, high = SEARCH_RANGE[scale]
    if scale in DESCEND:  # one run per walk's step, not a grid's evaluator
        steps, seeds = p.llm_steps, len(p.llm_warm_starts)
        found = descend_boundaries(llm_runs(steps, p.llm_warm_starts, cells(), criterion, scale=scale), len(cells()),
                                   seeds, low, high, p.llm_grid_points, p.refinements, DESCEND[scale])
        return _found(scale, criterion, steps, seeds, search_edges(scale, p), found)
    evaluate, steps = evaluator(scale, p, criterion)
    if scale in LLM_SCALES:
        seeds = len(p.llm_warm_starts)
        found = search_boundaries(evaluate, len(cells()), seeds, low, high, p.llm_grid_points, p.refinements,
                                  p.llm_refine_points)
    else:
        seeds = p.seeds
        found = search_boundaries(evaluate, len(cells()), seeds, low, high, p.grid_points, p.refinements)
    return _found(scale, criterion, steps, seeds, search_edges(scale, p), found)


def search_edges(scale: str, p: Law) -> list[float]:
    """The lowest and highest step size a seed of ``scale`` can reach under profile ``p``: the search range, its top
    raised to the last point of the walk's grid where the scale walks (``DESCEND``)."""
    low, high = SEARCH_RANGE[scale]
    if scale in DESCEND:
        high = float(walk_grid(low, high, p.llm_grid_points, DESCEND[scale])[-1])
    return [low, high]


def _found(scale: str, criterion: str, steps: int, seeds: int, edges: list[float], found: Boundaries) -> dict:
    """``search_scale``'s JSON-able result; ``edges``: the lowest and highest step size a seed could reach."""
    return {"scale": scale, "criterion": criterion, "steps": steps, "seeds": seeds, "edges": edges,
            "cells": [list(c) for c in cells()],
            **{name: getattr(found, name).tolist() for name in ("boundary", "low", "high", "censored_low",
                                                                 "censored_high", "nonmonotone")}}


def scale_unit(scale: str, profile: str, criterion: str = "progress", refinements: int | None = None):
    """``search_scale`` as the command line's unit (figs3 declares its own unit of the same search, under another
    kind)."""
    from runtime.cache import unit

    if refinements is None:  # the profile's zooms: the unit figs3 shares
        return unit(f"staleness_lr_{scale}_{criterion}", search_scale, scale, profile, criterion)
    return unit(f"staleness_lr_{scale}_{criterion}_zoom{refinements}", search_scale, scale, profile, criterion,
                refinements)


def table_rows(found: dict) -> list[dict]:
    """COLUMNS rows of one scale's ``search_scale`` result."""
    rows = []
    lam = theory_curvature(found["scale"])
    for index, (method, s) in enumerate(found["cells"]):
        boundary = np.asarray(found["boundary"][index])
        lo, hi = np.asarray(found["low"][index]), np.asarray(found["high"][index])
        open_ = np.isfinite(hi) & (lo > 0)
        rows.append({"scale": found["scale"], "criterion": found["criterion"], "method": method, "staleness": s,
                     "max_stable_lr": float(stable_quorum(boundary)), "lr_all_seeds": float(boundary.min()),
                     "lr_any_seed": float(boundary.max()), "seeds": found["seeds"],
                     "seeds_censored_low": int(np.sum(found["censored_low"][index])),
                     "seeds_censored_high": int(np.sum(found["censored_high"][index])),
                     "seeds_nonmonotone": int(np.sum(found["nonmonotone"][index])),
                     "bracket_ratio": float(np.max(hi[open_] / lo[open_])) if open_.any() else math.nan,
                     "steps": found["steps"], "theory_lr": float(theory_step(method, s)[0] / lam),
                     "theory": THEORY_NAMES[method] if math.isfinite(lam) else "none (no closed form)",
                     "criterion_rule": criterion_rule(found["criterion"], found["steps"], found["scale"])})
    return rows


def fit_rows(found: dict) -> list[dict]:
    """FIT_COLUMNS rows of one scale's ``search_scale`` result. A method with a cell whose max_stable_lr sits at the
    search range's edge (censored: the boundary is beyond the range) gets no exponent (NaN): the edge is not a
    measurement."""
    rows = []
    edges = found.get("edges", SEARCH_RANGE[found["scale"]])  # a walk may climb beyond the range's top
    for method in METHODS:
        index = [i for i, (m, _) in enumerate(found["cells"]) if m == method]
        staleness = [found["cells"][i][1] for i in index]
        boundaries = np.asarray([found["boundary"][i] for i in index])
        quorum = stable_quorum(boundaries)
        censored = int(np.sum(np.isin(quorum, edges)))
        exponent, (low, high) = fit_exponent(staleness, quorum), bootstrap_exponent(staleness, boundaries)
        if censored:
            exponent = low = high = math.nan
        rows.append({"scale": found["scale"], "criterion": found["criterion"], "method": method,
                     "exponent": exponent, "exponent_low": low, "exponent_high": high, "cells_censored": censored,
                     "theory_exponent": fit_exponent(staleness, theory_step(method, staleness)),
                     "asymptotic_exponent": 1.0 if method == "naive" else 0.0, "theory": THEORY_NAMES[method],
                     "staleness": " ".join(map(str, staleness)), "seeds": found["seeds"],
                     "fit": f"least squares of log max_stable_lr on log s; {INTERVAL:.0%} percentile interval over "
                            f"{BOOTSTRAP_RESAMPLES} seed resamples"})
    return rows


def law_tables(profile: str = "quick", scales: Sequence[str] = SCALES, criteria: Sequence[str] = CRITERIA,
               log: Callable[..., None] | None = None, refinements: int | None = None) -> dict[str, list[dict]]:
    """{"table": COLUMNS rows, "fit": FIT_COLUMNS rows} over ``scales`` × ``criteria`` (each search cached), with
    ``refinements`` zooms per bracket (None: the profile's)."""
    unknown = [s for s in scales if s not in ALL_SCALES] + [c for c in criteria if c not in CRITERIA]
    if unknown:
        raise ValueError(f"unknown scale(s) or criteria {unknown}; choose from {', '.join(ALL_SCALES + CRITERIA)}")
    lookup("law", profile)
    from runtime.graph import compute
    from runtime.paths import force_recompute

    units = [scale_unit(scale, profile, criterion, refinements) for scale in scales for criterion in criteria]
    # the llm scale's search computes its GRPO runs through the graph itself: its units run here, one after another
    values = compute(units, 1 if set(LLM_SCALES) & set(scales) else None, force_recompute(), name="staleness_lr",
                     log=log if log is not None else (lambda *a, **k: None))
    found = [values[u.name] for u in units]
    return {"table": [row for f in found for row in table_rows(f)], "fit": [row for f in found for row in fit_rows(f)]}


def fit_path(out: Path) -> Path:
    """Where the fit table goes beside ``out``: NAME_fit.csv."""
    return out.with_name(f"{out.stem}_fit.csv")


@dataclass(frozen=True)
class StalenessLRArgs:
    """The staleness × step-size law at the toy scales: writes the max-stable-step table and the exponent fits."""

    out: Annotated[Path, folder("--out", "give the table's CSV path, e.g. --out out/law.csv")]
    """CSV of the table (atomically); the fits go beside it as NAME_fit.csv"""
    profile: Annotated[Literal["quick", "full"], choice("--profile", ("quick", "full"))] = "quick"
    """run sizes (the ``law`` profiles of ``experiments.profiles``)"""
    force: bool = False
    """overwrite committed (git-tracked) CSVs with the quick profile"""
    scales: tuple[Annotated[Literal[ALL_SCALES], choice("--scales", ALL_SCALES)], ...] = SCALES
    """the scales to search (llm: the 0.6M testbed, hours of CPU on the full profile; llm_highsnr: tens of hours)"""
    criteria: tuple[Annotated[Literal[CRITERIA], choice("--criteria", CRITERIA)], ...] = CRITERIA
    """the stability criteria to search, each on its own (at llm_highsnr only progress, the collapse, ever fires)"""
    refinements: Annotated[int | None, whole("--refinements", 0, "zooms")] = None
    """zooms of each seed's bracket, each halving it in log step size (default: the profile's); fewer zooms reuse
    the runs of a longer search from the run cache"""


def main(argv=None) -> int:
    """``python -m experiments.staleness_lr --profile quick|full --out PATH.csv``"""
    from runtime.files import check_output_files, write_records

    args = parse(StalenessLRArgs, argv, prog="python -m experiments.staleness_lr")
    try:
        check_output_files(args.out, [args.out, fit_path(args.out)], args.profile, args.force)
    except ValueError as err:
        fail("python -m experiments.staleness_lr", str(err))
    # each search on one torch thread (a unit)
    tables = law_tables(args.profile, args.scales, args.criteria, log=print, refinements=args.refinements)
    write_records(tables["table"], args.out, COLUMNS)
    write_records(tables["fit"], fit_path(args.out), FIT_COLUMNS)
    for row in tables["fit"]:
        print(f"{row['scale']:<22} {row['criterion']:<9} {row['method']:<6} p = {row['exponent']:.3f} "
              f"[{row['exponent_low']:.3f}, {row['exponent_high']:.3f}]  theory {row['theory_exponent']:.3f} "
              f"(asymptotic {row['asymptotic_exponent']:g})")
    print(f"wrote {args.out} and {fit_path(args.out)}")
    return 0


__all__ = ["search_boundaries", "descend_boundaries", "walk_grid", "search_edges",
           "stable_quorum", "fit_exponent", "bootstrap_exponent", "search_scale", "table_rows",
           "fit_rows", "law_tables", "COLUMNS",
           "FIT_COLUMNS", "STALENESS", "SCALES", "ALL_SCALES", "main"]

if __name__ == "__main__":
    sys.exit(main())
