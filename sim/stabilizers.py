"""The one registry of methods compared in every simulator (and the LLM run), with their math.

A stabilizer is one choice on each of three axes (:class:`Combination`):

- objective (what gradient the data gives): none (the plain clipped ratio / stale gradient), ``tis``,
  ``m2po``, ``bapo`` (stale-data model), ``dc`` (stale-gradient model);
- direction control (what is done to the gradient's direction): none, ``gac`` (Gradient Alignment Control via
  the ``gac`` library, in gradient, update or momentum space), ``braking`` (Adaptive Braking);
- step control (the step size): constant, ``lr_scale`` (η/(1+s)), ``kl_target`` (η follows the measured KL to
  the behaviour policy toward a target; stale-data model only).

A method name is its choices joined by ``+`` (``gac+tis``, ``kl_target+gac``; order does not matter), ``naive``
being every axis at its default (naive async; records call it ``sync`` at s = 0, see :func:`record_method`). Each
entry names the paper it follows and, where it has parameters, the frozen config dataclass that holds them.
Simulators call the functions below; they never re-implement a method. The registry and its configs load without
torch (a command line parses them before any work); the functions import it where they run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import gac

if TYPE_CHECKING:
    import torch

STALE_GRADIENT, STALE_DATA = "stale-gradient", "stale-data"
NAIVE, SYNC = "naive", "sync"
NO_CONTROL = "none"
"""An axis' value when the method chooses nothing on it (records' objective_fn / direction_control / step_control)."""


@dataclass(frozen=True)
class TISConfig:
    """Truncated importance sampling's parameters."""

    tis_cap: float = 2.0
    """C: the importance weight π_θ / π_behaviour is truncated at C (> 0)."""

    def __post_init__(self) -> None:
        if not self.tis_cap > 0:
            raise ValueError(f"tis_cap must be > 0, got {self.tis_cap}")


@dataclass(frozen=True)
class M2POConfig:
    """M2PO's parameters."""

    m2_threshold: float = 0.04
    """τ_M2: tokens are masked until the batch's mean (log r)² is at most τ_M2 (>= 0)."""

    def __post_init__(self) -> None:
        if not self.m2_threshold >= 0:
            raise ValueError(f"m2_threshold must be >= 0, got {self.m2_threshold}")


@dataclass(frozen=True)
class DCConfig:
    """Delay-compensated ASGD's parameters."""

    dc_lambda: float = 0.04
    """λ: weight of the diagonal Hessian proxy g⊙g in the Taylor correction (>= 0)."""

    def __post_init__(self) -> None:
        if not self.dc_lambda >= 0:
            raise ValueError(f"dc_lambda must be >= 0, got {self.dc_lambda}")


@dataclass(frozen=True)
class BAPOConfig:
    """BAPO's parameters, named as in Xi et al. (arXiv:2510.18927).

    Defaults: ρ0 and the ranges [a⁻, b⁻] = [0.6, 0.9], [a⁺, b⁺] = [1.2, 3.0] as the authors report
    for the paper; the steps δ1 = δ2 = 0.05 from the authors' verl configuration.

    The clip bounds are importance-ratio bounds c_low < 1 < c_high (PPO's 1 − ε_low and 1 + ε_high).
    """

    rho_0: float = 0.5
    """ρ0: target share of the positive-advantage tokens in the loss, in (0, 1]."""
    a_minus: float = 0.6
    """a⁻: start (smallest value) of the lower clip bound c_low."""
    b_minus: float = 0.9
    """b⁻: largest value c_low may be raised to (a⁻ <= b⁻ < 1)."""
    a_plus: float = 1.2
    """a⁺: start (smallest value) of the upper clip bound c_high."""
    b_plus: float = 3.0
    """b⁺: largest value c_high may be raised to (1 < a⁺ <= b⁺)."""
    delta_1: float = 0.05
    """δ1: step by which c_high is raised (> 0)."""
    delta_2: float = 0.05
    """δ2: step by which c_low is raised (> 0); with a⁻ + δ2 > b⁻ neither bound ever moves."""

    def __post_init__(self) -> None:
        if not 0 < self.rho_0 <= 1:
            raise ValueError(f"BAPO rho_0 must be in (0, 1], got {self.rho_0}")
        if not 0 < self.a_minus <= self.b_minus < 1:
            raise ValueError(f"BAPO needs 0 < a_minus <= b_minus < 1, got {self.a_minus}, {self.b_minus}")
        if not 1 < self.a_plus <= self.b_plus:
            raise ValueError(f"BAPO needs 1 < a_plus <= b_plus, got {self.a_plus}, {self.b_plus}")
        if not (self.delta_1 > 0 and self.delta_2 > 0):
            raise ValueError(f"BAPO steps delta_1, delta_2 must be > 0, got {self.delta_1}, {self.delta_2}")


