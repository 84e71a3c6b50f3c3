"""The verdict's arms in the toys (issue 20): each stabilizer combination at its own best step size (fig8's
protocol, ``experiments.tuning``), with Adam and heavy-ball SGD, at one update per batch and at the LLM's structure
(K updates per batch, clipped ratio to π_b), on the Gaussian bandit (stale data) and the quadratic (stale gradients).

``toy_verdict_rows(profile)`` is fig10's toy input; ``python -m experiments.verdict_toys --profile quick --out X.csv``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from experiments.profiles import VerdictToys, lookup
from runtime.cli import choice, fail, folder, parse

if TYPE_CHECKING:
    import pandas as pd

# pandas and the simulators are imported where they run (--help answers without them)

TOY_KL_TARGET = 0.02
"""κ of the toys' KL-target arms, fixed by a rule before any verdict run: κ = ε²/2, ε = 0.2 the clipped ratio's
half-width. Under π_b the log-ratio log(π_θ/π_b) has variance ≈ 2·KL(π_b ‖ π_θ) (to second order; exactly for the
Gaussian bandit's mean shift), so at KL = ε²/2 a typical sample's ratio sits at the clip's edge 1 ± ε, beyond which
the clip zeroes its gradient. The same bound is M2PO's τ_M2 = 0.04 on E[(log r)²] ≈ 2·KL. (Sync's KL to π_b is 0 at
one update per batch, so no fraction of it could serve.)"""
RATIO_CLIP_EPS = 0.2
"""ε of the LLM structure's clipped ratio: the LLM trainer's clip_eps."""
LLM_UPDATES = 2
"""Optimizer updates per batch in the LLM structure: the LLM's GAC-table configuration (2 updates per RL step)."""
STRUCTURES = {"one_update": {"updates_per_batch": 1, "ratio_clip_eps": None},
              "llm": {"updates_per_batch": LLM_UPDATES, "ratio_clip_eps": RATIO_CLIP_EPS}}
OPTIMIZERS = ("adam", "sgd_momentum")
STALENESS = (16, 4)
GAC_SPACES = ("gradient", "update", "momentum")
NEAR_BEST = 0.1
"""The robust range (``stats.near_best_range``): the contiguous run of grid step sizes around the arm's best whose
mean final gap is within 10 % of the best."""

ARMS: dict[str, tuple[str, dict]] = {
    "sync": ("naive", {}),
    "naive": ("naive", {}),
    **{f"gac_{space}": ("gac", {"space": space}) for space in GAC_SPACES},
    "braking": ("braking", {}),
    "tis": ("tis", {}),
    "kl_target": ("kl_target", {"kl_target": TOY_KL_TARGET}),
    "vcpo": ("vcpo", {}),
}
"""arm → (method, parameters); registry defaults otherwise (GAC: project at τ = 0, prev reference; braking α = 1;
VCPO: ρ_ref = 1, power ½ (the Adam rule, kept for heavy-ball SGD too), its baseline on)."""
COMBINATIONS: dict[str, tuple[str, dict]] = {"gac+tis": ("gac+tis", {}),
                                             "kl_target+gac": ("gac+kl_target", {"kl_target": TOY_KL_TARGET})}
"""Combinations with GAC: run in every space, reported in the space whose GAC-alone arm tuned best (tuning seeds)."""
SIM_ARMS = {"bandit_gaussian": (*ARMS, *COMBINATIONS),
            "quadratic": ("sync", "naive", *(f"gac_{space}" for space in GAC_SPACES), "braking")}
"""The arms that apply: TIS, the KL to π_b and VCPO's importance weights need a behaviour policy (stale data)."""
SIM_STRUCTURES = {"bandit_gaussian": ("one_update", "llm"), "quadratic": ("one_update",)}

LR_GRID = tuple(2.0 ** k for k in range(-12, 4))
"""Step sizes 2^-12 … 2^3 (points 2× apart), the same for every arm, optimizer and sim: a grid up to 2^-2 puts
GAC in update and momentum space at its top edge (their projected steps are short), none below 2^-9; ``best_at_edge``
flags any arm whose best is still at an edge."""


COLUMNS = ("sim", "optimizer", "structure", "staleness", "arm", "objective_fn", "direction_control", "gac_space",
           "step_control", "best_lr", "best_at_edge", "robust_low", "robust_high", "range_at_edge", "final",
           "final_low", "final_high", "diverged", "gap_recovered", "cos_update", "cos_prev", "kl_behaviour")
"""One row per sim × optimizer × structure × staleness × arm. final: the final loss (quadratic) or reward gap J* − J
(bandit), mean over reporting seeds at the arm's best step size (picked on tuning seeds), [final_low, final_high] its
95 % seed-bootstrap interval; gap_recovered = (naive − arm)/(naive − sync); cos_update: mean cosine of consecutive
parameter updates Δθ (the grid's cos_applied: Δθ = −η_t·applied step, η_t > 0), cos_prev: of consecutive raw
gradients; kl_behaviour: mean KL(π_b ‖ π_θ) (NaN on the quadratic). robust_low/high: the contiguous run of step sizes
within 10 % of the arm's best (reporting seeds); *_at_edge: the best (or the range) touches the grid's edge."""


