"""Where in an optimizer step GAC acts, written once: the pure placement transforms on (..., P) tensors.

GAC controls one vector v of each optimizer step against a reference d built from the previous steps' raw v
(``gac.update``). The *space* says which vector that is and how the controlled v' goes back into the step:

- ``gradient``: v = the raw gradient g, before the step; the optimizer steps on g'. A skipped row takes no step.
- ``momentum``: v = the first moment m_t the optimizer is about to form from its stored buffer (Adam/AdamW:
  m_t = β1·m_{t−1} + (1−β1)·g; SGD: μ·buf + (1−δ)·g). The stored buffer is shifted so that the optimizer forms
  m'_t instead: buf ← buf − (m_t − m'_t)/β (β = β1, or μ), on the acting rows only; the second moment is not
  touched. A skipped row takes no step and keeps its buffer.
- ``update``: v = the proposed step Δ = θ_after − θ_before of a step already taken; θ ← θ_after − (Δ − Δ')
  (= θ_before + Δ'). A skipped row goes back to θ_before.

In every space a skipped row's reference restarts at zero (``gac.update``), so its next step is kept: a skip changes
nothing the next vector is made from, so measured against the skipped vector every later step would be skipped.

Each function takes a batch of independent controls (leading dims: runs, seeds, settings) and returns new tensors and
a new ``GACState``; nothing is mutated. The simulators (``sim.grid``, ``sim.llm``) call these; ``gac.wrap`` applies
the same placements per parameter tensor, chunk by chunk (tests/gac/test_placement.py checks it against these).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from gac.config import GACConfig
from gac.control import ACT, SKIP
from gac.state import GACState, UpdateReport, init, update


class Placed(NamedTuple):
    """The result of one placement: ``out`` (what the caller writes back), the new state, the report of
    ``gac.update`` (cosine, regime code, γ, τ, norms, non-finite) per leading index."""

    out: torch.Tensor
    state: GACState
    report: UpdateReport


def _state(vector: torch.Tensor, state: GACState | None, cfg: GACConfig) -> GACState:
    return init(vector, cfg) if state is None else state


def _rows(mask: torch.Tensor) -> torch.Tensor:
    """A per-control mask (batch shape) broadcast over the vector's last dim."""
    return mask.unsqueeze(-1)


def stepping(report: UpdateReport) -> torch.Tensor:
    """Which controls take their optimizer step (every regime but skip), batch shape, bool."""
    return report.regime != SKIP


def on_gradient(grad: torch.Tensor, state: GACState | None, cfg: GACConfig,
                threshold: torch.Tensor | float | None = None) -> Placed:
    """Gradient space: ``out`` = g' for the optimizer to step on (g' = 0 on skipped rows, which must not step:
    ``stepping``). ``state`` None starts from ``gac.init`` (zero reference: the first step keeps g)."""
    return Placed(*update(grad, _state(grad, state, cfg), cfg, threshold))


def adam_moment(exp_avg: torch.Tensor, grad: torch.Tensor, beta1: float) -> torch.Tensor:
    """The first moment Adam/AdamW forms at this step from its stored ``exp_avg``: lerp(exp_avg, g, 1 − β1), the
    same kernel as ``torch.optim.Adam``'s single-tensor step."""
    return torch.lerp(exp_avg, grad, 1 - beta1)


def control_moment(moment: torch.Tensor, state: GACState | None, cfg: GACConfig,
                   threshold: torch.Tensor | float | None = None) -> Placed:
    """Momentum space for an optimizer written as explicit arithmetic that stores the moment it steps with (the toy
    simulators): ``out`` = m'_t, to be stored and stepped with (a skipped row must not step: ``stepping``)."""
    return Placed(*update(moment, _state(moment, state, cfg), cfg, threshold))


def on_momentum(buffer: torch.Tensor, moment: torch.Tensor, beta: float, state: GACState | None, cfg: GACConfig,
                threshold: torch.Tensor | float | None = None) -> Placed:
    """Momentum space around an optimizer that forms its moment itself (torch.optim, the LLM trainer's AdamW):
    ``moment`` is m_t the optimizer is about to form from ``buffer`` (``adam_moment``); ``out`` = the buffer to
    store before the step, so that the optimizer forms m'_t: buffer − (m_t − m'_t)/β on acting rows, ``buffer``
    elsewhere (a skipped row keeps it and must not step: ``stepping``)."""
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"on_momentum: beta (β1 or μ) must be in (0, 1], got {beta}")
    new, state, report = control_moment(moment, state, cfg, threshold)
    shifted = torch.where(_rows(report.regime == ACT), buffer - (moment - new) / beta, buffer)
    return Placed(shifted, state, report)


def control_step(proposed: torch.Tensor, state: GACState | None, cfg: GACConfig,
                 threshold: torch.Tensor | float | None = None) -> Placed:
    """Update space on a proposed step (or any positive multiple of it: the decision is scale-free and the
    projection linear): ``out`` = Δ' (0 on skipped rows, which must not step: ``stepping``)."""
    return Placed(*update(proposed, _state(proposed, state, cfg), cfg, threshold))


def on_update(before: torch.Tensor, after: torch.Tensor, state: GACState | None, cfg: GACConfig,
              threshold: torch.Tensor | float | None = None) -> Placed:
    """Update space around a step already taken from ``before`` to ``after`` (``control_step`` on Δ = after −
    before): ``out`` = the parameters to keep: after − (Δ − Δ') on acting rows, ``after`` on kept rows, ``before``
    on skipped rows."""
    proposed = after - before
    new, state, report = control_step(proposed, state, cfg, threshold)
    out = torch.where(_rows(report.regime == ACT), after - (proposed - new),
                      torch.where(_rows(report.regime == SKIP), before, after))
    return Placed(out, state, report)


__all__ = ["Placed", "adam_moment", "control_moment", "control_step", "on_gradient", "on_momentum",
           "on_update", "stepping"]