@dataclass(frozen=True)
class BrakingConfig:
    """Adaptive Braking's parameter (Venigalla, Kosson, Chiley, Köster, arXiv:2007.01397)."""

    braking_alpha: float = 1.0
    """α: the gradient is scaled by 1 − α·cos(g, v), v the optimizer's velocity (first moment); in [0, 2]."""

    def __post_init__(self) -> None:
        if not 0 <= self.braking_alpha <= 2:
            raise ValueError(f"braking_alpha must be in [0, 2], got {self.braking_alpha}")


@dataclass(frozen=True)
class KLTargetConfig:
    """KL-target step control: η_t = η·clip(κ / KL_t, floor, 1), KL_t the measured KL to the behaviour policy."""

    kl_target: float = 0.01
    """κ (> 0): the step is cut in proportion once the KL to π_b exceeds κ. Default: PPO's adaptive-KL target
    d_targ = 0.01 (Schulman et al. 2017), a value chosen before any run of this package."""
    kl_floor: float = 0.01
    """smallest factor the step may be cut to, in (0, 1]: a bad KL estimate can slow a run, never stop it."""

    def __post_init__(self) -> None:
        if not self.kl_target > 0:
            raise ValueError(f"kl_target must be > 0, got {self.kl_target}")
        if not 0 < self.kl_floor <= 1:
            raise ValueError(f"kl_floor must be in (0, 1], got {self.kl_floor}")


@dataclass(frozen=True)
class VCPOConfig:
    """VCPO's parameters (Huang, Zhang, Hu, Yang, Han, arXiv:2602.17616): the step size scaled by the effective
    sample size of the update's importance weights, and the off-policy minimum-variance baseline."""

    vcpo_reference_ratio: float = 1.0
    """ρ_ref ∈ (0, 1]: the ESS ratio from which on the step is not cut (1: any drop below a full batch cuts)."""
    vcpo_power: float = 0.5
    """the factor's power (> 0): ½ for Adam-like optimizers (step ∝ √batch), 1 for SGD (linear scaling)."""
    vcpo_baseline: bool = True
    """replace the group mean in the advantage by the off-policy minimum-variance baseline (``vcpo_baseline``)."""

    def __post_init__(self) -> None:
        if not 0 < self.vcpo_reference_ratio <= 1:
            raise ValueError(f"vcpo_reference_ratio must be in (0, 1], got {self.vcpo_reference_ratio}")
        if not self.vcpo_power > 0:
            raise ValueError(f"vcpo_power must be > 0, got {self.vcpo_power}")


OBJECTIVE, DIRECTION, STEP = "objective", "direction", "step"


@dataclass(frozen=True)
class Stabilizer:
    """A method in the comparison: where it applies, what it follows, its parameters.

    ``config`` is the method's frozen parameter dataclass (None: no parameters, or ``gac``, whose
    ``gac.GACConfig`` is built by ``gac_config`` from ``defaults``); its field defaults are ``defaults``.
    """

    name: str
    models: tuple[str, ...]
    paper: str
    summary: str
    defaults: dict = field(default_factory=dict)
    config: type | None = None
    axis: str = OBJECTIVE


def _entry(name, models, paper, summary, config, axis=OBJECTIVE) -> Stabilizer:
    return Stabilizer(name, models, paper, summary, asdict(config()), config, axis)