def _run_summaries(sim: str, structure: str, profile: str, settings: list) -> list[dict]:
    """One row per run of ``settings`` × seeds: run key (the setting's label), optimizer, staleness, lr, seed,
    final_gap (inf if diverged), cos_update, cos_prev, kl_behaviour."""
    from experiments import toy
    from sim.bandit import run_bandit
    from sim.quadratic import run_quadratic

    p = lookup("verdict_toys", profile)
    seeds = p.tuning_seeds + p.reporting_seeds
    if sim == "quadratic":
        runs = run_quadratic(toy.QUADRATIC, settings, p.quad_steps, seeds, record_every=p.quad_steps)
        gap = lambda final: final
    else:
        runs = run_bandit(toy.GAUSSIAN, settings, p.bandit_steps, seeds, groups=toy.BANDIT_GROUPS,
                          group_size=toy.BANDIT_GROUP_SIZE, record_every=p.bandit_steps, **STRUCTURES[structure])
        gap = lambda final, optimum=runs.meta["optimal_reward"]: optimum - final  # −inf reward → inf gap
    return [{"key": r["label"], "optimizer": r["optimizer"], "staleness": r["staleness"], "lr": r["lr"],
             "seed": r["seed"], "final_gap": gap(r["final_objective"]), "cos_update": r["mean_cos_applied"],
             "cos_prev": r["mean_cos_prev"], "kl_behaviour": r.get("mean_kl_behaviour", math.nan)}
            for r in runs.summary_rows()]


def _summaries(sim: str, structure: str, profile: str, settings: list, stage: str) -> list[dict]:
    """``_run_summaries``, a cached unit computed through the graph (``runtime.graph.compute``), here: a stage's
    settings follow from the one before it (the command line and fig10's unit read the first stage's runs again)."""
    from runtime.cache import unit
    from runtime.graph import compute
    from runtime.paths import force_recompute

    item = unit(f"verdict_toys_{sim}_{structure}_{stage}", _run_summaries, sim, structure, profile, settings)
    return compute([item], 1, force_recompute(), log=lambda *a, **k: None, name="verdict toys")[item.name]


def best_gac_spaces(runs: pd.DataFrame, tuning_seeds) -> dict[tuple[str, int], str]:
    """(optimizer, staleness) → the GAC space whose GAC-alone arm has the lowest mean final gap at its own best
    step size, on the tuning seeds only (ties: the first of GAC_SPACES)."""
    from experiments import tuning

    spaces = {}
    for optimizer, group in runs.groupby("optimizer"):
        picks = tuning.pick_lrs(group.rename(columns={"key": "method"}), tuning_seeds)
        gaps = picks.set_index(["method", "staleness"])["tuning_gap"]
        for staleness in STALENESS:
            spaces[(optimizer, staleness)] = min(GAC_SPACES, key=lambda space: gaps[(f"gac_{space}", staleness)])
    return spaces


def run_rows(sim: str, structure: str, profile: str) -> list[dict]:
    """Every run of one sim and structure (``_summaries`` rows): first each arm alone at every step size, staleness
    and seed, both optimizers; then the combinations with GAC in the space ``best_gac_spaces`` picks from the first
    (run key ``arm@space``)."""
    import pandas as pd

    from sim.grid import setting

    p = lookup("verdict_toys", profile)
    alone = [(arm, 0 if arm == "sync" else s, *ARMS[arm]) for arm in SIM_ARMS[sim] if arm not in COMBINATIONS
             for s in ((0,) if arm == "sync" else STALENESS)]
    rows = _summaries(sim, structure, profile, [setting(method, s, lr, optimizer=opt, label=key, **params)
                                                for opt in OPTIMIZERS for lr in LR_GRID
                                                for key, s, method, params in alone], "alone")
    combos = [arm for arm in SIM_ARMS[sim] if arm in COMBINATIONS]
    if combos:
        spaces = best_gac_spaces(pd.DataFrame(rows), list(range(p.tuning_seeds)))
        settings = [setting(COMBINATIONS[arm][0], s, lr, optimizer=opt, label=f"{arm}@{spaces[(opt, s)]}",
                            **COMBINATIONS[arm][1], space=spaces[(opt, s)])
                    for opt in OPTIMIZERS for lr in LR_GRID for arm in combos for s in STALENESS]
        rows = rows + _summaries(sim, structure, profile, settings, "combined")
    return rows


def _axes(method: str) -> dict:
    from sim.stabilizers import parse_method

    axes = parse_method(method)
    return {"objective_fn": axes.objective, "direction_control": axes.direction, "step_control": axes.step}


