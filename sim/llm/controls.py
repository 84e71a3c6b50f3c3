"""The trainer's direction and step controls, each run of a batch with its own: GAC (gradient, update or momentum
space), Adaptive Braking, the step sizes of lr_scale, kl_target and vcpo, and VCPO's baseline (at sampling). Each
control is a call between ``backward()`` and AdamW's step in ``batched.optimizer_update``, on (K, P) rows, one per run.

GAC is the library's own placement (``gac.placement``, the transforms ``gac.wrap`` is checked against) on the (K, P)
rows: in gradient space against each run's previous raw gradient or its previous RL step's summed gradient, in
momentum space against the previous uncontrolled first moments, in update space against the previous proposed Δθ.
"""

from __future__ import annotations

import torch

import gac
from gac import placement
from gac.control import regime_name
from gac.cosine64 import Float64Vector, as_float64, cosine64
from gac.state import init_threshold_stats
from sim.advantages import group_advantages
from sim.llm import stacked
from sim.llm.args import Args
from sim.llm.rows import per_row
from sim.llm.state import BatchState
from sim.stabilizers import (
    braking_scale,
    kl_target_factor,
    logit_score_sq,
    sequence_weights,
    vcpo_baseline,
    vcpo_step_factor,
)


def gac_space(args: Args) -> str:
    """Where the run's GAC acts (gradient, update or momentum); gradient for a run without GAC."""
    return args.gac_space if args.axes.direction == "gac" else "gradient"


def learning_rates(batch: BatchState, stats: list) -> list[float]:
    """Each run's step size for this update: its lr, divided by 1 + s_t (lr_scale), times the KL-target factor
    (kl_target) of the update's KL to π_b, or times VCPO's factor (ESS/N / ρ_ref)^power ≤ 1 (vcpo) of the update's
    sequence-level weights π_θ/π_b, both measured before its step.

    VCPO's weights are π_prox/π_b with π_prox the policy at the RL step's start; the trainer uses the policy at the
    update (the ratio its loss uses): the same at an RL step's first update, so at one update per step."""
    lrs = []
    for run, s in zip(batch.runs, stats, strict=True):
        a = run.args
        lr = a.lr / (1 + int(run.schedule[batch.step])) if a.axes.step == "lr_scale" else a.lr
        if a.axes.step == "kl_target" and s is not None:
            lr *= kl_target_factor(s["kl_behaviour"], a.kl_target.kl_target, a.kl_target.kl_floor)
        if a.axes.step == "vcpo" and s is not None:
            lr *= vcpo_step_factor(s["ess_ratio"], a.vcpo.vcpo_reference_ratio, a.vcpo.vcpo_power)
        lrs.append(lr)
    return lrs