STABILIZERS: dict[str, Stabilizer] = {s.name: s for s in [
    Stabilizer(NAIVE, (STALE_GRADIENT, STALE_DATA), "—",
               "naive async: use the stale gradient / stale data as if it were fresh"),
    Stabilizer("gac", (STALE_GRADIENT, STALE_DATA),
               "Xu et al., GAC: Stabilizing Asynchronous RL Training for LLMs via Gradient Alignment Control, "
               "arXiv:2603.01501 (2026)",
               "project (or cap, or skip) the gradient's part along the previous gradient when cos > τ",
               {"threshold": 0.0, "mode": "project", "skip_threshold": None, "reference": "prev", "ema_decay": 0.9,
                "threshold_rule": None, "rule_margin": 0.2, "rule_floor": 0.1, "rule_ceiling": 0.9,
                "space": "gradient"}, axis=DIRECTION),
    _entry("braking", (STALE_GRADIENT, STALE_DATA),
           "Venigalla, Kosson, Chiley, Köster, Adaptive Braking for Mitigating Gradient Delay, arXiv:2007.01397 "
           "(2020)",
           "scale the gradient by 1 − α·cos(g, v), v the optimizer's velocity: brake when the gradient pushes "
           "along the velocity, push back harder when it opposes it", BrakingConfig, DIRECTION),
    Stabilizer("lr_scale", (STALE_GRADIENT, STALE_DATA),
               "Zhang, Gupta, Lian, Liu, Staleness-aware async-SGD for distributed deep learning, IJCAI 2016",
               "divide the step size by 1 + s_t", axis=STEP),
    _entry("kl_target", (STALE_DATA,),
           "this package's drift control, after PPO's adaptive-KL target (Schulman et al., arXiv:1707.06347)",
           "cut the step size to η·clip(κ/KL_t, floor, 1), KL_t the measured KL to the behaviour policy",
           KLTargetConfig, STEP),
    _entry("vcpo", (STALE_DATA,),
           "Huang, Zhang, Hu, Yang, Han, Stable Asynchrony: Variance-Controlled Off-Policy RL for LLMs (VCPO), "
           "arXiv:2602.17616 (2026)",
           "scale the step size by (ESS/N)^½ of the update's sequence-level importance weights π_θ/π_b, and take "
           "the advantage against the off-policy minimum-variance baseline", VCPOConfig, STEP),
    _entry("dc", (STALE_GRADIENT,),
           "Zheng et al., Asynchronous SGD with delay compensation (DC-ASGD), ICML 2017",
           "g + λ·g⊙g⊙(θ_t − θ_{t−s}): first-order Taylor correction with a diagonal Hessian proxy", DCConfig),
    _entry("tis", (STALE_DATA,),
           "Yao et al., Your efficient RL framework secretly brings you off-policy RL training (2025); "
           "truncated importance sampling, Ionides 2008",
           "weight each sample's policy-gradient term by min(π_θ / π_behaviour, C)", TISConfig),
    _entry("m2po", (STALE_DATA,),
           "Zheng et al., Prosperity before collapse: how far can off-policy RL reach with stale data on "
           "LLMs? (M2PO), arXiv:2510.01161 (2025)",
           "mask the tokens with the largest (log r)² until the batch's second moment of log r ≤ τ_M2", M2POConfig),
    _entry("bapo", (STALE_DATA,),
           "Xi et al., BAPO: Stabilizing Off-Policy Reinforcement Learning for LLMs via Balanced Policy "
           "Optimization with Adaptive Clipping, arXiv:2510.18927 (2025)",
           "PPO clip [c_low, c_high] widened per batch until the positive-advantage tokens' share of the "
           "loss reaches ρ0", BAPOConfig),
]}


def get_stabilizer(name: str, model: str | None = None) -> Stabilizer:
    """The registry entry of ``name``; with ``model``, also check it applies to that staleness model."""
    if name not in STABILIZERS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(STABILIZERS)}")
    entry = STABILIZERS[name]
    if model is not None and model not in entry.models:
        raise ValueError(f"method {name!r} does not apply to the {model} model (only {', '.join(entry.models)})")
    return entry


