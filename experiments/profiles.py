"""Every study's run sizes in one typed registry: a frozen dataclass per study (the sizes that study varies), one entry
per profile name, and one lookup, ``lookup(study, name)``, which refuses a name the study has not in one line.

The figures' profiles are quick (fresh runs that fit a laptop), full (the committed data's runs) and gpu (the LLM
figures on one GPU); a study with more (the verdict's v2, the high-SNR study's tune and fig3) names them here too.
``smoke`` entries are the tests' (tiny runs, numbers meaningless); a test adds its own under ``test``. The values are
plain data (no torch, no simulator), so a command's ``--help`` imports this module for free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ProfileName = Literal["smoke", "test", "quick", "full", "gpu", "v2", "tune", "fig3"]
Study = Literal["toy", "bound", "stability_map", "bandit_snr", "law", "verdict_toys", "llm_sweep", "testbed",
                "highsnr", "signature", "llm_tuning", "verdict"]


@dataclass(frozen=True)
class Toy:
    """The toy scales' figures (fig1-3, fig6, fig8's toys, fig9's toys, figs1): run lengths and seeds."""

    quad_steps: int
    bandit_steps: int
    seeds: int
    record_every: int = 5


@dataclass(frozen=True)
class Bound:
    """fig7: ``theory.convergence.check_bound``'s settings (empty: its default grid), dimension, steps and seeds."""

    dim: int
    steps: int
    seeds: int
    settings: tuple[dict, ...] = ()


@dataclass(frozen=True)
class StabilityMap:
    """fig4: step sizes per staleness on the map, run length and seeds."""

    step_sizes: int
    steps: int
    seeds: int


@dataclass(frozen=True)
class BanditSNR:
    """figs1: the (groups B, group size G) levels of signal-to-noise, run length and seeds."""

    levels: tuple[tuple[int, int], ...]
    steps: int
    seeds: int


@dataclass(frozen=True)
class Law:
    """figs3, the staleness × step-size law (``experiments.staleness_lr``)."""

    quad_steps: int
    bandit_steps: int
    seeds: int
    grid_points: int
    refinements: int
    llm_steps: int = 100
    """RL steps of an LLM run"""
    llm_warm_starts: tuple[int, ...] = (1, 2)
    """the LLM scale's "seeds": accepted testbed warm starts (RL seed 0 on each)"""
    llm_grid_points: int = 8
    """LLM grid: 8 points over the LLM's search range are 2× apart"""
    llm_refine_points: int = 1
    """LLM zooms: one point (the bracket's geometric middle) per open bracket"""


@dataclass(frozen=True)
class VerdictToys:
    """fig10's toys (``experiments.verdict_toys``)."""

    bandit_steps: int
    quad_steps: int
    tuning_seeds: int
    reporting_seeds: int


@dataclass(frozen=True)
class LLMSweep:
    """fig5's sweep (``experiments.llm.sweep``): Args fields of every run, seeds, step sizes and stalenesses."""

    base: dict
    seeds: tuple[int, ...]
    main_lr: float
    small_lrs: tuple[float, ...]
    grid: dict[float, tuple[int, ...]]
    """step size -> staleness values of the regime map"""
    line_staleness: tuple[int, ...]
    high_staleness: int
    gac_small_lrs: tuple[float, ...] = ()
    sync_gac_small_lrs: tuple[float, ...] = ()


@dataclass(frozen=True)
class Testbed:
    """fig1's and fig3's LLM panels (``experiments.llm_figures``): warm starts, RL seeds, steps, Args overrides."""

    warm_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int
    base: dict = field(default_factory=dict)


@dataclass(frozen=True)
class HighSNR:
    """The high-SNR study (``experiments.llm_highsnr``): warm starts, RL seeds, steps and the figures it serves."""

    warm_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int
    figures: tuple[str, ...]


@dataclass(frozen=True)
class Signature:
    """figs2's signature map (``experiments.signature``): Args overrides, seeds, configuration -> stalenesses."""

    seeds: tuple[int, ...]
    cells: dict[str, tuple[int, ...]]
    base: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LLMTuning:
    """fig8's LLM grid (``experiments.tuning``): Args fields, stalenesses, step sizes, tuning and reporting seeds."""

    base: dict
    staleness: tuple[int, ...]
    lrs: tuple[float, ...]
    tuning_seeds: int
    reporting_seeds: int


