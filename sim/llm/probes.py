"""What the GRPO trainer measures besides its loss: cosines of consecutive gradients and updates, and the SNR probe.

Cosines are ``gac.cosine64``'s (``gac.alignment``'s numbers, each vector converted to float64 once and kept as
the next cosine's reference), one per run of a batch (rows of (K, P) tensors). The probes read the trainer's state
and change none of its numbers.
"""

from __future__ import annotations

import math

import torch

from gac.cosine64 import Float64Vector, as_float64, cosine64
from sim.llm.grpo import group_samples
from sim.llm.state import BatchState


def cosine(a: Float64Vector, b: Float64Vector | None) -> float:
    """cos(a, b) of two vectors as a float, NaN without b (nothing to compare with yet)."""
    return math.nan if b is None else float(cosine64(a, b))


def snr_probe(batch: BatchState, data: dict, minibatch_losses, backward) -> list[float]:
    """Per run: cos between the raw gradients of two disjoint halves of its prompt groups, at the current θ.

    ``minibatch_losses(batch, data, idx)`` and ``backward(batch, losses)`` are the trainer's. Uses no random numbers
    and leaves no gradient behind, so the step's numbers do not change.
    """
    args, runs = batch.args, len(batch.runs)
    halves = torch.arange(args.prompts_per_step).chunk(2)
    if len(halves) < 2:
        return [math.nan] * runs
    grads = []
    for half in halves:
        idx = group_samples(half, args.group_size, batch.theta.device)[None].expand(runs, -1)
        grads.append(backward(batch, minibatch_losses(batch, data, idx)[0]).clone())
    batch.theta.grad = None
    return cosine64(as_float64(grads[0]), as_float64(grads[1])).tolist()


def snr_from_cosine(c: float) -> float:
    """Per-half SNR_h = c/(1 − c) implied by the halves' cosine c (E[c] ≈ SNR_h/(1 + SNR_h)); NaN if c ≤ 0."""
    if not c > 0:
        return math.nan
    return math.inf if c >= 1 else c / (1 - c)


__all__ = ["cosine", "snr_from_cosine", "snr_probe"]
