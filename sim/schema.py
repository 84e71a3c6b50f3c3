"""The one per-step record schema: every column name with its one meaning, written once.

Every simulator builds its rows through :func:`make_row`, so a column means the same thing in the
quadratic, the bandits and the LLM run, and a simulator cannot add a column that is not declared here.
Columns a simulator does not measure at a step are NaN (floats) — never silently absent.
"""

from __future__ import annotations

import math

CORE: dict[str, str] = {
    "sim": "which simulator made the row: quadratic | bandit_gaussian | bandit_softmax | bandit_contextual | llm",
    "step": "step index t (RL step for the LLM, optimizer step for the toys)",
    "seed": "seed of the run (its index in a vectorized grid)",
    "method": "what was run: the canonical method name of sim/stabilizers.py (naive = no stabilizer, gac, tis+gac, "
              "...), sync for naive at s = 0 (sim.stabilizers.record_method)",
    "staleness": "staleness s: the data (or gradient) of step t comes from the parameters of step t − s",
    "objective": "loss (quadratic) or mean reward (bandits, LLM) at step t",
    "grad_norm": "‖g_t‖ of the raw gradient (after backward, before GAC and clipping)",
    "cos_prev": "cos(raw g_k, raw g_{k−1}) of consecutive optimizer updates (mean over the step's updates)",
    "cos_prev_step": "cos of the summed raw gradients of consecutive RL steps (= cos_prev with one update per step)",
    "cos_update": "cos(Δθ_t, Δθ_{t−1}) of consecutive applied parameter updates (what the optimizer moved)",
    "cos_halves": "SNR probe: cos of the gradients of two disjoint halves of the step's batch at the same θ",
    "snr_halves": "per-half SNR_h = ‖g‖²/v implied by cos_halves: c/(1 − c) (NaN where not measured)",
    "cos_applied": "cos(applied g'_t, applied g'_{t−1}) of consecutive applied (post-GAC) gradients",
    "regime": "GAC decision: keep | project | cap | skip; n/a for methods without a GAC decision",
    "parallel_scale": "γ, the factor GAC left on the gradient's part along the reference (1 = untouched); "
                      "Adaptive Braking: its factor on the whole gradient",
}
"""The fixed columns, in order: every row of every simulator has them."""

EXTRAS: dict[str, str] = {
    "label": "the run's name in figures and tables: its method, or a name that adds the parameters that tell runs "
             "of one method apart (gac_cap_t0.5, naive_adam); equal to method when nothing else differs",
    "lr": "step size in force at step t",
    "diverged": "True from the run's first non-finite or exploding step on (a diverged run is kept, never dropped)",
    "nonfinite": "True at the LLM step whose loss or gradient was NaN/inf (the run stops there; kept, never dropped); "
                 "the LLM records' name for the toys' diverged, which it was called in older CSVs",
    "tied_frac": "share of the step's drawn prompt groups whose rewards were all equal (zero advantage: no gradient)",
    "samples_drawn": "samples generated for the step (more than P·G when --drop-tied-groups drew again)",
    "kl_behaviour": "KL(π_behaviour ‖ π_θ) on the step's samples: how far the learner has drifted from the data",
    "entropy": "mean policy entropy on the step's samples",
    "reward_gap": "J* − J(θ_t): distance of the expected reward from the optimum (bandits)",
    "mean_weight": "mean per-sample weight of the off-policy correction (1 when none)",
    "accuracy": "held-out exact-match accuracy (LLM; NaN between evaluations)",
    "train_accuracy": "exact-match accuracy of the step's own rollouts (LLM)",
    "response_length": "mean number of generated tokens per response (LLM)",
    "clip_frac": "share of tokens whose ratio was clipped (LLM)",
    "clip_low": "lower clip bound of the ratio: 1 − ε, or BAPO's adaptive c_low; mean over the step's updates "
                "(LLM; NaN for m2po, which does not clip)",
    "clip_high": "upper clip bound of the ratio: 1 + ε, or BAPO's adaptive c_high; mean over the step's updates "
                 "(LLM; NaN for m2po)",
    "behaviour_version": "parameter version that sampled the step's rollouts (LLM)",
    "ratio_to": "clip-ratio denominator: behaviour (π_b) or proximal (π_θ at the step's start) (LLM)",
    "step_norm": "‖Δθ‖ of the applied parameter update (mean over the step's updates; 0 for a skipped one)",
    "objective_fn": "the method's choice on the objective axis: none (the clipped ratio / stale gradient as if fresh) "
                    "| tis | m2po | bapo | dc",
    "direction_control": "the method's choice on the direction-control axis: none | gac | braking",
    "step_control": "the method's choice on the step-control axis: none (constant η) | lr_scale | kl_target | vcpo",
    "ess_ratio": "Kish's ESS / N of the update's importance weights π_θ/π_b (LLM: sequence-level; bandits: per "
                 "sample) (1: every sample counts fully, e.g. on policy; 1/N: one carries the update); mean over the "
                 "step's updates (bandits, LLM)",
}
"""Columns a simulator adds after the core ones; which ones each simulator has is in SIM_EXTRAS."""

