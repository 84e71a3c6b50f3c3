"""Group-relative advantages (GRPO): each sample's reward against the other samples of its group.

One function for every simulator that groups rewards (the bandits, the LLM run), so the advantage
means the same thing at every scale.
"""

from __future__ import annotations

import torch

ADVANTAGES = ("grpo", "mean")
"""grpo: (r − mean)/(std + ε) per group; mean: r − mean (no scaling)."""

ADVANTAGE_EPS = 1e-6
"""ε in the GRPO denominator: keeps a group whose rewards are all equal at advantage 0."""


def group_advantages(rewards: torch.Tensor, advantage: str = "grpo", eps: float = ADVANTAGE_EPS,
                     baseline: torch.Tensor | None = None) -> torch.Tensor:
    """Advantages over the last dim (the group): (r − mean)/(std + ε) for "grpo", r − mean for "mean".

    The std is the population std (unbiased=False). For rewards laid out group after group in a flat
    tensor, reshape to (-1, group_size) first. ``baseline`` (one value per group, ``rewards``' shape without the
    last dim) replaces the group mean, e.g. VCPO's off-policy baseline (``sim.stabilizers.vcpo_baseline``); the std
    stays the group's.
    """
    if advantage not in ADVANTAGES:
        raise ValueError(f"advantage must be one of {ADVANTAGES}, got {advantage!r}")
    centred = rewards - (rewards.mean(-1, keepdim=True) if baseline is None else baseline[..., None])
    if advantage == "mean":
        return centred
    return centred / (rewards.std(-1, unbiased=False, keepdim=True) + eps)


__all__ = ["ADVANTAGES", "ADVANTAGE_EPS", "group_advantages"]
