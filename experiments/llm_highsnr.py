"""The paper's LLM panels where the theory lets them appear: a batch SNR near 1 or above, collapse as the failure.

The 128-sample testbed (``experiments.llm_figures``) has a batch SNR far below 1, where cos ≤ SNR/(1 + SNR) caps
every arm's consecutive cosine near the noise floor: it is the low-SNR reference. Here the same small model and
task take 256 *untied* prompt groups × 8 samples per step (dynamic sampling drops the all-tied groups, which carry no
gradient, and draws again), accumulated by micro-batches into one update. The per-group SNR of
``docs/data/llm_snr.csv`` puts 2,048 untied samples at a batch SNR near 1 or above on most warm starts (RESULTS.md);
every run also measures its own with the halves probe (``cos_halves``), so each arm's cap is drawn from its own SNR.

Both importance ratios are run: the behaviour ratio π_θ/π_b (the testbed's) and the uncorrected one π_θ/π_θ_old,
π_θ_old the policy at the step's start (stale data used as if fresh, as verl's naive async does). A run *collapsed*
when its held-out accuracy falls below half of its best so far (``sim.schema.COLLAPSE_FRACTION``).

Profiles: ``tune`` (sync at the candidate steps on the tuning warm start, never reported: the shared step is the
largest at which sync does not collapse), ``fig3`` (sync, naive s = 16, GAC in gradient and update space at s = 16,
both ratios, and naive at GAC-on-the-update's effective step, 4 warm starts × 1 seed: the first the CPU affords),
``full`` (fig1's s ∈ {2, 4, 8, 16} too, 4 warm starts × 2 seeds), ``smoke`` (the tiny model, for the tests). ``python
-m experiments.llm_highsnr OUT.csv --profile fig3`` writes the runs' table and, beside it, the per-step records
(``*_steps.csv``).
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from experiments import llm_figures
from experiments.profiles import lookup
from runtime.cli import choice, folder, parse, whole

if TYPE_CHECKING:
    import pandas as pd

    from experiments.llm import Run

# pandas, the trainer and the run graph are imported where they run (--help answers without them)

BASE = dict(llm_figures.BASE, prompts_per_step=256, micro_batch=256, drop_tied_groups=True, sample_attempts=8)
"""The high-SNR configuration: the testbed's (small model, 2-digit sums, one update per step, clip at 1) with 256
untied groups × 8 samples per step."""
CONFIG = "256 untied groups × 8 samples (dynamic sampling), 1 update/step"
TUNE_LRS = (3e-4, 1e-3)
"""The candidate steps, looked at with sync on the tuning warm start only."""
LR = 1e-3
"""The shared step of every reported run: the largest candidate at which sync did not collapse on the tuning warm
start (``docs/data/llm_highsnr_tune.csv``; neither candidate collapsed)."""
STEPCUT_LR = 2.5e-4
"""The control "is GAC more than a step cut?": naive s = 16 with the uncorrected ratio at GAC-on-the-update's
effective step, LR × its mean applied step norm over naive's (warm start 1's two runs, ratio 0.25)."""
RATIOS = {"behaviour": "behaviour ratio", "proximal": "uncorrected ratio"}
FIG1_STALENESS = (0, 2, 4, 8, 16)
FIG3_ARMS = llm_figures.FIG3_ARMS
FIG3_STALENESS = llm_figures.FIG3_STALENESS

def arm_name(method: str, space: str, staleness: int, ratio: str, lr: float = LR) -> str:
    """The testbed's arm name, with ", uncorrected" for the uncorrected ratio (sync has one policy: no ratio) and the
    step where it is not the shared one."""
    name = llm_figures.arm_name(method, space, staleness)
    name = name if method == "sync" or ratio == "behaviour" else f"{name}, uncorrected"
    mantissa, exponent = f"{lr:.1e}".split("e")
    return name if lr == LR else f"{name}, step {mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def runs(profile: str, warm_seeds: tuple[int, ...] | None = None) -> list[Run]:
    """The runs of ``profile`` (of its warm starts in ``warm_seeds`` only, if given), each listed once with every
    figure it serves."""
    from experiments.llm import Run, dry_run_args
    from sim.llm.train import Args

    p = lookup("highsnr", profile)
    if warm_seeds is not None:
        if not set(warm_seeds) <= set(p.warm_seeds):
            raise ValueError(f"--warm-seeds {' '.join(map(str, warm_seeds))}: profile {profile} has warm starts "
                             f"{' '.join(map(str, p.warm_seeds))}")
        p = replace(p, warm_seeds=tuple(w for w in p.warm_seeds if w in warm_seeds))
    base = Args(**{**BASE, "lr": LR}, steps=p.steps, progress=False, on_nonfinite="mark")
    if profile == "smoke":
        base = replace(dry_run_args(base), steps=p.steps, prompts_per_step=4, micro_batch=8)
    arms: dict[tuple, list[str]] = {}
    if "tune" in p.figures:
        for lr in TUNE_LRS:
            arms.setdefault(("sync", "gradient", 0, "behaviour", lr), []).append("tune")
    for figure, settings in (("fig1", [("sync" if s == 0 else "naive", "gradient", s) for s in FIG1_STALENESS]),
                             ("fig3", list(FIG3_ARMS))):
        if figure in p.figures:
            for method, space, s in settings:
                for ratio in (("behaviour",) if method == "sync" else tuple(RATIOS)):
                    arms.setdefault((method, space, s, ratio, base.lr), []).append(figure)
            if figure == "fig3":
                arms.setdefault(("naive", "gradient", FIG3_STALENESS, "proximal", STEPCUT_LR), []).append(figure)
    return [Run(replace(base, method=method, gac_space=space, staleness=s, ratio_to=ratio, lr=lr,
                                    warm_seed=warm_seed, seed=seed), tuple(roles))
            for warm_seed in p.warm_seeds for seed in p.seeds
            for (method, space, s, ratio, lr), roles in arms.items()]


def batch_snr(cos_halves: float) -> float:
    """The whole batch's SNR implied by the halves' cosine c: 2 c/(1 − c) (each half holds half the samples)."""
    measured = cos_halves is not None and math.isfinite(cos_halves)
    return 2 * cos_halves / (1 - cos_halves) if measured and 0 < cos_halves < 1 else math.nan


def run_table(results: list[tuple[Run, dict]]) -> pd.DataFrame:
    """The testbed's run table (``llm_figures.run_table``) with the ratio in the arm's name, the measured batch SNR
    (from the mean halves' cosine), the steps' mean tied fraction and samples drawn, and the collapse step."""
    import pandas as pd

    table = llm_figures.run_table(results)
    extra = []
    for run, result in results:
        records = [r for r in result["records"] if "tied_frac" in r]
        a = run.args
        extra.append({
            "arm": arm_name(a.method, a.gac_space, a.staleness, a.ratio_to, a.lr), "ratio_to": a.ratio_to,
            "tied_frac": float(pd.Series([r["tied_frac"] for r in records]).mean()),
            "samples_drawn": float(pd.Series([r["samples_drawn"] for r in records]).mean()),
            "collapse_step": result["summary"].get("collapsed_at")})
    table = table.assign(**pd.DataFrame(extra).to_dict("list"))
    table["snr_batch"] = table.cos_halves.map(batch_snr)
    return table


STEP_COLUMNS = ("figure", "arm", "warm_seed", "seed", "method", "gac_space", "ratio_to", "staleness", "lr", "step",
                "accuracy", "objective", "grad_norm", "cos_prev", "cos_update", "cos_halves", "kl_behaviour",
                "step_norm", "regime", "tied_frac", "samples_drawn", "nonfinite")
"""What the per-step CSV keeps of each record: what the figures draw and the answers read."""


def step_table(results: list[tuple[Run, dict]]) -> pd.DataFrame:
    """Every run's per-step records with its arm, warm seed and ratio (the panels' curves)."""
    import pandas as pd

    rows = []
    for run, result in results:
        a = run.args
        arm = arm_name(a.method, a.gac_space, a.staleness, a.ratio_to, a.lr)
        rows += [dict(r, arm=arm, warm_seed=a.warm_seed, ratio_to=a.ratio_to, gac_space=a.gac_space,
                      figure="+".join(run.roles)) for r in result["records"]]
    return pd.DataFrame(rows).reindex(columns=list(STEP_COLUMNS))


@dataclass
class Cli:
    """Compute the high-SNR study's runs (cached, resumable) and write their table and per-step records."""

    out: tyro.conf.Positional[Annotated[Path, folder("OUT", "give the CSV path, e.g. docs/data/llm_highsnr_runs.csv")]]
    """CSV of the runs (docs/data/llm_highsnr_runs.csv); the per-step records go beside it as *_steps.csv"""
    profile: Annotated[Literal["tune", "fig3", "full", "smoke"],
                       choice("--profile", ("tune", "fig3", "full", "smoke"))] = "fig3"
    """tune (sync at the candidate steps, tuning warm start), fig3, full (fig1 and fig3), smoke (tiny, for tests)"""
    jobs: Annotated[int | None, whole("--jobs", 1, "worker processes")] = None
    """worker processes (default: one per core, memory permitting)"""
    warm_seeds: tuple[int, ...] | None = None
    """only these of the profile's warm starts (to finish whole warm starts first; the table then holds only them)"""
    cached: bool = False
    """compute nothing: the tables of the runs already in the run cache (a study still running, committed so far)"""

    def __post_init__(self):
        runs(self.profile, self.warm_seeds)  # one line for a warm start the profile does not have


