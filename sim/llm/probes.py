"""What the GRPO trainer measures besides its loss: cosines of consecutive gradients and updates, and the SNR probe.

Cosines are ``gac.cosine64``'s (``gac.alignment``'s numbers, each vector converted to float64 once and kept as
the next cosine's reference). The probes read the trainer's state and change none of its numbers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from gac.cosine64 import Float64Vector, as_float64, cosine64
from sim.llm.grpo import group_samples

if TYPE_CHECKING:
    from sim.llm.train import TrainState


def flat_grad(params) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in params])


def flat_params(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def cosine(a: Float64Vector, b: Float64Vector | None) -> float:
    """cos(a, b) as a float, NaN without b (nothing to compare with yet)."""
    return math.nan if b is None else float(cosine64(a, b))


def cosine_to_prev(state: TrainState, name: str, current: Float64Vector) -> float:
    """cos(current, state.prev_<name>) (NaN before the first); ``current`` is kept as the next one's reference."""
    prev = getattr(state, f"prev_{name}")
    reference = None if prev is None else as_float64(prev, state.prev64.get(name))
    state.prev64[name] = current
    return cosine(current, reference)


def snr_probe(state: TrainState, batch: dict, minibatch_loss) -> float:
    """cos between the raw gradients of two disjoint halves of the step's prompt groups, at the current θ.

    ``minibatch_loss(state, batch, idx) -> (loss, stats)`` is the trainer's loss. Uses no random numbers and
    leaves no gradient behind, so the step's numbers do not change.
    """
    halves = torch.arange(state.args.prompts_per_step).chunk(2)
    if len(halves) < 2:
        return math.nan
    grads = []
    for half in halves:
        state.optimizer.zero_grad(set_to_none=True)
        loss, _ = minibatch_loss(state, batch, group_samples(half, state.args.group_size, state.args.device))
        loss.backward()
        grads.append(flat_grad(state.params))
    state.optimizer.zero_grad(set_to_none=True)
    return cosine(as_float64(grads[0]), as_float64(grads[1]))


def snr_from_cosine(c: float) -> float:
    """Per-half SNR_h = c/(1 − c) implied by the halves' cosine c (E[c] ≈ SNR_h/(1 + SNR_h)); NaN if c ≤ 0."""
    if not c > 0:
        return math.nan
    return math.inf if c >= 1 else c / (1 - c)


__all__ = ["Float64Vector", "as_float64", "cosine", "cosine_to_prev", "flat_grad", "flat_params", "snr_from_cosine",
           "snr_probe"]