_TOY = ("label", "lr", "diverged")
_BANDIT = (*_TOY, "kl_behaviour", "entropy", "reward_gap", "mean_weight", "ess_ratio")
SIM_EXTRAS: dict[str, tuple[str, ...]] = {
    "quadratic": _TOY,
    "bandit_gaussian": _BANDIT,
    "bandit_softmax": _BANDIT,
    "bandit_contextual": _BANDIT,
    "llm": ("label", "lr", "nonfinite", "kl_behaviour", "entropy", "accuracy", "train_accuracy", "response_length",
            "clip_frac", "clip_low", "clip_high", "behaviour_version", "ratio_to", "step_norm", "objective_fn",
            "direction_control", "step_control", "ess_ratio", "tied_frac", "samples_drawn"),
}
"""Exactly the extra columns of each simulator's rows, in order."""

NO_REGIME = "n/a"


def columns(sim: str) -> tuple[str, ...]:
    """Every column of ``sim``'s rows, in order: CORE, then its SIM_EXTRAS."""
    if sim not in SIM_EXTRAS:
        raise ValueError(f"unknown sim {sim!r}; known: {', '.join(SIM_EXTRAS)}")
    return (*CORE, *SIM_EXTRAS[sim])


def make_row(sim: str, **values) -> dict:
    """One record row of ``sim`` with exactly ``columns(sim)``, in order.

    Unknown names raise ValueError (declare a new column in CORE or EXTRAS first). A float column
    not given is NaN; ``regime`` defaults to "n/a", ``parallel_scale`` to 1.0, ``diverged`` to False.
    """
    names = columns(sim)
    unknown = set(values) - set(names)
    if unknown:
        raise ValueError(f"columns {sorted(unknown)} are not in the {sim} schema (sim/schema.py)")
    defaults = {"regime": NO_REGIME, "parallel_scale": 1.0, "diverged": False, "nonfinite": False}
    row = {}
    for name in names:
        value = values.get(name, defaults.get(name, math.nan))
        if value is None:
            value = math.nan
        row[name] = value
    row["sim"] = sim
    return row


LEGACY_LLM_COLUMNS = {"diverged": "nonfinite"}
"""LLM columns renamed since CSVs were committed: old name → new (readers of committed LLM CSVs apply it)."""


def nonfinite(row: dict) -> bool:
    """Whether a record marks a non-finite failure: ``nonfinite`` (LLM) or ``diverged`` (the toys, and LLM CSVs
    written before the LLM column was renamed)."""
    return bool(row.get("nonfinite") or row.get("diverged"))


COLLAPSE_FRACTION = 0.5
"""An LLM run collapsed when its held-out accuracy falls below this fraction of the best of its evaluations so far
(the start included): the failure AdamW with clipping actually shows (a non-finite run is counted apart)."""


def collapse_step(accuracies: list[tuple[int, float]]) -> int | None:
    """The step of the first evaluation (``(step, accuracy)`` in order) below COLLAPSE_FRACTION × the best one before
    it, or None: the LLM trainer's ``collapsed_at`` and every study's collapse."""
    best = -math.inf
    for step, accuracy in accuracies:
        if best > 0 and accuracy < COLLAPSE_FRACTION * best:
            return step
        best = max(best, accuracy)
    return None


__all__ = ["CORE", "EXTRAS", "SIM_EXTRAS", "NO_REGIME", "columns", "make_row", "nonfinite", "LEGACY_LLM_COLUMNS",
           "COLLAPSE_FRACTION", "collapse_step"]