def verdict_table(runs: pd.DataFrame, sim: str, structure: str, optimizer: str, p: VerdictToys) -> list[dict]:
    """fig8's protocol on one (sim, structure, optimizer): each arm's row of COLUMNS."""
    from experiments import stats, tuning

    tuning_seeds = list(range(p.tuning_seeds))
    reporting_seeds = list(range(p.tuning_seeds, p.tuning_seeds + p.reporting_seeds))
    runs = runs[runs["optimizer"] == optimizer]
    spaces = best_gac_spaces(runs, tuning_seeds)
    runs = runs.rename(columns={"key": "method"})
    reported = tuning.report(runs, tuning_seeds, reporting_seeds, methods=None).set_index(["method", "staleness"])
    ranges = tuning.robust_range(runs, reporting_seeds, NEAR_BEST, methods=None).set_index(["method", "staleness"])
    grid = LR_GRID
    rows = []
    for staleness in (0, *STALENESS):
        best_space = spaces.get((optimizer, staleness))  # the combinations' GAC space (tuning seeds only)
        for arm in SIM_ARMS[sim]:
            key = f"{arm}@{best_space}" if arm in COMBINATIONS else arm
            if (key, staleness) not in reported.index or (arm == "sync") != (staleness == 0):
                continue
            rep, rng = reported.loc[(key, staleness)], ranges.loc[(key, staleness)]
            at_best = runs[(runs["method"] == key) & (runs["staleness"] == staleness) & (runs["lr"] == rep["lr"])
                           & runs["seed"].isin(reporting_seeds)]
            method, params = COMBINATIONS[arm] if arm in COMBINATIONS else ARMS[arm]
            space = best_space if arm in COMBINATIONS else params.get("space", "")
            rows.append({"sim": sim, "optimizer": optimizer, "structure": structure, "staleness": staleness,
                         "arm": arm, **_axes(method), "gac_space": space, "best_lr": rep["lr"],
                         "best_at_edge": bool(rep["lr"] in (min(grid), max(grid))),
                         "robust_low": rng["lr_low"], "robust_high": rng["lr_high"],
                         "range_at_edge": bool(rng["lr_low"] == min(grid) or rng["lr_high"] == max(grid)),
                         "final": rep["mean"], "final_low": rep["low"], "final_high": rep["high"],
                         "diverged": int(rep["diverged"]), "gap_recovered": math.nan,
                         "cos_update": float(at_best["cos_update"].mean()),
                         "cos_prev": float(at_best["cos_prev"].mean()),
                         "kl_behaviour": float(at_best["kl_behaviour"].mean())})
    sync = next((r["final"] for r in rows if r["arm"] == "sync"), math.nan)
    for row in rows:
        naive = next((r["final"] for r in rows if r["arm"] == "naive" and r["staleness"] == row["staleness"]),
                     sync if row["staleness"] == 0 else math.nan)
        if row["arm"] == "sync":
            row["gap_recovered"] = 1.0
        elif math.isfinite(naive - sync) and math.isfinite(row["final"]):
            row["gap_recovered"] = stats.gap_recovered(row["final"], naive, sync)
    return rows


def toy_verdict_rows(profile: str = "quick") -> list[dict]:
    """The verdict's arms in the toys: one row (COLUMNS) per arm × optimizer × structure × staleness × sim."""
    import pandas as pd

    p = lookup("verdict_toys", profile)
    rows = []
    for sim, structures in SIM_STRUCTURES.items():
        for structure in structures:
            runs = pd.DataFrame(run_rows(sim, structure, profile))
            runs["final_gap"] = runs["final_gap"].astype(float)
            for optimizer in OPTIMIZERS:
                rows += verdict_table(runs, sim, structure, optimizer, p)
    return [{c: row[c] for c in COLUMNS} for row in rows]


@dataclass(frozen=True)
class VerdictToysArgs:
    """The toys' verdict: every arm at its own step size; writes the table."""

    out: Annotated[Path, folder("--out", "give the table's CSV path, e.g. --out out/verdict_toys.csv")]
    """CSV to write (atomically), in an existing folder"""
    profile: Annotated[Literal["quick", "full"], choice("--profile", ("quick", "full"))] = "quick"
    """the run sizes (the ``verdict_toys`` profiles of ``experiments.profiles``)"""
    force: bool = False
    """overwrite a committed (git-tracked) CSV with the quick profile"""


def main(argv=None) -> int:
    """``python -m experiments.verdict_toys --profile quick|full --out PATH.csv``"""
    from runtime.files import check_output_files, write_records

    prog = "python -m experiments.verdict_toys"
    args = parse(VerdictToysArgs, argv, prog=prog)
    if args.out.suffix != ".csv" or not args.out.parent.is_dir():
        fail(prog, f"--out must be a .csv in an existing folder, got {args.out}")
    try:
        check_output_files(args.out, [args.out], args.profile, args.force)
    except ValueError as err:
        fail(prog, str(err))
    rows = toy_verdict_rows(args.profile)
    write_records(rows, args.out, COLUMNS)
    edges = [f"{r['sim']}/{r['optimizer']}/{r['structure']}/s={r['staleness']}/{r['arm']}" for r in rows
             if r["best_at_edge"]]
    print(f"wrote {len(rows)} rows to {args.out}" + (f"; best step size at the grid's edge: {edges}" if edges else ""))
    return 0


__all__ = ["toy_verdict_rows", "COLUMNS", "TOY_KL_TARGET", "STRUCTURES", "ARMS", "COMBINATIONS", "main"]

if __name__ == "__main__":
    sys.exit(main())
