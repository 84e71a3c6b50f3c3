"""GAC's running state made explicit, optax-style: ``GACState`` and the pure ``update`` step.

``state = gac.init(g, cfg)`` then ``g', state, report = gac.update(g, state, cfg)`` each step, on
tensors of shape (..., P) with one independent control per leading index. Nothing is mutated: the
reference direction, the adaptive threshold's statistics and the step count come back new.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gac.config import GACConfig, check_config, check_threshold, reference_dtype_for
from gac.control import SKIP, check_gradient, decide_and_apply, update_reference


class GACState(NamedTuple):
    """What GAC carries from step to step, per leading index of the gradient."""

    reference: torch.Tensor
    """Reference direction d, shape (..., P): the previous raw gradient or an EMA of past ones."""
    threshold_stats: tuple[torch.Tensor, ...]
    """Running statistics of an adaptive threshold rule (each of the batch shape); () for a fixed τ."""
    step: torch.Tensor
    """Steps taken so far, int64 of the batch shape."""


class UpdateReport(NamedTuple):
    """What ``update`` did, per leading index: cosine, regime code, γ, τ used, ‖g‖ and ‖g'‖, non-finite."""

    cosine: torch.Tensor
    regime: torch.Tensor
    parallel_scale: torch.Tensor
    threshold: torch.Tensor
    grad_norm_before: torch.Tensor
    grad_norm_after: torch.Tensor
    nonfinite: torch.Tensor


def init(g: torch.Tensor, cfg: GACConfig) -> GACState:
    """The state before the first step for gradients shaped like ``g`` (zero reference, no statistics)."""
    cfg = check_config(cfg, "gac.init")
    batch_shape = tuple(g.shape[:-1])
    reference = torch.zeros(g.shape, dtype=reference_dtype_for(g.dtype, cfg.reference_dtype), device=g.device)
    return GACState(reference, init_threshold_stats(cfg, batch_shape, g.device),
                    torch.zeros(batch_shape, dtype=torch.int64, device=g.device))


def init_threshold_stats(cfg: GACConfig, batch_shape: tuple[int, ...] = (), device=None) -> tuple[torch.Tensor, ...]:
    """The adaptive rule's statistics before any step; () for a fixed threshold."""
    return () if isinstance(cfg.threshold, float) else tuple(cfg.threshold.init(batch_shape, device))


def current_threshold(cfg: GACConfig, stats: tuple[torch.Tensor, ...]) -> torch.Tensor | float:
    """τ for the coming step: the fixed threshold, or the rule's τ from its statistics."""
    return cfg.threshold if isinstance(cfg.threshold, float) else cfg.threshold.current(stats)


def observe_threshold(cfg: GACConfig, stats: tuple[torch.Tensor, ...],
                      cosine: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rule's statistics after a step with measured ``cosine``; entries whose cosine is NaN (nothing measured:
    a zero gradient or reference, or a skipped non-finite step) keep their old statistics."""
    if isinstance(cfg.threshold, float):
        return stats
    cosine = torch.as_tensor(cosine)
    observed = cfg.threshold.observe(stats, cosine)
    measured = ~torch.isnan(cosine)
    return tuple(torch.where(measured.to(new.device), new, old) for new, old in zip(observed, stats, strict=True))


def update(g: torch.Tensor, state: GACState, cfg: GACConfig,
           threshold: torch.Tensor | float | None = None) -> tuple[torch.Tensor, GACState, UpdateReport]:
    """One GAC step: (g', new state, report) for gradient(s) g of shape (..., P). Pure.

    τ is ``threshold`` when given (a float or a tensor of the batch shape; only with a fixed
    cfg.threshold), else cfg.threshold or the adaptive rule's τ from ``state.threshold_stats``. The
    reference then takes the raw g ("prev") or its EMA, stored in cfg.reference_dtype when set, and the rule
    observes the cosine. A row whose g is zero (‖g‖ ≤ cfg.eps) has cosine NaN and is kept; its reference keeps
    its last direction and the rule observes nothing. A skipped row's reference restarts from zero (as at init), so
    its next step is measured against nothing and kept: a skip changes nothing the next vector is made from, so
    measured against the skipped one every later step would be skipped. A non-finite g or reference raises
    ``NonFiniteGradientError`` (nonfinite="raise") or skips its row (g' = 0, cosine NaN; a non-finite reference
    restarts from zero). τ overrides outside [0, 1) are refused.
    """
    cfg = check_config(cfg, "gac.update")
    g = g.detach()  # the state must not hold the caller's autograd graph
    check_gradient(g, state.reference, cfg, "update")
    if g.dim() == 0:
        raise ValueError("update needs a gradient of shape (..., P) with P >= 1, got a 0-dim tensor")
    if threshold is not None and not isinstance(cfg.threshold, float):
        raise ValueError("update: threshold= overrides a fixed cfg.threshold only, not an adaptive rule")
    if threshold is not None:
        threshold = check_threshold(threshold, "update: threshold")
    tau = current_threshold(cfg, state.threshold_stats) if threshold is None else threshold
    new, decision = decide_and_apply(g, state.reference, cfg, tau)
    g_finite, d_finite = torch.isfinite(g).all(-1), torch.isfinite(state.reference).all(-1)
    finite = g_finite & d_finite
    reference = update_reference(state.reference, g, cfg).to(state.reference.dtype if cfg.reference_dtype is None
                                                              else reference_dtype_for(g.dtype, cfg.reference_dtype))
    # A zero g has no direction: the reference keeps its last one. A non-finite g leaves it as it was too; a
    # non-finite reference, and a skip (docstring), restart it from zero (as at init).
    skipped = finite & (decision.regime == SKIP)
    takes_g = finite & (decision.norm_before > cfg.eps) & ~skipped
    if not bool(takes_g.all()):
        kept = torch.where((d_finite & ~skipped).unsqueeze(-1), state.reference, torch.zeros_like(state.reference))
        reference = torch.where(takes_g.unsqueeze(-1), reference, kept.to(reference.dtype))
    stats = observe_threshold(cfg, state.threshold_stats, decision.cosine)
    tau_tensor = torch.as_tensor(tau, dtype=decision.cosine.dtype, device=g.device).expand(decision.cosine.shape)
    report = UpdateReport(decision.cosine, decision.regime, decision.parallel_scale, tau_tensor,
                          decision.norm_before, decision.norm_after, ~finite)
    return new, GACState(reference, stats, state.step + 1), report


__all__ = ["GACState", "UpdateReport", "init", "update", "init_threshold_stats", "current_threshold",
           "observe_threshold"]