@torch.no_grad()
def vcpo_advantages(batch: BatchState, prompts: torch.Tensor, responses: torch.Tensor, behaviour_logp: torch.Tensor,
                    mask: torch.Tensor, reward: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """VCPO's advantages (K, n) for the runs with its baseline: (R − b)/(std + ε) per group, b the off-policy
    minimum-variance baseline Σ c_i R_i / Σ c_i, c_i = w_i² ‖score_i‖² (``sim.stabilizers.vcpo_baseline``), w_i the
    sequence's weight π_θ/π_b at the step's start and ‖score_i‖² its score's norm in logit space
    (``sim.stabilizers.logit_score_sq``); the std is GRPO's. Other runs keep ``advantages``."""
    group, runs = batch.args.group_size, len(batch.runs)
    logp_all = stacked.response_logp_all(batch.layout, batch.theta, prompts, responses, batch.args.temperature)
    logp = stacked.token_logp(logp_all, responses)
    valid = mask.float()
    weights = sequence_weights(logp - behaviour_logp, valid).reshape(runs, -1, group)
    norms = logit_score_sq(logp_all, logp, valid).reshape(runs, -1, group)
    rewards = reward.to(weights.dtype).reshape(runs, -1, group)
    vcpo = group_advantages(rewards, baseline=vcpo_baseline(rewards, weights, norms))
    use = torch.tensor([run.args.vcpo.vcpo_baseline for run in batch.runs], device=advantages.device)
    return torch.where(use[:, None], vcpo.reshape(runs, -1).to(advantages.dtype), advantages)


def regimes_of(report: gac.UpdateReport, mode: str) -> tuple[list[str], list[float]]:
    """(regime name, parallel scale γ) per run from a placement's report."""
    return [regime_name(int(c), mode) for c in report.regime.tolist()], report.parallel_scale.tolist()


def apply_gac(batch: BatchState, grad: torch.Tensor, raw: torch.Tensor, cfg, tau) -> tuple[list[str], list[float]]:
    """GAC on the gradient rows in place (``gac.placement.on_gradient``); (regime, parallel scale) per run."""
    if batch.args.gac_reference == "update":  # reference: each run's previous raw gradient
        placed = placement.on_gradient(raw, batch.gac_state, cfg, tau)
        batch.gac_state = placed.state
    else:  # reference: each run's previous RL step's summed raw gradient (zero before the first step: keep)
        reference = batch.step_grad_reference
        state = None if reference is None else gac.GACState(
            reference, init_threshold_stats(cfg, (len(batch.runs),), raw.device),
            torch.zeros(len(batch.runs), dtype=torch.int64, device=raw.device))
        placed = placement.on_gradient(raw, state, cfg, tau)
    grad.copy_(placed.out)
    return regimes_of(placed.report, cfg.mode)


def apply_braking(batch: BatchState, grad: torch.Tensor, raw: Float64Vector) -> list[float]:
    """Adaptive Braking on the gradient rows in place: g ← (1 − α·cos(g, v)) g, v the run's AdamW first moment
    (factor 1 before its first step); the factor of each run."""
    cos = cosine64(raw, as_float64(batch.adam.exp_avg)).tolist()
    factors = [1.0 if batch.adam.steps[k] == 0 else float(braking_scale(cos[k], run.args.braking.braking_alpha))
               for k, run in enumerate(batch.runs)]
    grad.mul_(per_row(factors, grad))
    return factors


def gac_on_momentum(batch: BatchState, grad: torch.Tensor, cfg, tau) -> tuple[list[str], list[float]]:
    """GAC on AdamW's first moment (momentum space, ``gac.placement.on_momentum``), before its step: the moment
    each run is about to form is controlled against its previous uncontrolled moments, and the stored moment is
    shifted so that AdamW forms the controlled one (the removed part does not come back through it)."""
    beta1 = batch.adam.betas[0]
    formed = placement.adam_moment(batch.adam.exp_avg, grad, beta1)
    placed = placement.on_momentum(batch.adam.exp_avg, formed, beta1, batch.space_state, cfg, tau)
    batch.adam.exp_avg, batch.space_state = placed.out, placed.state
    return regimes_of(placed.report, cfg.mode)


@torch.no_grad()
def gac_on_update(batch: BatchState, before: torch.Tensor, cfg, tau) -> tuple[list[str], list[float]]:
    """GAC on AdamW's proposed step Δθ (update space, ``gac.placement.on_update``), after its step: θ is set to
    θ_after − (Δθ − Δθ') (θ_before for a skip, whose reference restarts); AdamW's state stays as its step left it."""
    after = batch.theta.detach()
    # A run that did not step (stopped) has Δθ = 0: cosine 0, kept, θ unchanged.
    placed = placement.on_update(before, after, batch.space_state, cfg, tau)
    batch.theta.copy_(placed.out)
    batch.space_state = placed.state
    return regimes_of(placed.report, cfg.mode)


__all__ = ["gac_space", "learning_rates", "vcpo_advantages", "apply_gac", "apply_braking", "gac_on_momentum",
           "gac_on_update", "regimes_of"]