VERDICT_ARMS = ("sync", "naive", "gac gradient", "gac update", "gac momentum", "braking", "tis", "kl_target", "m2po",
                "bapo", "vcpo")
"""Every arm of ``experiments.verdict.ARMS``, in its order."""


@dataclass(frozen=True)
class Verdict:
    """fig10's LLM verdict (``experiments.verdict``): the protocol's horizon, warm starts, seeds and arms."""

    staleness: int
    mild_staleness: int
    steps: int
    eval_every: int
    tuning_warm: int
    tuning_seed: int
    reporting_warms: tuple[int, ...]
    reporting_seeds: tuple[int, ...]
    start_lrs: tuple[float, ...]
    base: tuple = ()
    tune: bool = True
    fixed_lr: float = 3e-4
    arms: tuple[str, ...] = VERDICT_ARMS
    control_seeds: tuple[int, ...] = (0,)
    """RL seeds of the controls and the milder configuration (on every reporting warm start)."""
    config: Literal["signature", "testbed"] = "signature"
    """the runs' configuration: the GAC table's (``experiments.verdict.SIGNATURE``) or the reproducible testbed's
    (``experiments.llm_figures.BASE``)"""
    combinations: bool = True
    """also tune and report GAC + TIS and KL-target + GAC (with the best-scoring GAC placement)"""


TOY = {"smoke": Toy(quad_steps=40, bandit_steps=30, seeds=2),
       "quick": Toy(quad_steps=1000, bandit_steps=400, seeds=4),
       "full": Toy(quad_steps=3000, bandit_steps=1500, seeds=16)}

BOUND = {"smoke": Bound(dim=10, steps=30, seeds=4, settings=tuple(
             {"kind": "quadratic", "staleness": 2, "eta_fraction": 0.5, "mode": mode, "threshold": tau,
              "noise_std": 1.0} for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3)))),
         # quick and full run check_bound's whole grid (the theory README's table is quick), full with 4x the seeds
         "quick": Bound(dim=50, steps=300, seeds=32),
         "full": Bound(dim=50, steps=300, seeds=128)}

STABILITY_MAP = {"smoke": StabilityMap(step_sizes=4, steps=30, seeds=1),
                 "quick": StabilityMap(step_sizes=16, steps=600, seeds=2),
                 "full": StabilityMap(step_sizes=40, steps=2000, seeds=8)}

BANDIT_SNR = {"smoke": BanditSNR(levels=((1, 4), (4, 8)), steps=30, seeds=2),
              "quick": BanditSNR(levels=((1, 4), (4, 16), (8, 32)), steps=300, seeds=3),
              "full": BanditSNR(levels=((1, 4), (2, 8), (4, 16), (8, 32), (16, 64)), steps=300, seeds=3)}

# full makes docs/data/staleness_lr_scaling.csv
LAW = {"smoke": Law(quad_steps=40, bandit_steps=30, seeds=2, grid_points=6, refinements=1, llm_steps=3,
                    llm_warm_starts=(1,), llm_grid_points=3),
       "quick": Law(quad_steps=600, bandit_steps=300, seeds=4, grid_points=16, refinements=1),
       "full": Law(quad_steps=1000, bandit_steps=400, seeds=6, grid_points=18, refinements=2,
                   llm_warm_starts=(1, 2, 3))}

# full: docs/data/verdict_toys.csv (fig8's full toys run longer: the toy profile)
VERDICT_TOYS = {"smoke": VerdictToys(bandit_steps=12, quad_steps=16, tuning_seeds=1, reporting_seeds=2),
                "quick": VerdictToys(bandit_steps=120, quad_steps=300, tuning_seeds=1, reporting_seeds=2),
                "full": VerdictToys(bandit_steps=400, quad_steps=800, tuning_seeds=2, reporting_seeds=4)}

