"""The pure core of GAC: cosine, regime decision and projection on (batched) tensors.

Everything here is a function of explicit inputs. A gradient is a tensor of shape (..., P); the
leading dims index independent controls (seeds, settings). The decision depends on the gradient
and reference only through three sums — ⟨g, d⟩, ‖g‖², ‖d‖² — so it can be computed from sums
over shards (see ``gac.distributed``), and the new gradient is g' = s·g − α·d, linear per shard.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from gac.config import GACConfig, check_config, check_threshold

KEEP, ACT, SKIP = 0, 1, 2
"""Regime codes in batched results; ``regime_name`` turns them into "keep" / mode / "skip"."""


def regime_name(code: int, mode: str) -> str:
    """The report name of a regime code: "keep", the mode ("project" or "cap"), or "skip"."""
    return ("keep", mode, "skip")[int(code)]


class AlignmentStats(NamedTuple):
    """The three sums the GAC decision needs, in float64: ⟨g, d⟩, ‖g‖², ‖d‖²."""

    dot: torch.Tensor
    g_sq: torch.Tensor
    d_sq: torch.Tensor


class Decision(NamedTuple):
    """What GAC does to one gradient: g' = grad_scale·g − ref_coef·d (identity where regime is KEEP).

    parallel_scale γ is the factor on the parallel part (1 keep, 0 project, in (0, 1) cap, 0 skip);
    norm_before / norm_after are ‖g‖ and ‖g'‖, computed from the sums without another pass.
    """

    cosine: torch.Tensor
    regime: torch.Tensor
    parallel_scale: torch.Tensor
    grad_scale: torch.Tensor
    ref_coef: torch.Tensor
    norm_before: torch.Tensor
    norm_after: torch.Tensor


class ControlResult(NamedTuple):
    """Result of ``control``: the new gradient and, per leading index, cosine, regime and γ."""

    grad: torch.Tensor
    cosine: torch.Tensor
    regime: torch.Tensor
    parallel_scale: torch.Tensor


def real_view(x: torch.Tensor) -> torch.Tensor:
    """A complex x of shape (..., P) as the real vector (..., 2P) of its real and imaginary parts (a view, no copy);
    a real x as itself. GAC measures and projects complex vectors in this view: ⟨g, d⟩ = Re Σ g·conj(d), the norms
    are the complex norms, and g − α·d is the same vector whichever view it is formed in."""
    if not x.is_complex():
        return x
    real = torch.view_as_real(x.resolve_conj())
    return real if x.dim() == 0 else real.flatten(-2)


def complex_view(real: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The inverse of ``real_view``: ``real`` of shape (..., 2P) back as a complex tensor of ``like``'s shape."""
    if not like.is_complex():
        return real
    return torch.view_as_complex(real.reshape(*like.shape, 2).contiguous())


def pow2_scale(x: torch.Tensor) -> torch.Tensor:
    """A power of two at most max|x| over the last dim (1 where x is 0), shape (..., 1), float64.

    Dividing by a power of two is exact and leaves |x / scale| < 2, so scaled sums neither overflow
    nor underflow and the cosine of any finite input (float64 up to its largest value) is correct.
    """
    peak = x.detach().abs().amax(-1, keepdim=True).to(torch.float64)
    _, exponent = torch.frexp(peak)  # peak = m·2^e with m in [0.5, 1): 2^(e−1) ≤ peak, never inf
    return torch.where(peak > 0, torch.ldexp(torch.ones_like(peak), exponent - 1), torch.ones_like(peak))


