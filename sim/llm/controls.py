"""The trainer's direction and step controls, each run of a batch with its own: GAC (gradient, update or momentum
space), Adaptive Braking, and the step sizes of lr_scale and kl_target. Each is a call between ``backward()`` and
AdamW's step in ``batched.optimizer_update``, on (K, P) rows, one per run.

GAC is the library's pure core: ``gac.update`` against each run's previous raw gradient, ``gac.control`` against the
previous RL step's summed gradient, or against the previous uncontrolled Δθ or first moment (update, momentum space).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

import gac
from gac.cosine64 import Float64Vector, as_float64, cosine64
from sim.llm.rows import control_rows, gac_update_rows, per_row
from sim.stabilizers import braking_scale, kl_target_factor

if TYPE_CHECKING:
    from sim.llm.args import Args
    from sim.llm.batched import BatchState


def gac_space(args: Args) -> str:
    """Where the run's GAC acts (gradient, update or momentum); gradient for a run without GAC."""
    return args.gac_space if args.axes.direction == "gac" else "gradient"


def learning_rates(batch: BatchState, stats: list) -> list[float]:
    """Each run's step size for this update: its lr, divided by 1 + s_t (lr_scale), times the KL-target factor
    (kl_target) of the update's KL to π_b measured before its step."""
    lrs = []
    for run, s in zip(batch.runs, stats, strict=True):
        a = run.args
        lr = a.lr / (1 + int(run.schedule[batch.step])) if a.axes.step == "lr_scale" else a.lr
        if a.axes.step == "kl_target" and s is not None:
            lr *= kl_target_factor(s["kl_behaviour"], a.kl_target.kl_target, a.kl_target.kl_floor)
        lrs.append(lr)
    return lrs


def apply_gac(batch: BatchState, grad: torch.Tensor, raw: torch.Tensor, cfg, tau) -> tuple[list[str], list[float]]:
    """GAC on the gradient rows in place (direction gac in gradient space); (regime, parallel scale) per run."""
    if batch.args.gac_reference == "update":  # reference: each run's previous raw gradient
        new, batch.gac_state, regimes, scales = gac_update_rows(raw, batch.gac_state, cfg, tau)
    else:  # reference: each run's previous RL step's summed raw gradient (none before the first step: keep)
        new, regimes, scales = control_rows(raw, batch.step_grad_reference, cfg, tau)
    grad.copy_(new)
    return regimes, scales


def apply_braking(batch: BatchState, grad: torch.Tensor, raw: Float64Vector) -> list[float]:
    """Adaptive Braking on the gradient rows in place: g ← (1 − α·cos(g, v)) g, v the run's AdamW first moment
    (factor 1 before its first step); the factor of each run."""
    cos = cosine64(raw, as_float64(batch.adam.exp_avg)).tolist()
    factors = [1.0 if batch.adam.steps[k] == 0 else float(braking_scale(cos[k], run.args.braking.braking_alpha))
               for k, run in enumerate(batch.runs)]
    grad.mul_(per_row(factors, grad))
    return factors


def space_control(batch: BatchState, vector: torch.Tensor, cfg, tau) -> tuple[torch.Tensor, list[str], list[float]]:
    """GAC on ``vector`` rows (AdamW's proposed Δθ or its forming first moment) against the previous uncontrolled
    ones; the reference then becomes ``vector``. (vector', regime, parallel scale per run)."""
    reference = batch.space_reference
    batch.space_reference = vector.clone() if reference is None else gac.update_reference(reference, vector, cfg)
    return control_rows(vector, reference, cfg, tau)


def acting(regimes: list[str]) -> list[int]:
    """The runs whose GAC removed part of their vector this update."""
    return [k for k, regime in enumerate(regimes) if regime in ("project", "cap")]


def gac_on_momentum(batch: BatchState, grad: torch.Tensor, cfg, tau) -> tuple[list[str], list[float]]:
    """GAC on AdamW's first moment (momentum space), before its step: the moment each run is about to form,
    m_t = β1·m_{t−1} + (1 − β1)·g, is controlled against its previous uncontrolled m, and the stored moment is
    shifted so that AdamW forms the controlled m'_t (the removed part does not come back through it)."""
    beta1 = batch.adam.betas[0]
    formed = torch.lerp(batch.adam.exp_avg, grad, 1 - beta1)
    new, regimes, scales = space_control(batch, formed, cfg, tau)
    for k in acting(regimes):
        batch.adam.exp_avg[k].sub_((formed[k] - new[k]) / beta1)
    return regimes, scales


@torch.no_grad()
def gac_on_update(batch: BatchState, before: torch.Tensor, stepped: list[int], cfg,
                  tau) -> tuple[list[str], list[float]]:
    """GAC on AdamW's proposed step Δθ_t (update space), after its step: Δθ_t is controlled against the previous
    proposed step and θ set to θ_before + Δθ'_t (θ_before for a skip); AdamW's state stays as its step left it."""
    proposed = batch.theta.detach() - before
    new, regimes, scales = space_control(batch, proposed, cfg, tau)
    for k in acting(regimes):
        batch.theta[k].sub_(proposed[k] - new[k])
    for k in stepped:
        if regimes[k] == "skip":
            batch.theta[k].copy_(before[k])
    return regimes, scales


__all__ = ["gac_space", "learning_rates", "apply_gac", "apply_braking", "space_control", "gac_on_momentum",
           "gac_on_update"]