# quick: not a figure profile (fig5's quick profile draws docs/data/fig5_llm_grpo.csv and computes none of these);
# the sweep notebooks/05 loads when cached. The "small" 0.6M model; the regime map's grid (the cosine line adds s = 2, 8
# at 3e-4): at the small-step edge s = 0 and 16 suffice, and at 1e-3
# sync alone (it collapses there): 48 runs. gpu: the 25M model,
# 64 prompts × 16 samples, 300 steps, 3 seeds of the key cells (sized by estimate; not yet run on a device).
LLM_SWEEP = {
    "quick": LLMSweep(base=dict(size="small", steps=80, prompts_per_step=16, group_size=8, minibatches=2,
                                eval_every=20, eval_problems=256, ratio_to="proximal"),
                      seeds=(0, 1, 2), main_lr=3e-4, small_lrs=(1e-4, 3e-5),
                      grid={3e-5: (0, 16), 1e-4: (0, 4, 16), 3e-4: (0, 4, 16), 1e-3: (0,)},
                      line_staleness=(0, 2, 4, 8, 16), high_staleness=16, gac_small_lrs=(3e-5,)),
    "full": LLMSweep(base=dict(size="cpu", steps=300, prompts_per_step=16, group_size=8, minibatches=2,
                               eval_every=20, eval_problems=512, ratio_to="proximal"),
                     seeds=(0, 1, 2, 3, 4), main_lr=3e-4, small_lrs=(1e-4, 3e-5),
                     grid={lr: (0, 2, 4, 8, 16) for lr in (3e-5, 1e-4, 3e-4, 1e-3)},
                     line_staleness=(0, 2, 4, 8, 16), high_staleness=16, gac_small_lrs=(1e-4, 3e-5),
                     sync_gac_small_lrs=(1e-4, 3e-5)),
    "gpu": LLMSweep(base=dict(size="gpu", steps=300, prompts_per_step=64, group_size=16, minibatches=2,
                              eval_every=50, eval_problems=512, ratio_to="proximal"),
                    seeds=(0, 1, 2), main_lr=3e-4, small_lrs=(1e-4,), grid={3e-4: (0, 16)},
                    line_staleness=(0, 16), high_staleness=16),
}

# quick: 2 warm starts × 1 RL seed, 60 steps (what `make figures` affords); full: the committed runs, on the first 8
# accepted warm starts of docs/data/warm_starts.csv (warm seed 5 was refused: 0.810, 0.072, 0.611), 200 steps: at 100
# steps sync had gained +0.075 [0.023, 0.128] and was still climbing (RESULTS.md); gpu: the full runs on the device.
TESTBED = {"quick": Testbed(warm_seeds=(1, 2), seeds=(0,), steps=60),
           "full": Testbed(warm_seeds=(1, 2, 3, 4, 6, 7, 8, 9), seeds=(0, 1), steps=200)}
TESTBED["gpu"] = TESTBED["full"]

TUNING_WARM_SEED = 0
"""The testbed's warm start the configuration and step sizes are looked at on; never among the reported ones."""

HIGHSNR = {"tune": HighSNR(warm_seeds=(TUNING_WARM_SEED,), seeds=(0,), steps=200, figures=("tune",)),
           "fig3": HighSNR(warm_seeds=(1, 2, 3, 4), seeds=(0,), steps=200, figures=("fig3",)),
           "full": HighSNR(warm_seeds=(1, 2, 3, 4), seeds=(0, 1), steps=200, figures=("fig1", "fig3")),
           "smoke": HighSNR(warm_seeds=(1,), seeds=(0,), steps=3, figures=("fig1", "fig3"))}

# quick: the runs of the committed docs/data/figs2_llm_signature.csv, which figs2's quick profile draws (computing none
# of them): s ∈ {0, 16} for the base, 2 updates per step and the proximal ratio, 2 seeds (12 runs of the small model,
# plus its 3-digit warm start). full: every CPU configuration at every s (80 runs). gpu: the 25M model, 64 × 16
# samples, 300 steps, 3 seeds of the key cells (sized by estimate, not yet run on a device).
SIGNATURE = {
    "quick": Signature(seeds=(0, 1), cells={"base": (0, 16), "updates=2": (0, 16), "ratio=proximal": (0, 16)}),
    "full": Signature(seeds=(0, 1), cells={name: (0, 2, 4, 8, 16) for name in (
        "base", "batch=64x8", "updates=2", "updates=4", "ratio=proximal", "clip=1.0", "digits=2", "lr=1e-4")}),
    "gpu": Signature(seeds=(0, 1, 2), cells={"base": (0, 16), "updates=2": (0, 16)},
                     base=dict(size="gpu", prompts_per_step=64, group_size=16, steps=300, eval_every=50,
                               eval_problems=512)),
}