@dataclass(frozen=True)
class Combination:
    """A stabilizer as one choice per axis (registry names; ``NO_CONTROL`` = nothing chosen on that axis)."""

    objective: str = NO_CONTROL
    direction: str = NO_CONTROL
    step: str = NO_CONTROL

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in (self.objective, self.direction, self.step) if p != NO_CONTROL)

    @property
    def name(self) -> str:
        """The canonical method name: the chosen parts in axis order joined by ``+`` (``naive`` if none)."""
        return "+".join(self.parts) or NAIVE


def parse_method(name: str, model: str | None = None) -> Combination:
    """The :class:`Combination` a method name stands for (``gac+tis`` → objective tis, direction gac).

    Every part must be a registry entry applying to ``model``, at most one per axis; else one-line ValueError.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"method must be a non-empty name, got {name!r}")
    chosen: dict[str, str] = {}
    for part in name.split("+"):
        entry = get_stabilizer(part.strip(), model)
        if entry.name == NAIVE:
            continue
        if entry.axis in chosen:
            raise ValueError(f"method {name!r} chooses two {entry.axis} controls ({chosen[entry.axis]}, "
                             f"{entry.name}); combine at most one per axis")
        chosen[entry.axis] = entry.name
    if name.strip() != NAIVE and not chosen:
        raise ValueError(f"method {name!r} names nothing")
    if NAIVE in [p.strip() for p in name.split("+")] and chosen:
        raise ValueError(f"method {name!r}: 'naive' chooses nothing and cannot be combined")
    return Combination(**chosen)


def record_method(combination: Combination, staleness: int) -> str:
    """The records' ``method``: the combination's canonical name, ``sync`` for naive at s = 0 (synchronous RL)."""
    return SYNC if combination.name == NAIVE and staleness == 0 else combination.name


def method_params(name: str, **overrides) -> dict:
    """The method's default parameters updated with ``overrides`` (unknown keys are an error)."""
    defaults = dict(get_stabilizer(name).defaults)
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise ValueError(f"method {name!r} has no parameter(s) {sorted(unknown)}; it takes {sorted(defaults)}")
    defaults.update(overrides)
    config = get_stabilizer(name).config
    if config is not None:
        config(**defaults)  # validates the values
    return defaults


GAC_RUN_KEYS = ("threshold_rule", "rule_margin", "rule_floor", "rule_ceiling")
"""Parameters of the ``gac`` entry that are not GACConfig fields: the adaptive-threshold rule
(``threshold_rule="ema"`` → ``gac.EMAThreshold(margin, floor, ceiling)``). ``space`` is GACConfig's own: where GAC
acts (``"gradient"``: the raw gradient; ``"update"``: the optimizer's proposed step, e.g. Adam's m̂/(√v̂+ε), with the
reference built from past proposed steps; ``"momentum"``: the optimizer's first moment before the step, with the
reference built from past uncontrolled first moments, the controlled one stored)."""
GAC_SPACES = ("gradient", "update", "momentum")


def gac_config(**overrides) -> gac.GACConfig:
    """The GACConfig of the ``gac`` method (registry defaults updated with ``overrides``)."""
    params = method_params("gac", **overrides)
    rule = params["threshold_rule"]
    if rule not in (None, "ema"):
        raise ValueError(f"gac threshold_rule must be None or 'ema', got {rule!r}")
    fields = {k: v for k, v in params.items() if k not in GAC_RUN_KEYS}
    if rule == "ema":
        fields["threshold"] = gac.EMAThreshold(margin=params["rule_margin"], floor=params["rule_floor"],
                                               ceiling=params["rule_ceiling"])
    return gac.GACConfig(**fields)


def braking_scale(cosine: torch.Tensor | float, braking_alpha: float) -> torch.Tensor | float:
    """Adaptive Braking's factor on the gradient: 1 − α·cos(g, v) (v the velocity; 1 where cos is NaN)."""
    import torch

    if isinstance(cosine, torch.Tensor):
        return 1 - braking_alpha * torch.nan_to_num(cosine, nan=0.0)
    return 1.0 if math.isnan(cosine) else 1 - braking_alpha * cosine


