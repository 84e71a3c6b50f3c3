"""The one registry of methods compared in every simulator (and the LLM run), with their math.

A method name means the same thing everywhere: ``none`` (naive async), ``gac`` (Gradient Alignment
Control via the ``gac`` library), ``lr_scale`` and ``dc`` (stale-gradient model), ``tis`` and
``m2po`` (stale-data model). Each entry names the paper it follows. Simulators call the functions
below; they never re-implement a method.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import gac

STALE_GRADIENT, STALE_DATA = "stale-gradient", "stale-data"


@dataclass(frozen=True)
class Stabilizer:
    """A method in the comparison: where it applies, what it follows, its default parameters."""

    name: str
    models: tuple[str, ...]
    paper: str
    summary: str
    defaults: dict = field(default_factory=dict)


STABILIZERS: dict[str, Stabilizer] = {s.name: s for s in [
    Stabilizer("none", (STALE_GRADIENT, STALE_DATA), "—",
               "naive async: use the stale gradient / stale data as if it were fresh"),
    Stabilizer("gac", (STALE_GRADIENT, STALE_DATA),
               "Xu et al., GAC: Stabilizing Asynchronous RL Training for LLMs via Gradient Alignment Control, "
               "arXiv:2603.01501 (2026)",
               "project (or cap, or skip) the gradient's part along the previous gradient when cos > τ",
               {"threshold": 0.0, "mode": "project", "skip_threshold": None, "reference": "prev", "ema_decay": 0.9,
                "threshold_rule": None, "rule_margin": 0.2, "rule_floor": 0.1, "rule_ceiling": 0.9,
                "space": "gradient"}),
    Stabilizer("lr_scale", (STALE_GRADIENT, STALE_DATA),
               "Zhang, Gupta, Lian, Liu, Staleness-aware async-SGD for distributed deep learning, IJCAI 2016",
               "divide the step size by 1 + s_t"),
    Stabilizer("dc", (STALE_GRADIENT,),
               "Zheng et al., Asynchronous SGD with delay compensation (DC-ASGD), ICML 2017",
               "g + λ·g⊙g⊙(θ_t − θ_{t−s}): first-order Taylor correction with a diagonal Hessian proxy",
               {"dc_lambda": 0.04}),
    Stabilizer("tis", (STALE_DATA,),
               "Yao et al., Your efficient RL framework secretly brings you off-policy RL training (2025); "
               "truncated importance sampling, Ionides 2008",
               "weight each sample's policy-gradient term by min(π_θ / π_behaviour, C)",
               {"tis_cap": 2.0}),
    Stabilizer("m2po", (STALE_DATA,),
               "Zheng et al., Prosperity before collapse: how far can off-policy RL reach with stale data on "
               "LLMs? (M2PO), arXiv:2510.01161 (2025)",
               "mask the tokens with the largest (log r)² until the batch's second moment of log r ≤ τ_M2",
               {"m2_threshold": 0.04}),
]}


def get_stabilizer(name: str, model: str | None = None) -> Stabilizer:
    """The registry entry of ``name``; with ``model``, also check it applies to that staleness model."""
    if name not in STABILIZERS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(STABILIZERS)}")
    entry = STABILIZERS[name]
    if model is not None and model not in entry.models:
        raise ValueError(f"method {name!r} does not apply to the {model} model (only {', '.join(entry.models)})")
    return entry


def method_params(name: str, **overrides) -> dict:
    """The method's default parameters updated with ``overrides`` (unknown keys are an error)."""
    defaults = dict(get_stabilizer(name).defaults)
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise ValueError(f"method {name!r} has no parameter(s) {sorted(unknown)}; it takes {sorted(defaults)}")
    defaults.update(overrides)
    return defaults


GAC_RUN_KEYS = ("threshold_rule", "rule_margin", "rule_floor", "rule_ceiling", "space")
"""Parameters of the ``gac`` entry that are not GACConfig fields: the adaptive-threshold rule
(``threshold_rule="ema"`` → ``gac.EMAThreshold(margin, floor, ceiling)``) and where GAC acts
(``space="gradient"``: the raw gradient; ``"update"``: the optimizer's proposed step, e.g. Adam's
m̂/(√v̂+ε), with the reference built from past proposed steps)."""
GAC_SPACES = ("gradient", "update")