def _rescaled(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / scale in float64, scale): scale = ``pow2_scale(x)``, or 1 when eps > 0 (eps is an
    absolute norm level, so the sums must then stay in the input's units)."""
    scale = pow2_scale(x) if eps == 0 else torch.ones((*x.shape[:-1], 1), dtype=torch.float64, device=x.device)
    return x.to(torch.float64) / scale, scale


def alignment_stats(g: torch.Tensor, d: torch.Tensor) -> AlignmentStats:
    """⟨g, d⟩, ‖g‖², ‖d‖² over the last dim, accumulated in float64 (no overflow for finite input); complex vectors
    in their real view (``real_view``)."""
    g, d = real_view(g), real_view(d)
    g64, d64 = g.to(torch.float64), d.to(torch.float64)
    return AlignmentStats((g64 * d64).sum(-1), (g64 * g64).sum(-1), (d64 * d64).sum(-1))


def cosine_from_stats(stats: AlignmentStats, eps: float = 0.0) -> torch.Tensor:
    """cos = ⟨g, d⟩ / (‖g‖‖d‖), clamped to [-1, 1]; NaN where either norm is ≤ eps (no direction: "no gradient"
    is not "orthogonal")."""
    g_norm, d_norm = stats.g_sq.clamp_min(0).sqrt(), stats.d_sq.clamp_min(0).sqrt()
    valid = (g_norm > eps) & (d_norm > eps)
    # Dividing by each norm separately keeps the denominator away from under/overflow.
    safe_g = torch.where(valid, g_norm, torch.ones_like(g_norm))
    safe_d = torch.where(valid, d_norm, torch.ones_like(d_norm))
    cosine = (stats.dot / safe_g) / safe_d
    return torch.where(valid, cosine.clamp(-1.0, 1.0), torch.full_like(cosine, float("nan")))


def alignment(g: torch.Tensor, d: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Cosine between g and d over the last dim, batched over leading dims.

    cos(g, d) = ⟨g, d⟩ / (‖g‖ ‖d‖), and NaN where either norm is 0 (or ≤ eps): a zero vector has no
    direction, so it is neither aligned nor orthogonal. Sums are taken in float64, so float32 / bfloat16 /
    float64 inputs give a number for any finite nonzero values. The result has g's dtype promoted to at
    least float32.
    """
    if g.shape != d.shape:
        raise ValueError(f"alignment needs g and d of the same shape, got {tuple(g.shape)} and {tuple(d.shape)}")
    if g.is_complex() != d.is_complex():
        raise ValueError(f"alignment needs g and d both real or both complex, got {g.dtype} and {d.dtype}")
    g, d = real_view(g), real_view(d)  # complex: the cosine of the real views (module ``real_view``)
    out_dtype = torch.promote_types(g.dtype, torch.float32)
    g_scaled, d_scaled = _rescaled(g, eps)[0], _rescaled(d, eps)[0]
    return cosine_from_stats(alignment_stats(g_scaled, d_scaled), eps).to(out_dtype)


def cap_scale(cosine: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """γ such that cos(g⊥ + γ g∥, d) = τ, for cos(g, d) = c > τ ≥ 0.

    With ‖g∥‖ = c‖g‖ and ‖g⊥‖ = √(1−c²)‖g‖: γc / √(1 − c² + γ²c²) = τ  ⇒  γ = τ√(1−c²) / (c√(1−τ²)).
    """
    tau = torch.as_tensor(threshold, dtype=cosine.dtype, device=cosine.device)
    c = cosine.clamp_min(1e-300)
    return tau * (1.0 - c * c).clamp_min(0).sqrt() / (c * (1.0 - tau * tau).sqrt())


def decide(stats: AlignmentStats, cfg: GACConfig, threshold: torch.Tensor | float | None = None) -> Decision:
    """The GAC decision from the three sums (batched over their shape).

    One-directional: only c > τ acts. c > τ_skip → "skip" (zero update); else c > τ → "project"
    (γ = 0) or "cap" (γ from ``cap_scale``); else "keep" (g unchanged). A NaN cosine (‖g‖ or ‖d‖ zero)
    is "keep". ``threshold`` overrides
    cfg.threshold (needed when cfg.threshold is an adaptive rule).
    """
    if threshold is None:
        if not isinstance(cfg.threshold, float):
            raise ValueError("decide with an adaptive threshold rule needs threshold=τ (from the rule's statistics)")
        threshold = cfg.threshold
    cosine = cosine_from_stats(stats, cfg.eps)
    tau = torch.as_tensor(threshold, dtype=cosine.dtype, device=cosine.device)
    acting = cosine > tau
    skipping = cosine > cfg.skip_threshold if cfg.skip_threshold is not None else torch.zeros_like(acting)
    regime = torch.where(skipping, SKIP, torch.where(acting, ACT, KEEP))

    ones, zeros = torch.ones_like(cosine), torch.zeros_like(cosine)
    if cfg.mode == "cap":
        gamma_act = cap_scale(cosine, tau)
    else:
        gamma_act = zeros
    parallel_scale = torch.where(acting & ~skipping, gamma_act, torch.where(skipping, zeros, ones))
    grad_scale = torch.where(skipping, zeros, ones)
    safe_d_sq = torch.where(stats.d_sq > 0, stats.d_sq, ones)
    ref_coef = torch.where(acting & ~skipping, (1.0 - parallel_scale) * stats.dot / safe_d_sq, zeros)
    after_sq = grad_scale**2 * stats.g_sq - 2 * grad_scale * ref_coef * stats.dot + ref_coef**2 * stats.d_sq
    return Decision(cosine, regime, parallel_scale, grad_scale, ref_coef,
                    stats.g_sq.clamp_min(0).sqrt(), after_sq.clamp_min(0).sqrt())


def decide_scalar(dot: float, g_sq: float, d_sq: float, cfg: GACConfig, threshold: float,
                  skip_threshold: float | None = None) -> Decision:
    """``decide`` for one set of finite sums given as Python floats, with the fields Python numbers (regime an int).

    The same float64 operations in the same order as ``decide`` on 0-dim float64 tensors, so the same bits; the
    tracker takes one decision per step, where a dozen tiny tensor ops would cost more than the arithmetic. Square
    roots are torch's (``_sqrt``). ``skip_threshold`` is cfg.skip_threshold's role (passed explicitly so that a
    caller can switch skipping off).
    """
    g_norm, d_norm = _sqrt(_clamp_min0(g_sq), _clamp_min0(d_sq))
    if g_norm > cfg.eps and d_norm > cfg.eps:
        cosine = min(max((dot / g_norm) / d_norm, -1.0), 1.0)
    else:
        cosine = math.nan
    skipping = skip_threshold is not None and cosine > skip_threshold
    acting = cosine > threshold
    if skipping:
        regime, parallel_scale, grad_scale = SKIP, 0.0, 0.0
    elif acting:
        regime, grad_scale = ACT, 1.0
        if cfg.mode == "cap":  # cap_scale, in its order of operations
            c = max(cosine, 1e-300)
            root_c, root_tau = _sqrt(_clamp_min0(1.0 - c * c), 1.0 - threshold * threshold)
            parallel_scale = threshold * root_c / (c * root_tau)
        else:
            parallel_scale = 0.0
    else:
        regime, parallel_scale, grad_scale = KEEP, 1.0, 1.0
    ref_coef = (1.0 - parallel_scale) * dot / (d_sq if d_sq > 0 else 1.0) if acting and not skipping else 0.0
    after_sq = _clamp_min0((grad_scale * grad_scale * g_sq - 2 * grad_scale * ref_coef * dot)
                           + ref_coef * ref_coef * d_sq)
    norm_after = g_norm if after_sq == _clamp_min0(g_sq) else _sqrt(after_sq)[0]
    return Decision(cosine, regime, parallel_scale, grad_scale, ref_coef, g_norm, norm_after)


def _clamp_min0(x: float) -> float:
    """``torch.clamp_min(x, 0)`` on a float: NaN stays NaN."""
    return x if not x < 0.0 else 0.0


def _sqrt(*values: float) -> list[float]:
    """torch's float64 square roots of ``values`` (one op): torch's CPU sqrt is not always correctly rounded, so
    ``math.sqrt`` would differ from ``decide``'s in the last bit now and then."""
    return torch.tensor(values, dtype=torch.float64).sqrt().tolist()


def apply_decision(g: torch.Tensor, d: torch.Tensor, decision: Decision) -> torch.Tensor:
    """g' = s·g − α·d per leading index, computed in float64; rows in the keep regime are returned as is."""
    if g.is_complex():
        return complex_view(apply_decision(real_view(g), real_view(d), decision), g)
    scale = decision.grad_scale.unsqueeze(-1)
    coef = decision.ref_coef.unsqueeze(-1)
    new = (scale * g.to(torch.float64) - coef * d.to(torch.float64)).to(g.dtype)
    return torch.where((decision.regime == KEEP).unsqueeze(-1), g, new)


class NonFiniteGradientError(FloatingPointError):
    """Raised (by default, ``nonfinite="raise"``) when a gradient has a NaN or infinite entry."""


def check_gradient(g: torch.Tensor, d: torch.Tensor, cfg: GACConfig, where: str) -> None:
    """One-line errors before any work: matching shapes, a non-empty last dim, finite g under "raise"."""
    if g.shape != d.shape:
        raise ValueError(f"{where} needs g and d of the same shape, got {tuple(g.shape)} and {tuple(d.shape)}")
    if g.dim() > 0 and g.shape[-1] == 0:
        raise ValueError(f"{where} needs a non-empty last dimension (P >= 1), got shape {tuple(g.shape)}")
    if g.is_complex() != d.is_complex():
        raise ValueError(f"{where} needs g and its reference both real or both complex, got {g.dtype} and {d.dtype}")
    if cfg.nonfinite == "raise" and not bool(torch.isfinite(g).all()):
        raise NonFiniteGradientError(f"{where}: non-finite gradient (NaN or inf); nothing was changed "
                                     f"(GACConfig(nonfinite='skip') skips such steps instead)")
    if cfg.nonfinite == "raise" and not bool(torch.isfinite(d).all()):
        raise NonFiniteGradientError(f"{where}: non-finite GAC reference (NaN or inf); nothing was changed "
                                     f"(GACConfig(nonfinite='skip') skips such steps and restarts the reference)")


def decide_and_apply(g: torch.Tensor, d: torch.Tensor, cfg: GACConfig,
                     threshold: torch.Tensor | float) -> tuple[torch.Tensor, Decision]:
    """(g', decision) for checked g, d of shape (..., P), P ≥ 1; the one implementation of the step.

    Norms in the decision are in the input's units. Rows whose g or d is not finite are skipped (g' = 0, cosine
    NaN: not measured) — callers reach this only under ``nonfinite="skip"``, as ``check_gradient`` raises otherwise.
    """
    if g.is_complex():  # measured and projected in the real view (``real_view``)
        new, decision = decide_and_apply(real_view(g), real_view(d), cfg, threshold)
        return complex_view(new, g), decision
    # Work on exactly rescaled copies (powers of two) so extreme finite inputs cannot overflow.
    (g_scaled, g_scale), (d_scaled, _) = _rescaled(g, cfg.eps), _rescaled(d, cfg.eps)
    decision = decide(alignment_stats(g_scaled, d_scaled), cfg, threshold)
    new = (g_scale * apply_decision(g_scaled, d_scaled, decision)).to(g.dtype)
    new = torch.where((decision.regime == KEEP).unsqueeze(-1), g, new)
    scale = g_scale.squeeze(-1)
    decision = decision._replace(norm_before=decision.norm_before * scale, norm_after=decision.norm_after * scale)
    finite = torch.isfinite(g).all(-1) & torch.isfinite(d).all(-1)
    if not bool(finite.all()):
        zeros, nan = torch.zeros_like(decision.cosine), torch.full_like(decision.cosine, float("nan"))
        skipped = Decision(nan, torch.full_like(decision.regime, SKIP), zeros, zeros, zeros, nan, zeros)
        decision = Decision(*(torch.where(finite, kept, lost) for kept, lost in zip(decision, skipped, strict=True)))
        new = torch.where(finite.unsqueeze(-1), new, torch.zeros_like(new))
    return new, decision


def control(g: torch.Tensor, d: torch.Tensor, cfg: GACConfig,
            threshold: torch.Tensor | float | None = None) -> ControlResult:
    """Apply GAC to gradient(s) g against reference direction(s) d, both of shape (..., P). Pure.

    Returns the new gradient g' (same shape as g, a 0-dim g counts as P = 1) and, per leading index,
    the cosine, the regime code (KEEP / ACT / SKIP) and the parallel scale γ. ``threshold`` may be a
    tensor broadcastable to the batch shape; by default it is cfg.threshold (which must be a float:
    an adaptive rule's τ comes from its statistics, see ``gac.update``). A non-finite g raises
    ``NonFiniteGradientError`` under ``nonfinite="raise"`` and is skipped (g' = 0) under "skip".
    """
    cfg = check_config(cfg, "gac.control")
    check_gradient(g, d, cfg, "control")
    if threshold is not None:
        threshold = check_threshold(threshold, "control: threshold")
    if threshold is None:
        if not isinstance(cfg.threshold, float):
            raise ValueError("control with an adaptive threshold rule needs threshold=τ; use gac.update, "
                             "which keeps the rule's statistics in GACState")
        threshold = cfg.threshold
    new, decision = decide_and_apply(g.reshape(1) if g.dim() == 0 else g, d.reshape(1) if d.dim() == 0 else d,
                                     cfg, threshold)
    return ControlResult(new.reshape(g.shape), decision.cosine, decision.regime, decision.parallel_scale)


def update_reference(d: torch.Tensor, g: torch.Tensor, cfg: GACConfig) -> torch.Tensor:
    """The next reference from the raw gradient g: g itself ("prev") or β·d + (1−β)·g ("ema")."""
    if cfg.reference == "prev":
        return g.clone()
    return torch.lerp(d, g.to(d.dtype), 1.0 - cfg.ema_decay)


__all__ = [
    "KEEP", "ACT", "SKIP", "AlignmentStats", "Decision", "ControlResult", "alignment", "alignment_stats",
    "cosine_from_stats", "cap_scale", "pow2_scale", "decide", "apply_decision", "control", "update_reference",
    "regime_name", "NonFiniteGradientError", "check_gradient", "decide_and_apply", "decide_scalar", "real_view",
    "complex_view",
]
