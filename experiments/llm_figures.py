"""The paper's two figures at LLM scale on the reproducible testbed: fig1's cosine and fig3's divergence panels.

Every run starts from an accepted warm start (``sim.llm.warmstart``: trained to its plateau on a finite supervised
set, refused below target) and is repeated over several warm starts × RL seeds, so that a band over warm starts can
be drawn: the warm start decided ~99 % of an LLM outcome's variance in the committed verdict, so one warm start says
little. The arms, all at one shared step size:

- fig1: sync and naive async at s ∈ {2, 4, 8, 16}: the consecutive-gradient cosine, beside the theory's bound
  SNR/(1+SNR) at the SNR the half-batch probe measures in the same runs;
- fig3: sync, naive async, GAC on the raw gradient (as the paper places it) and GAC on AdamW's update, at s = 16.

This is the low-SNR reference: at 128 samples its batch SNR is far below 1 (``docs/data/llm_snr.csv``); the high-SNR
study is ``experiments.llm_highsnr``.
``python -m experiments.llm_figures OUT.csv --profile full`` writes the runs' table
(``docs/data/llm_figures_runs.csv``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
import tyro

from experiments.profiles import lookup
from runtime.cli import choice, folder, parse, whole
from sim.schema import nonfinite

if TYPE_CHECKING:
    import pandas as pd

    from experiments.llm import Run

# pandas, the trainer and the run graph are imported where they run (--help answers without them)

# One optimizer update per RL step (each update sees the whole batch: the most SNR per update), the clip ratio against
# the behaviour policy, gradient clipping at 1, the 0.6M model on 2-digit sums, 16 × 8 samples per step: the batch is
# the one whose 112 runs fit this project's CPU budget (its SNR is far below 1: experiments.snr). Warm starts accepted
# in [0.1, 0.5] (a warm start past 0.5 leaves RL little to learn), after up to 10 attempts: which attempt lands in
# that range depends on the machine's float kernels (warm seed 7: attempt 1 at 0.255 on the machine of the first
# table, 0.684 on another, docs/data/warm_starts.csv), so 3 attempts refused a seed on one machine only.
BASE = dict(size="small", digits=2, prompts_per_step=16, group_size=8, minibatches=1, ratio_to="behaviour",
            max_grad_norm=1.0, lr=3e-4, eval_every=20, eval_problems=1000, snr_every=10, warm_ceiling=0.5,
            warm_attempts=10)
CONFIG = "16 prompts × 8 samples, one update per step, behaviour ratio, step size 3e-4"
"""The figures' name of this configuration."""
FIG1_STALENESS = (0, 2, 4, 8, 16)
FIG3_STALENESS = 16
FIG3_ARMS = (("sync", "gradient", 0), ("naive", "gradient", FIG3_STALENESS), ("gac", "gradient", FIG3_STALENESS),
             ("gac", "update", FIG3_STALENESS))
"""fig3's arms: (method, GAC space, staleness)."""


def arm_name(method: str, space: str, staleness: int) -> str:
    """The name an arm has in the figures: sync, naive s=16, gac gradient s=16, gac update s=16."""
    if method == "sync":
        return "sync"
    return f"{method} s={staleness}" if method == "naive" else f"{method} {space} s={staleness}"


def runs(profile: str = "full", device: str = "cpu", dry_run: bool = False) -> list[Run]:
    """The runs of both panels (a run in both, sync and naive s = 16, listed once with both roles); the figures'
    profile gpu takes the full runs (on the device given)."""
    from experiments.llm import Run
    from sim.llm.train import Args

    p = lookup("testbed", profile)
    base = Args(**{**BASE, **p.base}, steps=p.steps, device=device, progress=False, on_nonfinite="mark")
    arms: dict[tuple, list[str]] = {}
    for s in FIG1_STALENESS:
        arms.setdefault(("sync" if s == 0 else "naive", "gradient", s), []).append("fig1")
    for arm in FIG3_ARMS:
        arms.setdefault(arm, []).append("fig3")
    warm_seeds, seeds = (p.warm_seeds[:1], p.seeds[:1]) if dry_run else (p.warm_seeds, p.seeds)
    out = []
    for warm_seed in warm_seeds:
        for seed in seeds:
            for (method, space, s), roles in arms.items():
                args = replace(base, method=method, gac_space=space, staleness=s, warm_seed=warm_seed, seed=seed)
                if dry_run:
                    from experiments.llm import dry_run_args
                    args = dry_run_args(args)
                out.append(Run(args, tuple(roles)))
    return out


def snr_bound(cos_halves: float) -> float:
    """The theory's bound on the consecutive cosine for s ≥ 1, SNR/(1+SNR), at the whole batch's SNR = 2 SNR_h,
    SNR_h = c/(1 − c) being the per-half SNR that the halves' cosine c implies (one update sees the whole batch)."""
    from experiments.aggregate import measured

    if not (measured(cos_halves) and 0 < cos_halves < 1):
        return math.nan
    snr = 2 * cos_halves / (1 - cos_halves)
    return snr / (1 + snr)