def gac_config(**overrides) -> gac.GACConfig:
    """The GACConfig of the ``gac`` method (registry defaults updated with ``overrides``)."""
    params = method_params("gac", **overrides)
    if params["space"] not in GAC_SPACES:
        raise ValueError(f"gac space must be one of {GAC_SPACES}, got {params['space']!r}")
    rule = params["threshold_rule"]
    if rule not in (None, "ema"):
        raise ValueError(f"gac threshold_rule must be None or 'ema', got {rule!r}")
    fields = {k: v for k, v in params.items() if k not in GAC_RUN_KEYS}
    if rule == "ema":
        fields["threshold"] = gac.EMAThreshold(margin=params["rule_margin"], floor=params["rule_floor"],
                                               ceiling=params["rule_ceiling"])
    return gac.GACConfig(**fields)


def lr_scale_factor(staleness: torch.Tensor | int) -> torch.Tensor | float:
    """Staleness-aware step size factor 1 / (1 + s)."""
    return 1.0 / (1.0 + staleness)


def delay_compensated_gradient(grad: torch.Tensor, params_now: torch.Tensor, params_stale: torch.Tensor,
                               dc_lambda: float) -> torch.Tensor:
    """DC-ASGD: g(θ_{t−s}) + λ·g⊙g⊙(θ_t − θ_{t−s}), an estimate of g(θ_t)."""
    return grad + dc_lambda * grad * grad * (params_now - params_stale)


def tis_weights(log_ratio: torch.Tensor, tis_cap: float = 2.0) -> torch.Tensor:
    """Truncated importance weights min(exp(log r), C), detached (log r = log π_θ − log π_behaviour)."""
    return log_ratio.detach().exp().clamp(max=tis_cap)


def m2po_mask(log_ratio: torch.Tensor, valid: torch.Tensor | None = None, m2_threshold: float = 0.04) -> torch.Tensor:
    """M2PO's token mask: drop the tokens with the largest (log r)² until mean (log r)² ≤ τ_M2.

    Returns a bool tensor shaped like ``log_ratio`` (True = kept). ``valid`` marks real tokens
    (padding is neither kept nor counted). The largest kept set is the k smallest (log r)² with the
    largest k whose prefix mean is ≤ τ_M2 (prefix means of ascending values are nondecreasing).
    """
    m2 = log_ratio.detach().square()
    valid = torch.ones_like(m2, dtype=torch.bool) if valid is None else valid.bool()
    values = m2[valid]
    if values.numel() == 0:
        return valid.clone()
    ordered, order = torch.sort(values)
    prefix_mean = ordered.cumsum(0) / torch.arange(1, len(ordered) + 1, dtype=ordered.dtype)
    keep_count = int((prefix_mean <= m2_threshold).sum())
    kept = torch.zeros_like(values, dtype=torch.bool)
    kept[order[:keep_count]] = True
    mask = torch.zeros_like(valid)
    mask[valid] = kept
    return mask


def m2po_mask_rows(log_ratio: torch.Tensor, m2_threshold: float | torch.Tensor = 0.04) -> torch.Tensor:
    """``m2po_mask`` applied independently to each row of ``log_ratio`` (shape (R, N)): one batch per row.

    ``m2_threshold`` may be a float or a tensor of shape (R,). Same rule as ``m2po_mask``: per row,
    keep the k smallest (log r)² with the largest k whose prefix mean is ≤ τ_M2.
    """
    m2 = log_ratio.detach().square()
    ordered, order = torch.sort(m2, dim=-1)
    counts = torch.arange(1, m2.shape[-1] + 1, dtype=m2.dtype, device=m2.device)
    prefix_mean = ordered.cumsum(-1) / counts
    tau = torch.as_tensor(m2_threshold, dtype=m2.dtype, device=m2.device).reshape(-1, 1)
    keep_count = (prefix_mean <= tau).sum(-1, keepdim=True)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(m2.shape[-1], device=m2.device).expand_as(order).contiguous())
    return rank < keep_count
