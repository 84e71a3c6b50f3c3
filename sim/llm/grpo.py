"""GRPO's token-level policy losses (a sum over valid tokens divided by their count), one per objective: the clipped
surrogate −min(r·A, clip(r, 1−ε, 1+ε)·A) with r = π_θ/π_b (π_b sampled the token, s steps ago); tis clips π_θ/π_prox
(π_prox: the policy at the step's start) and weighs by min(π_prox/π_b, C); bapo clips with the batch's adaptive
bounds; m2po takes r·A unclipped on the tokens ``m2po_mask`` keeps."""

from __future__ import annotations

import torch

from sim.stabilizers import BAPOConfig, bapo_clip_bounds, m2po_mask, tis_weights


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1)


def policy_loss(method: str, logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip_eps: float, params: dict,
                prox_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The loss of objective ``method`` on logp, behaviour_logp, mask (n, T) and advantages (n,); its clip_frac and
    clip bounds (NaN for m2po, which does not clip). ``params``: the objective's config as a dict."""
    adv, valid = advantages[:, None], mask.float()
    if method == "m2po":
        log_ratio = logp - behaviour_logp
        surrogate = torch.exp(log_ratio) * adv * m2po_mask(log_ratio, mask, params["m2_threshold"]).float()
        clipped, c_low, c_high = torch.zeros_like(valid), float("nan"), float("nan")
    else:
        if method == "tis" and prox_logp is None:
            raise ValueError("tis needs prox_logp (the current policy's log-probs at the start of the step)")
        ratio = torch.exp(logp - (prox_logp if method == "tis" else behaviour_logp))
        c_low, c_high = (bapo_clip_bounds(ratio.detach(), adv, mask, BAPOConfig(**params)) if method == "bapo"
                         else (1 - clip_eps, 1 + clip_eps))
        surrogate = torch.minimum(ratio * adv, ratio.clamp(c_low, c_high) * adv)
        if method == "tis":
            surrogate = surrogate * tis_weights(prox_logp - behaviour_logp, params["tis_cap"])
        # A token is clipped when the min picked the clipped branch (its gradient is zero).
        clipped = ((ratio - ratio.clamp(c_low, c_high)) * adv).detach() > 0
    loss = -(surrogate * valid).sum() / valid.sum().clamp_min(1)  # a masked-out token counts as 0, as in M2PO
    return loss, {"clip_frac": float(masked_mean(clipped.float(), valid)), "clip_low": c_low, "clip_high": c_high}


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean k3 estimate of KL(π_θ ‖ π_ref) on tokens sampled near π_θ: E[ρ − 1 − log ρ], ρ = π_ref/π_θ."""
    log_ratio = ref_logp - logp
    return masked_mean(torch.exp(log_ratio) - 1 - log_ratio, mask.float())


def group_samples(groups: torch.Tensor, group_size: int, device) -> torch.Tensor:
    """Sample indices of whole prompt groups (each group's G samples are contiguous)."""
    return (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1).to(device)
