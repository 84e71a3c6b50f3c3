"""The trainer's direction and step controls: GAC (gradient, update or momentum space), Adaptive Braking, and the
step sizes of lr_scale and kl_target. Each is a call between ``backward()`` and AdamW's step in ``train.py``.

GAC is the library's: ``gac.GradientAlignmentControl`` on the raw gradient, ``gac.wrap`` (``GACConfig.space``) on
AdamW's proposed step or first moment, ``gac.control`` against the previous RL step's summed gradient.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

import gac
from gac.control import regime_name
from sim.llm.probes import Float64Vector, as_float64, cosine, flat_grad
from sim.schema import NO_REGIME
from sim.stabilizers import braking_scale, kl_target_factor

if TYPE_CHECKING:
    from sim.llm.args import Args
    from sim.llm.train import TrainState


def gac_space(args: Args) -> str:
    """Where the run's GAC acts (gradient, update or momentum); gradient for a run without GAC."""
    return args.gac_space if args.axes.direction == "gac" else "gradient"


def build_optimizer(params: list[torch.Tensor], args: Args) -> tuple[torch.optim.Optimizer, gac.GradientAlignmentControl
                                                                    | None]:
    """AdamW and the run's gradient-space GAC tracker (None without one). GAC in update or momentum space wraps
    AdamW (``gac.wrap``): its step() then controls Δθ or the first moment, and ``last_report`` says how."""
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    space = gac_space(args)
    if space != "gradient":
        return gac.wrap(optimizer, replace(args.gac, space=space)), None
    on_gradient = args.axes.direction == "gac" and args.gac_reference == "update"
    return optimizer, gac.GradientAlignmentControl(params, args.gac) if on_gradient else None


def learning_rate(state: TrainState, kl_behaviour: float) -> float:
    """This update's step size: lr, divided by 1 + s_t (lr_scale), times the KL-target factor (kl_target) of the
    update's KL to π_b measured before its step."""
    args = state.args
    lr = args.lr / (1 + int(state.schedule[state.step])) if args.axes.step == "lr_scale" else args.lr
    if args.axes.step == "kl_target":
        lr *= kl_target_factor(kl_behaviour, args.kl_target.kl_target, args.kl_target.kl_floor)
    return lr


def apply_gac(state: TrainState) -> tuple[str, float]:
    """GAC on the parameters' .grad in place (direction gac in gradient space); returns (regime, parallel scale)."""
    if state.args.axes.direction != "gac" or state.args.gac_space != "gradient":
        return NO_REGIME, 1.0
    if state.controller is not None:  # reference: the previous optimizer update's raw gradient
        report = state.controller.apply()
        return report.regime, report.parallel_scale
    if state.prev_step_grad is None:  # reference "step" before any RL step: nothing to compare with
        return "keep", 1.0
    cfg = state.args.gac
    out = gac.control(flat_grad(state.params), state.prev_step_grad, cfg)
    for p, new in zip(state.params, out.grad.split([p.numel() for p in state.params]), strict=True):
        p.grad.copy_(new.view_as(p.grad))
    return regime_name(int(out.regime), cfg.mode), float(out.parallel_scale)


def space_report(state: TrainState) -> tuple[str, float]:
    """(regime, parallel scale) of the step ``gac.wrap`` just took in update or momentum space."""
    report = state.optimizer.last_report
    return report.regime, report.parallel_scale


def velocity(state: TrainState) -> torch.Tensor | None:
    """AdamW's first moment (its velocity) as one flat vector; None before its first step."""
    moments = [state.optimizer.state.get(p, {}).get("exp_avg") for p in state.params]
    return None if any(m is None for m in moments) else torch.cat([m.reshape(-1) for m in moments])


def apply_braking(state: TrainState, raw: Float64Vector) -> float:
    """Adaptive Braking on the .grad in place: g ← (1 − α·cos(g, v)) g, v AdamW's first moment; returns the factor."""
    v = velocity(state)
    factor = 1.0 if v is None else braking_scale(cosine(raw, as_float64(v)), state.args.braking.braking_alpha)
    for p in state.params:
        p.grad.mul_(factor)
    return factor
