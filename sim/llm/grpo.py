"""GRPO pieces: group-normalised advantages and the token-level policy loss of each method.

Notation per response token: log π_θ (current policy, with gradient), log π_b (behaviour policy that
sampled it, s steps old under asynchrony), A (its response's group-normalised advantage).
The loss is token-level: a sum over every valid token of the minibatch divided by their count.

- naive / ``gac`` / ``lr_scale`` / sync: the clipped GRPO/PPO surrogate with r = π_θ / π_b,
  −min(r·A, clip(r, 1−ε, 1+ε)·A). GAC acts on the gradient afterwards, not here.
- ``tis``: decoupled ratio: clip on π_θ / π_prox (π_prox = the current policy at the start of the
  step), times the truncated importance weight min(π_prox / π_b, C) (``stabilizers.tis_weights``).
- ``m2po``: unclipped r·A on the tokens kept by ``stabilizers.m2po_mask`` (second moment of log r
  held at or below τ_M2), as in the M2PO paper, which replaces the clip by this mask.
- ``bapo``: the clipped surrogate with r = π_θ / π_b and the batch's adaptive bounds [c_low, c_high]
  (``stabilizers.bapo_clip_bounds``: widened until the positive-advantage tokens' share of the loss
  reaches ρ0), −min(r·A, clip(r, c_low, c_high)·A).
Optional KL to a reference policy: the k3 estimator π_ref/π_θ − 1 − log(π_ref/π_θ), weight β.
"""

from __future__ import annotations

import torch

from sim.stabilizers import BAPOConfig, bapo_clip_bounds, bapo_clipped_surrogate, bapo_unclipped, m2po_mask, tis_weights


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1)


def policy_loss(method: str, logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip_eps: float, params: dict,
                prox_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The token-level policy loss of ``method`` and its diagnostics (clip_frac, kept_frac, clip_low, clip_high).

    Shapes: logp, behaviour_logp, mask (n, T); advantages (n,). ``params`` are the method's registry
    parameters (``stabilizers.method_params``); ``prox_logp`` is needed by ``tis``. clip_low and clip_high
    are the ratio's clip bounds (1 ∓ ε; BAPO's adaptive ones; NaN for m2po, which does not clip).
    """
    adv = advantages[:, None]
    valid = mask.float()
    c_low, c_high = 1 - clip_eps, 1 + clip_eps
    if method == "tis":
        if prox_logp is None:
            raise ValueError("tis needs prox_logp (the current policy's log-probs at the start of the step)")
        weight = tis_weights(prox_logp - behaviour_logp, params["tis_cap"])
        ratio = torch.exp(logp - prox_logp)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv) * weight
        clipped = ((ratio - ratio.clamp(1 - clip_eps, 1 + clip_eps)) * adv).detach() > 0
        kept = valid
    elif method == "m2po":
        log_ratio = logp - behaviour_logp
        keep = m2po_mask(log_ratio, mask, params["m2_threshold"])
        surrogate = torch.exp(log_ratio) * adv
        clipped = torch.zeros_like(mask)
        kept = keep.float()
        c_low = c_high = float("nan")
    elif method == "bapo":
        ratio = torch.exp(logp - behaviour_logp)
        c_low, c_high = bapo_clip_bounds(ratio.detach(), adv, mask, BAPOConfig(**params))
        surrogate = bapo_clipped_surrogate(ratio, adv, c_low, c_high)
        clipped = ~bapo_unclipped(ratio.detach(), adv, c_low, c_high)
        kept = valid
    else:
        ratio = torch.exp(logp - behaviour_logp)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
        # A token is "clipped" when the min picked the clipped branch (its gradient is zero).
        clipped = ((ratio - ratio.clamp(1 - clip_eps, 1 + clip_eps)) * adv).detach() > 0
        kept = valid
    # Normalised by all valid tokens (masked-out tokens count as zero contribution, as in M2PO).
    loss = -(surrogate * kept).sum() / valid.sum().clamp_min(1)
    stats = {"clip_frac": float(masked_mean(clipped.float(), valid)), "kept_frac": float(masked_mean(kept, valid)),
             "clip_low": c_low, "clip_high": c_high}
    return loss, stats


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean k3 estimate of KL(π_θ ‖ π_ref) from tokens sampled near π_θ (GRPO's KL term)."""
    log_ratio = ref_logp - logp
    return masked_mean(torch.exp(log_ratio) - 1 - log_ratio, mask.float())


def behaviour_kl(logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """k3 estimate of KL(π_b ‖ π_θ) on tokens sampled from π_b: E[r − 1 − log r], r = π_θ / π_b."""
    log_ratio = (logp - behaviour_logp).detach()
    return float(masked_mean(torch.exp(log_ratio) - 1 - log_ratio, mask.float()))


def group_samples(groups: torch.Tensor, group_size: int, device) -> torch.Tensor:
    """Sample indices of whole prompt groups (each group's G samples are contiguous)."""
    return (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1).to(device)