def kl_target_factor(kl: torch.Tensor | float, kl_target: float, kl_floor: float) -> torch.Tensor | float:
    """KL-target step control's factor on η: clip(κ / KL, floor, 1) (1 where KL ≤ κ or is not positive)."""
    import torch

    if isinstance(kl, torch.Tensor):
        return (kl_target / kl.clamp_min(1e-30)).clamp(kl_floor, 1.0)
    if not kl > 0:
        return 1.0
    return min(1.0, max(kl_floor, kl_target / kl))


# VCPO (Huang, Zhang, Hu, Yang, Han, "Stable Asynchrony: Variance-Controlled Off-Policy RL for LLMs",
# arXiv:2602.17616): the step size follows the effective sample size of the update's importance weights, and the
# policy-gradient baseline is the one of least variance under those weights. The LLM trainer applies both
# (sim/llm: ``sequence_weights`` of the update's sequences, ``vcpo_step_factor`` on η, ``vcpo_baseline`` in the
# advantage); so do the bandits (sim/bandit.py: per-sample weights, the exact score norm; the step in sim/grid.py).
# The quadratic (stale-gradient model: no samples, no weights) refuses the name through the entry's models.

def sequence_weights(token_log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence-level importance weights over the last two dims (n, T) → (n,): w_i ∝ exp(Σ_t log r_i,t) over the
    sequence's valid tokens, divided by the largest (so no weight overflows; ESS and the baseline are invariant to a
    common scale). Rows of a leading dim are scaled separately."""
    import torch

    log_w = (token_log_ratio.detach() * mask).sum(-1)
    return torch.exp(log_w - log_w.amax(-1, keepdim=True))


def logit_score_sq(logp_all: torch.Tensor, token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per sequence, Σ_t ‖∇_z log softmax(z_t)[y_t]‖² = Σ_t (1 − 2π(y_t) + Σ_v π_v²) over its valid tokens: the
    squared norm of its score in logit space (forward only), the stand-in this package uses for VCPO's
    ‖∇_θ log π_θ(y_i)‖² (which takes one backward per sequence). ``logp_all`` (..., n, T, V), the rest (..., n, T)."""
    import torch

    sum_sq = torch.exp(2 * logp_all).sum(-1)
    per_token = 1 - 2 * token_logp.exp() + sum_sq
    return (per_token.detach() * mask).sum(-1)


