"""Per-run optimizer pieces for K runs in lockstep: parameters, gradients and optimizer state as (K, P) rows.

AdamW with each run's own step size and step count (a row that does not step is left untouched) and gradient
clipping by each run's own norm (GAC on the rows is ``gac.placement``, called from ``sim.llm.controls``). Written by
hand because ``torch.optim`` steps one set of parameters with one step size; the arithmetic per row is that of
``torch.optim.AdamW`` (single-tensor path, no weight decay) and of ``clip_grad_norm_``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import gac


@dataclass
class AdamWRows:
    """AdamW's state for K runs: first and second moments (K, P) and each run's step count."""

    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    steps: list[int]
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    @classmethod
    def zeros(cls, theta: torch.Tensor) -> AdamWRows:
        return cls(torch.zeros_like(theta), torch.zeros_like(theta), [0] * theta.shape[0])

    def state_dict(self) -> dict:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "steps": list(self.steps),
                "betas": self.betas, "eps": self.eps}

    @classmethod
    def from_state_dict(cls, state: dict) -> AdamWRows:
        return cls(state["exp_avg"], state["exp_avg_sq"], list(state["steps"]), tuple(state["betas"]), state["eps"])


def per_row(values, like: torch.Tensor) -> torch.Tensor:
    """Python numbers, one per run, as a (K, 1) column of ``like``'s dtype (a scalar in the same rounding)."""
    return torch.tensor(values, dtype=like.dtype, device=like.device)[:, None]


@torch.no_grad()
def adamw_step(theta: torch.Tensor, grad: torch.Tensor, state: AdamWRows, lr: list[float], rows: list[int]) -> None:
    """One AdamW step (weight decay 0) of the runs ``rows`` with their step sizes ``lr`` (one per run, all K).

    Per row exactly torch.optim.AdamW's single-tensor update: m ← lerp(m, g, 1−β1); v ← β2·v + (1−β2)·g²;
    θ ← θ − (η/(1−β1^t))·m / (√v/√(1−β2^t) + ε). Rows not in ``rows`` (skipped or stopped runs) keep θ and state.
    """
    if not rows:
        return
    beta1, beta2 = state.betas
    every = len(rows) == theta.shape[0]
    index = None if every else torch.tensor(rows, device=theta.device)
    pick = (lambda t: t) if every else (lambda t: t.index_select(0, index))
    p, g, m, v = pick(theta.data), pick(grad), pick(state.exp_avg), pick(state.exp_avg_sq)
    for k in rows:
        state.steps[k] += 1
    steps = [state.steps[k] for k in rows]
    step_size = per_row([-lr[k] / (1 - beta1**t) for k, t in zip(rows, steps, strict=True)], p)
    correction2_sqrt = per_row([(1 - beta2**t) ** 0.5 for t in steps], p)
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    p.add_(step_size * m / (v.sqrt() / correction2_sqrt).add_(state.eps))
    if not every:
        for full, part in ((theta.data, p), (state.exp_avg, m), (state.exp_avg_sq, v)):
            full.index_copy_(0, index, part)


@torch.no_grad()
def clip_rows(grad: torch.Tensor, sizes: tuple[int, ...], max_norm: list[float]) -> torch.Tensor:
    """Scale each run's gradient row in place to norm ≤ its ``max_norm``, as ``clip_grad_norm_`` does for one
    model (the norm of the per-parameter norms; coefficient max_norm/(norm + 1e-6) capped at 1); the norms (K,)."""
    pieces = grad.split(sizes, dim=1)
    norms = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p, 2, dim=1) for p in pieces], 1), 2, dim=1)
    coef = (per_row(max_norm, grad)[:, 0] / (norms + 1e-6)).clamp(max=1.0)
    grad.mul_(coef[:, None])
    return norms


def gac_thresholds(configs: list[gac.GACConfig]) -> torch.Tensor | None:
    """The runs' fixed thresholds τ (K,) as a tensor, or None when they share one config (adaptive rules included)."""
    if all(cfg == configs[0] for cfg in configs):
        return None
    return torch.tensor([float(cfg.threshold) for cfg in configs], dtype=torch.float64)


__all__ = ["AdamWRows", "adamw_step", "clip_rows", "gac_thresholds", "per_row"]