def run_table(results: list[tuple[Run, dict]]) -> pd.DataFrame:
    """One row per run: figure(s), warm seed, seed, arm, step size, start/final accuracy, mean cosine after the first
    fifth of the steps, mean halves' cosine and its bound, KL to π_b, whether it went non-finite or collapsed
    (``sim.schema.COLLAPSE_FRACTION``)."""
    import pandas as pd

    from experiments.aggregate import measured

    rows = []
    for run, result in results:
        a, records = run.args, result["records"]
        ok = [r for r in records if not nonfinite(r)]
        late = [r for r in ok if r["step"] >= a.steps // 5]
        start = next((r["accuracy"] for r in ok if measured(r.get("accuracy"))), math.nan)
        halves = float(np.nanmean([r["cos_halves"] for r in ok if measured(r.get("cos_halves"))] or [np.nan]))
        rows.append({
            "figure": "+".join(run.roles), "arm": arm_name(a.method, a.gac_space, a.staleness),
            "warm_seed": a.warm_seed, "seed": a.seed, "method": a.run_method, "gac_space": a.gac_space,
            "staleness": a.staleness, "lr": a.lr, "steps": a.steps, "prompts_per_step": a.prompts_per_step,
            "group_size": a.group_size, "start_accuracy": start,
            "final_accuracy": result["summary"]["final_accuracy"],
            "gain": result["summary"]["final_accuracy"] - start,
            "cos_prev": float(np.mean([r["cos_prev"] for r in late if measured(r.get("cos_prev"))] or [np.nan])),
            "cos_update": float(np.mean([r["cos_update"] for r in late if measured(r.get("cos_update"))] or [np.nan])),
            "cos_halves": halves, "cos_bound": snr_bound(halves),
            "kl_behaviour": float(np.mean([r["kl_behaviour"] for r in ok] or [np.nan])),
            "nonfinite": any(nonfinite(r) for r in records), "collapsed": bool(result["summary"].get("collapsed")),
        })
    return pd.DataFrame(rows)


def over_warm_starts(values: pd.Series, warm_seeds: pd.Series) -> tuple[float, float, float]:
    """(mean, low, high): the mean over warm starts of each warm start's seed mean, with a 95 % t-interval over warm
    starts (the unit that varies most); NaN bounds with one warm start."""
    from experiments import stats

    means = values.groupby(warm_seeds.to_numpy()).mean().dropna().to_numpy()
    return stats.t_interval(means, 0.95) if len(means) else (math.nan, math.nan, math.nan)


def paired_difference(rows: pd.DataFrame, reference: pd.DataFrame, key: str) -> tuple[float, float, float]:
    """(mean, low, high) of ``rows``' ``key`` minus ``reference``'s on the same warm start and RL seed, over warm
    starts (``over_warm_starts``)."""
    paired = rows.set_index(["warm_seed", "seed"])[key] - reference.set_index(["warm_seed", "seed"])[key]
    return over_warm_starts(paired.reset_index(drop=True), paired.index.get_level_values("warm_seed").to_series())


def paired_summary(table: pd.DataFrame, reference: str = "sync") -> pd.DataFrame:
    """Per arm: its gain over the warm start and its final accuracy minus ``reference``'s on the same warm start and
    RL seed (a paired difference: the warm start's share of the variance cancels), each the mean over warm starts of
    each warm start's seed mean with a 95 % t-interval over warm starts; the mean cosine and its bound."""
    import pandas as pd

    ref = table[table.arm == reference]
    out = []
    for arm, rows in table.groupby("arm", sort=False):
        row = {"arm": arm, "runs": len(rows), "warm_starts": rows.warm_seed.nunique()}
        row["gain"], row["gain_low"], row["gain_high"] = over_warm_starts(rows.gain, rows.warm_seed)
        row["minus_sync"], row["minus_sync_low"], row["minus_sync_high"] = paired_difference(rows, ref,
                                                                                         "final_accuracy")
        row["cos_prev"] = over_warm_starts(rows.cos_prev, rows.warm_seed)[0]
        row["cos_bound"] = over_warm_starts(rows.cos_bound, rows.warm_seed)[0]
        row["kl_behaviour"] = over_warm_starts(rows.kl_behaviour, rows.warm_seed)[0]
        out.append(row)
    return pd.DataFrame(out)


def step_rows(results: list[tuple[Run, dict]], role: str) -> list[dict]:
    """Per-step records of the runs in ``role`` with their arm and warm seed, plus the final accuracy as a last row
    (step = steps) so that accuracy curves reach the end."""
    rows = []
    for run, result in results:
        if role not in run.roles:
            continue
        a = run.args
        arm = arm_name(a.method, a.gac_space, a.staleness)
        extra = {"arm": arm, "label": arm, "warm_seed": a.warm_seed, "gac_space": a.gac_space,
                 "collapsed": result["summary"]["collapsed"]}
        rows += [dict(r, **extra, cos_bound=snr_bound(r.get("cos_halves", math.nan))) for r in result["records"]]
        if not any(nonfinite(r) for r in result["records"]):
            rows.append({"sim": "llm", "step": a.steps, "seed": a.seed, "method": a.run_method,
                         "staleness": a.staleness, "lr": a.lr, **extra, "cos_bound": math.nan,
                         "accuracy": result["summary"]["final_accuracy"], "nonfinite": False,
                         "final_eval": True})
    return rows


def with_run_means(rows: list[dict]) -> list[dict]:
    """``rows`` (per-step records of one panel, no final-eval rows) each with its run's mean cosine after the first
    fifth of the steps (NaN if the run diverged), its mean over all steps before divergence, and whether it diverged
    (fig1's table columns; a run is (staleness, warm seed, seed))."""
    import pandas as pd

    if not rows:  # a figure drawn without its LLM runs (the toy panels' smoke test)
        return rows
    frame = pd.DataFrame(rows)
    for _, run in frame.groupby(["staleness", "warm_seed", "seed"]):
        steps = run
        diverged = bool(steps.nonfinite.astype(bool).any())
        alive = steps[~steps.nonfinite.astype(bool) & steps.cos_prev.notna()]
        late = alive[alive.step >= steps.step.max() // 5]
        for i in run.index:
            rows[i].update(run_mean_cos_prev=float(late.cos_prev.mean()) if len(late) and not diverged else math.nan,
                           run_mean_cos_prev_alive=float(alive.cos_prev.mean()) if len(alive) else math.nan,
                           run_diverged=diverged, config=CONFIG)
    return rows


def band(rows: list[dict], key: str, arm: str, log: bool = False) -> tuple[np.ndarray, ...]:
    """(steps, mean, low, high) of ``key`` for ``arm`` over warm starts (each warm start's seed mean first; 95 %
    t-interval over warm starts), diverged runs' rows left out; ``log``: the same on log(key), exponentiated back (a
    geometric mean and band, positive for a positive quantity such as a norm)."""
    import pandas as pd

    from experiments import stats
    from experiments.aggregate import measured

    table = pd.DataFrame([r for r in rows if r["arm"] == arm and measured(r.get(key)) and not nonfinite(r)])
    if table.empty:
        return (np.array([]),) * 4
    if log:
        table = table.assign(**{key: np.log(table[key].astype(float).clip(lower=1e-300))})
    per_warm = table.groupby(["step", "warm_seed"])[key].mean().unstack("warm_seed")  # steps × warm starts
    out = stats.t_interval(per_warm.to_numpy(dtype=float), 0.95, axis=1)
    return (per_warm.index.to_numpy(), *(np.exp(v) for v in out)) if log else (per_warm.index.to_numpy(), *out)


def mean_bound(rows: list[dict], stalenesses=None) -> tuple[float, float]:
    """(mean halves' cosine, the bound SNR/(1+SNR) at it) over the probes of ``rows`` (those with staleness in
    ``stalenesses`` if given): the bound of the mean SNR, not the mean of per-probe bounds (a probe's bound is
    undefined at a negative cosine, so that mean would leave the negative probes out and sit too high)."""
    from experiments.aggregate import measured

    values = [r["cos_halves"] for r in rows if measured(r.get("cos_halves"))
              and (stalenesses is None or r["staleness"] in stalenesses)]
    mean = float(np.mean(values)) if values else math.nan
    return mean, (0.0 if mean <= 0 else snr_bound(mean))  # a mean at or below 0: no signal measured, SNR 0


@dataclass
class Cli:
    """Compute the LLM figures' runs (cached) and write their table."""

    out: tyro.conf.Positional[Annotated[Path, folder("OUT", "give the CSV path, e.g. docs/data/llm_figures_runs.csv")]]
    """CSV to write (docs/data/llm_figures_runs.csv)"""
    profile: Annotated[Literal["quick", "full"], choice("--profile", ("quick", "full"))] = "full"
    """which runs: quick (2 warm starts × 1 seed) or full (8 × 2)"""
    jobs: Annotated[int | None, whole("--jobs", 1, "worker processes")] = None
    """worker processes (default: one per core, memory permitting)"""


def main(cli: Cli) -> pd.DataFrame:
    from experiments.llm import results_of
    from runtime.files import check_output_dir
    from sim.llm.warmstart import WarmStartRejected

    check_output_dir(str(Path(cli.out).parent), "out")
    selected = runs(cli.profile)
    try:
        results = results_of(selected, jobs=cli.jobs, name="llm figures")
    except WarmStartRejected as err:
        raise SystemExit(f"error: {err}") from None
    table = run_table(results)
    tmp = Path(cli.out).with_suffix(".csv.tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(cli.out)
    print(paired_summary(table).round(3).to_string(index=False))
    return table


if __name__ == "__main__":
    main(parse(Cli, None, prog="python -m experiments.llm_figures"))