def effective_sample_size(weights: torch.Tensor,
                          valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Kish's effective sample size of importance weights over the last dim: (ESS, ESS / N).

    ESS = (Σ_i w_i)² / Σ_i w_i², N the number of (valid) samples; ESS / N ∈ (0, 1], 1 when every weight is equal
    and 1/N when one sample carries all the weight. Invariant to scaling all weights. For VCPO the samples are one
    optimizer update's sequences and w_i = exp(Σ_t [log π_prox(y_i,t) − log π_b(y_i,t)]) over y_i's tokens: the
    sequence-level ratio of the learner's policy at the RL step's start (π_prox) to the sampler's (π_b), not per
    token. ``valid`` (bool, same shape) leaves padding out of both sums and N. A row
    without a valid sample, or whose weights are all 0, has ESS 0 and ratio 0.
    """
    import torch

    weights = weights.detach()
    if valid is not None:
        weights = torch.where(valid.bool(), weights, torch.zeros_like(weights))
        count = valid.bool().sum(-1).to(weights.dtype)
    else:
        count = torch.full(weights.shape[:-1], weights.shape[-1], dtype=weights.dtype, device=weights.device)
    total, squares = weights.sum(-1), (weights * weights).sum(-1)
    ess = torch.where(squares > 0, total * total / squares.where(squares > 0, torch.ones_like(squares)), 0.0)
    return ess, torch.where(count > 0, ess / count.clamp_min(1), 0.0)


def vcpo_step_factor(ess_ratio: torch.Tensor | float, reference_ratio: float = 1.0,
                     power: float = 0.5) -> torch.Tensor | float:
    """VCPO's factor on the step size: min(1, (ESS/N) / ρ_ref)^power.

    The update's gradient averages N importance-weighted samples but carries the information of about ESS of them,
    so its variance grows like 1/ESS; the step is cut to keep the update's noise near what a full on-policy batch
    gives. power = 1/2 for Adam-like optimizers (their step scales like the square root of the batch), 1 for SGD
    (linear scaling); ρ_ref ∈ (0, 1] is the ESS ratio from which on no cut is made (1: any drop cuts).
    """
    import torch

    if not 0 < reference_ratio <= 1:
        raise ValueError(f"reference_ratio must be in (0, 1], got {reference_ratio}")
    if not power > 0:
        raise ValueError(f"power must be > 0, got {power}")
    if isinstance(ess_ratio, torch.Tensor):
        return (ess_ratio / reference_ratio).clamp(0.0, 1.0) ** power
    return min(1.0, max(0.0, ess_ratio / reference_ratio)) ** power


def vcpo_baseline(rewards: torch.Tensor, weights: torch.Tensor, score_sq_norms: torch.Tensor) -> torch.Tensor:
    """VCPO's off-policy baseline over the last dim (a group): b = Σ c_i R_i / Σ c_i, c_i = w_i² ‖∇_θ log π_θ(y_i)‖².

    It minimizes Σ_i ‖w_i (R_i − b) ∇_θ log π_θ(y_i)‖², the second moment of the importance-weighted
    score-function estimator, over one scalar b (set the derivative in b to 0). ``weights`` are the sequence-level
    w_i (``effective_sample_size``), ``score_sq_norms`` each sequence's squared gradient norm of log π_θ(y_i | x_i)
    (one backward per sequence). A group whose c_i are all 0 gets its plain mean reward.
    """
    import torch

    c = weights.detach() ** 2 * score_sq_norms.detach()
    total = c.sum(-1)
    weighted = (c * rewards).sum(-1) / total.where(total > 0, torch.ones_like(total))
    return torch.where(total > 0, weighted, rewards.mean(-1))


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
    import torch

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
    import torch

    m2 = log_ratio.detach().square()
    ordered, order = torch.sort(m2, dim=-1)
    counts = torch.arange(1, m2.shape[-1] + 1, dtype=m2.dtype, device=m2.device)
    prefix_mean = ordered.cumsum(-1) / counts
    tau = torch.as_tensor(m2_threshold, dtype=m2.dtype, device=m2.device).reshape(-1, 1)
    keep_count = (prefix_mean <= tau).sum(-1, keepdim=True)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(m2.shape[-1], device=m2.device).expand_as(order).contiguous())
    return rank < keep_count


# BAPO (Xi et al., arXiv:2510.18927). Clip bounds are importance-ratio bounds [c_low, c_high]: a token
# with A > 0 is clipped (no gradient) when r > c_high, one with A < 0 when r < c_low.

def bapo_unclipped(ratio: torch.Tensor, advantages: torch.Tensor, c_low, c_high) -> torch.Tensor:
    """Bool: the token's clipped surrogate min(r·A, clip(r, c_low, c_high)·A) still has a gradient."""
    return ((advantages > 0) & (ratio <= c_high)) | ((advantages < 0) & (ratio >= c_low)) | (advantages == 0)


def bapo_positive_share(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, c_low,
                        c_high) -> torch.Tensor:
    """ρ: the positive-advantage tokens' share of the loss, per batch (summed over the last dim).

    As the paper defines it, over the valid tokens that are not clipped (``bapo_unclipped``):
        ρ = Σ_{A>0, r ≤ c_high} r·A / (Σ_{A>0, r ≤ c_high} r·A + Σ_{A<0, r ≥ c_low} r·|A|),
    r = π_θ / π_behaviour. So raising c_low drops negative tokens from the denominator and raising
    c_high adds positive ones. ρ = 1 when nothing is left to weigh (no unclipped token with A ≠ 0).
    (The authors' verl loss sums the clipped surrogate's values instead, clipped tokens counted at
    the bound, and targets Σpos/Σneg = 1, i.e. ρ = 0.5; there raising c_low would grow Σneg.)
    """
    import torch

    contrib = ratio * advantages * mask
    keep = bapo_unclipped(ratio, advantages, c_low, c_high) & mask.bool()
    positive = torch.where(keep & (advantages > 0), contrib, 0.0).sum(-1)
    negative = torch.where(keep & (advantages < 0), -contrib, 0.0).sum(-1)
    total = positive + negative
    return torch.where(total > 0, positive / total.where(total > 0, torch.ones_like(total)), 1.0)


def _bapo_step_count(start: float, stop: float, step: float) -> int:
    """How many whole steps fit in [start, stop] (1e-9 slack so that float rounding keeps the last one)."""
    return math.floor((stop - start) / step + 1e-9)


def bapo_clip_bounds_rows(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                          configs: list[BAPOConfig]) -> tuple[torch.Tensor, torch.Tensor]:
    """BAPO's adaptive clip bounds (c_low, c_high), each of shape (R,), for R independent batches.

    ``ratio``, ``advantages``, ``mask`` are (R, N), one batch per row, with ``configs[i]`` row i's
    parameters. Per row, the paper's procedure (Algorithm 1): start at c_low = a⁻, c_high = a⁺;
    while ρ < ρ0 and c_low + δ2 <= b⁻: raise c_high by δ1 if c_high + δ1 <= b⁺, else raise c_low
    by δ2. So c_high is widened first, whole steps only, and the loop never starts when a⁻ + δ2 > b⁻.
    (The authors' verl loss raises c_low first and clamps the last step to the bound.) All candidate
    bounds are evaluated at once instead of in a loop; ρ is ``bapo_positive_share``.
    """
    import torch

    if not (ratio.shape == advantages.shape == mask.shape) or ratio.dim() != 2 or len(configs) != len(ratio):
        raise ValueError(f"need (R, N) ratio, advantages, mask and R configs, got {tuple(ratio.shape)}, "
                         f"{tuple(advantages.shape)}, {tuple(mask.shape)}, {len(configs)} configs")
    column = lambda values, dtype=ratio.dtype: torch.tensor(values, dtype=dtype, device=ratio.device)[:, None]
    steps_low = column([_bapo_step_count(c.a_minus, c.b_minus, c.delta_2) for c in configs], torch.int64)
    steps_high = column([_bapo_step_count(c.a_plus, c.b_plus, c.delta_1) for c in configs], torch.int64)
    steps_high = torch.where(steps_low > 0, steps_high, 0)  # the loop's guard: no c_low step left, no move
    k = torch.arange(int((steps_low + steps_high).max()) + 1, device=ratio.device)[None, :]  # candidates (1, K)
    k = k.minimum(steps_low + steps_high)  # a row with fewer candidates repeats its last one
    c_high = column([c.a_plus for c in configs]) + k.minimum(steps_high) * column([c.delta_1 for c in configs])
    c_low = column([c.a_minus for c in configs]) + (k - steps_high).clamp(min=0) * column([c.delta_2 for c in configs])
    share = bapo_positive_share(ratio.detach()[:, None, :], advantages[:, None, :], mask[:, None, :].to(ratio.dtype),
                                c_low[..., None], c_high[..., None])  # ρ of every candidate, (R, K)
    reached = share >= column([c.rho_0 for c in configs])
    first = torch.where(reached.any(-1), reached.to(torch.int64).argmax(-1), k.shape[1] - 1)[:, None]
    return c_low.gather(1, first)[:, 0], c_high.gather(1, first)[:, 0]


def bapo_clip_bounds(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     cfg: BAPOConfig) -> tuple[float, float]:
    """BAPO's (c_low, c_high) for one batch of any shape, e.g. the LLM's (B, T) tokens (``bapo_clip_bounds_rows``).

    ``advantages`` is broadcast to ``ratio``'s shape (e.g. (B, 1) per response); ``mask`` marks valid tokens.
    """
    advantages = advantages.expand_as(ratio)
    c_low, c_high = bapo_clip_bounds_rows(ratio.reshape(1, -1), advantages.reshape(1, -1),
                                          mask.reshape(1, -1), [cfg])
    return float(c_low[0]), float(c_high[0])