def main(cli: Cli) -> pd.DataFrame:
    from experiments.llm import results_of, run_unit
    from experiments.verdict import code_commit
    from runtime.files import check_output_dir
    from sim.llm.warmstart import WarmStartRejected

    check_output_dir(str(Path(cli.out).parent), "out")
    selected = runs(cli.profile, cli.warm_seeds)
    if cli.cached:
        found = [(run, run_unit(run).lookup()) for run in selected]
        results = [(run, result) for run, result in found if result is not None]
        print(f"[llm high-SNR {cli.profile}] {len(results)} of {len(selected)} runs in the cache", file=sys.stderr)
        if not results:
            raise SystemExit("error: none of the profile's runs is in the run cache yet")
    else:
        try:
            results = results_of(selected, jobs=cli.jobs, name=f"llm high-SNR {cli.profile}")
        except WarmStartRejected as err:
            raise SystemExit(f"error: {err}") from None
    provenance = {"code": code_commit(), "command": shlex.join(["python", "-m", "experiments.llm_highsnr",
                                                                *sys.argv[1:]])}
    table = run_table(results).assign(**provenance)
    for frame, path in ((table, Path(cli.out)), (step_table(results).assign(**provenance),
                                                 Path(cli.out).with_name(Path(cli.out).stem + "_steps.csv"))):
        tmp = path.with_suffix(".csv.tmp")
        frame.to_csv(tmp, index=False, float_format="%.6g")
        tmp.replace(path)
    columns = ["arm", "warm_seed", "seed", "lr", "start_accuracy", "final_accuracy", "cos_prev", "cos_bound",
               "snr_batch", "tied_frac", "kl_behaviour", "collapsed"]
    print(table[columns].round(3).to_string(index=False))
    return table


if __name__ == "__main__":
    main(parse(Cli, None, prog="python -m experiments.llm_highsnr"))