# The LLM's tuned comparison is the expensive part: short runs of the tiny model on one-digit addition (quick: 7
# settings × 4 step sizes × 3 seeds = 84 runs of 40 RL steps). A first quick grid 3e-4..1e-2 had sync itself collapse
# to 0 accuracy from 3e-3 on; hence 3e-5..1e-3.
LLM_TUNING = {
    "quick": LLMTuning(base=dict(size="tiny", digits=1, steps=40, prompts_per_step=8, group_size=8, minibatches=2,
                                 eval_every=40, eval_problems=100, snr_every=40, ratio_to="proximal"),
                       staleness=(8,), lrs=(3e-5, 1e-4, 3e-4, 1e-3), tuning_seeds=1, reporting_seeds=2),
    "full": LLMTuning(base=dict(size="small", steps=80, prompts_per_step=16, group_size=8, minibatches=2,
                                eval_every=20, eval_problems=256, ratio_to="proximal"),
                      staleness=(4, 16), lrs=(3e-5, 1e-4, 3e-4, 1e-3, 3e-3), tuning_seeds=2, reporting_seeds=3),
}

VERDICT = {
    # v2 (issue "Verdict v2"): the testbed's configuration, warm starts and horizon; tuning on warm start 0 (never
    # reported, seed 10), reporting on the testbed's 8 warm starts × 2 seeds; no combinations (CPU budget).
    "v2": Verdict(staleness=16, mild_staleness=4, steps=200, eval_every=20, tuning_warm=0, tuning_seed=10,
                  reporting_warms=(1, 2, 3, 4, 6, 7, 8, 9), reporting_seeds=(0, 1), start_lrs=(1.5e-4, 3e-4, 6e-4),
                  base=(("snr_every", 1000),), config="testbed", combinations=False),
    # full: 120 RL steps (the GAC table ran 300), a horizon that affords ~180 runs in one CPU session.
    "full": Verdict(staleness=16, mild_staleness=4, steps=120, eval_every=40, tuning_warm=0, tuning_seed=10,
                    reporting_warms=(1, 2, 3), reporting_seeds=(0, 1), start_lrs=(7.5e-5, 1.5e-4, 3e-4),
                    base=(("snr_every", 50),)),
    # quick (``python -m experiments.verdict``'s default; fig10's quick profile draws the committed v2 verdict): v2's
    # testbed configuration and warm starts (1 and 2, the ones fig1 and fig3's quick LLM panels train), 8 prompts × 8
    # samples, 256 evaluation problems, 40 steps, the key arms at one fixed step size (no tuning), 1 seed.
    "quick": Verdict(staleness=16, mild_staleness=4, steps=40, eval_every=20, tuning_warm=0, tuning_seed=10,
                     reporting_warms=(1, 2), reporting_seeds=(0,), start_lrs=(3e-4,), tune=False,
                     base=(("prompts_per_step", 8), ("eval_problems", 256), ("snr_every", 1000)), config="testbed",
                     arms=("sync", "naive", "gac update", "gac momentum", "kl_target", "tis", "vcpo")),
    # gpu: the 25M model, 64 prompts × 16 samples, 300 steps, the key arms at one step size (3 warm starts × 2
    # seeds). Sized by estimate for one GPU; not yet run on a device.
    "gpu": Verdict(staleness=16, mild_staleness=4, steps=300, eval_every=50, tuning_warm=0, tuning_seed=10,
                   reporting_warms=(1, 2, 3), reporting_seeds=(0, 1), start_lrs=(3e-4,), tune=False,
                   base=(("size", "gpu"), ("prompts_per_step", 64), ("group_size", 16), ("eval_problems", 512)),
                   arms=("sync", "naive", "gac gradient", "gac update", "gac momentum", "braking", "kl_target",
                         "tis")),
}

REGISTRY: dict[Study, dict] = {
    "toy": TOY, "bound": BOUND, "stability_map": STABILITY_MAP, "bandit_snr": BANDIT_SNR, "law": LAW,
    "verdict_toys": VERDICT_TOYS, "llm_sweep": LLM_SWEEP, "testbed": TESTBED, "highsnr": HIGHSNR,
    "signature": SIGNATURE, "llm_tuning": LLM_TUNING, "verdict": VERDICT,
}


def lookup(study: Study, name: str):
    """The profile ``name`` of ``study`` (its dataclass above); a one-line ValueError naming the study's profiles
    when it has none of that name."""
    table = REGISTRY[study]
    if name not in table:
        raise ValueError(f"unknown profile {name!r} for {study}; choose from {', '.join(table)}")
    return table[name]
