"""GAC configuration: one validated dataclass, and the interface of adaptive threshold rules.

Every field is checked when the config is built, so a bad setting fails with one line before any
training work starts. torch is imported where a tensor or a dtype is met, so a command line builds (and tyro reads)
a GACConfig without it.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import dtype as Dtype
else:
    Dtype = object  # the annotation tyro resolves without torch: reference_dtype stays fixed on a command line

MODES = ("project", "cap")
REFERENCES = ("prev", "ema")
NONFINITE_POLICIES = ("raise", "skip")
SPACES = ("gradient", "update", "momentum")


def _check_real(owner: str, name: str, value, finite: bool = True) -> float:
    """``value`` as a float, or a one-line ValueError if it is not a real number (or not finite)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars are Real too
        raise ValueError(f"{owner}.{name} must be a number, got {value!r}")
    if finite and not math.isfinite(value):
        raise ValueError(f"{owner}.{name} must be finite, got {value!r}")
    return float(value)


def check_threshold(value, where: str = "threshold"):
    """τ as a float (or a tensor of them) in [0, 1); else a one-line ValueError naming ``where``.

    The same rule for ``GACConfig.threshold`` and for a ``threshold=`` override of ``gac.control`` /
    ``gac.update`` (a τ outside it makes cap's γ meaningless: τ < 0 gives γ < 0, τ ≥ 1 divides by zero).
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):  # a config's float: no torch needed
        if not 0.0 <= float(value) < 1.0:  # NaN fails this too
            raise ValueError(f"{where} must be in [0, 1), got {value}")
        return float(value)
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_complex() or not bool(((value >= 0) & (value < 1)).all()):  # NaN fails the comparison too
            raise ValueError(f"{where} must be in [0, 1) everywhere, got values in "
                             f"[{value.min().item()}, {value.max().item()}] (or NaN)")
        return value
    raise ValueError(f"{where} must be a float in [0, 1) or a ThresholdRule, got {value!r}")


@runtime_checkable
class ThresholdRule(Protocol):
    """An adaptive threshold ("dynamic threshold"): τ_t chosen from the cosines seen so far.

    A rule holds only its parameters; its running statistics are a tuple of tensors kept in
    ``gac.GACState`` (one entry per control, so one rule serves a whole batch of runs). ``init``
    gives the statistics before any step, ``current`` τ for the coming step (in [0, 1)), and
    ``observe`` the statistics after a step whose measured cosine was ``cosine``. ``lowest`` is the
    smallest τ the rule can give (``skip_threshold`` must lie above it).
    """

    lowest: float

    def init(self, batch_shape: tuple[int, ...], device=None) -> tuple[torch.Tensor, ...]: ...

    def current(self, stats: tuple[torch.Tensor, ...]) -> torch.Tensor: ...

    def observe(self, stats: tuple[torch.Tensor, ...], cosine: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


@dataclass(frozen=True)
class EMAThreshold:
    """τ_t = clip(m_t + margin, floor, ceiling), m_t an exponential moving average of past cosines.

    Acts when a gradient is more aligned than the recent typical alignment by more than ``margin``;
    until ``warmup`` cosines have been seen it returns ``ceiling`` (acts only on extreme alignment).
    Its statistics are (m, count): float64 and int64 tensors of the batch shape.
    """

    margin: float = 0.2
    decay: float = 0.9
    floor: float = 0.1
    ceiling: float = 0.9
    warmup: int = 5

    def __post_init__(self) -> None:
        for name in ("margin", "decay", "floor", "ceiling"):
            _check_real("EMAThreshold", name, getattr(self, name))
        if not 0.0 <= self.floor <= self.ceiling < 1.0:
            raise ValueError(f"EMAThreshold needs 0 <= floor <= ceiling < 1, got {self.floor}, {self.ceiling}")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"EMAThreshold decay must be in [0, 1), got {self.decay}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"EMAThreshold warmup must be an integer >= 0, got {self.warmup!r}")

    @property
    def lowest(self) -> float:
        return float(self.floor)

    def init(self, batch_shape: tuple[int, ...] = (), device=None) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        return (torch.zeros(batch_shape, dtype=torch.float64, device=device),
                torch.zeros(batch_shape, dtype=torch.int64, device=device))

    def current(self, stats: tuple[torch.Tensor, ...]) -> torch.Tensor:
        import torch

        mean, count = stats
        adaptive = (mean + self.margin).clamp(self.floor, self.ceiling)
        return torch.where(count < self.warmup, torch.full_like(mean, self.ceiling), adaptive)

    def observe(self, stats: tuple[torch.Tensor, ...], cosine: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        mean, count = stats
        cosine = torch.as_tensor(cosine).to(mean.dtype)
        decayed = self.decay * mean + (1.0 - self.decay) * cosine
        return torch.where(count == 0, cosine, decayed), count + 1


@dataclass(frozen=True)
class GACConfig:
    """Settings of Gradient Alignment Control (immutable; usage: the README, "Use GAC in your own trainer").

    Running state (reference direction, adaptive-threshold statistics, step) lives in ``gac.GACState``.
    """

    threshold: float | ThresholdRule = 0.0
    """τ: act only when cos(g, d) > τ; a float in [0, 1) or an adaptive ``ThresholdRule``."""
    mode: str = "project"
    """"project" removes the whole parallel part; "cap" shrinks it so that cos(g', d) = τ exactly."""
    skip_threshold: float | None = None
    """τ_skip: when cos(g, d) > τ_skip the step makes no update at all (regime "skip"). A skip also restarts the
    reference (as at init), so the step after it is kept and applied: a skip cannot lock training in (``gac.optim``)."""
    reference: str = "prev"
    """Reference direction d: "prev" = previous raw gradient, "ema" = EMA of past raw gradients."""
    ema_decay: float = 0.9
    """β of the EMA reference (used when reference="ema")."""
    eps: float = 0.0
    """Norms at or below eps count as zero (cosine NaN, regime "keep", the reference keeps its last direction)."""
    nonfinite: str = "raise"
    """What a non-finite gradient does: "raise" an error naming the step, or "skip" the step and count it."""
    reference_dtype: Dtype | None = None
    """Storage dtype of the reference (None: the gradient's dtype; torch.bfloat16 halves its memory)."""
    space: str = "gradient"
    """Where ``gac.wrap`` acts: "gradient" (raw g before the step), "update" (the proposed step Δθ after it),
    "momentum" (the optimizer's first moment before it); see ``gac.optim``. Pure ``gac.update`` and the
    tracker control whatever vector they are given."""

    def __post_init__(self) -> None:
        if isinstance(self.threshold, numbers.Real) and not isinstance(self.threshold, bool):
            # frozen: normalise int / numpy scalars to float once
            object.__setattr__(self, "threshold", check_threshold(self.threshold, "GACConfig.threshold"))
        elif not isinstance(self.threshold, ThresholdRule):
            raise ValueError(f"GACConfig.threshold must be a float in [0, 1) or a ThresholdRule, "
                             f"got {self.threshold!r}")
        if self.mode not in MODES:
            raise ValueError(f"GACConfig.mode must be one of {MODES}, got {self.mode!r}")
        if self.reference not in REFERENCES:
            raise ValueError(f"GACConfig.reference must be one of {REFERENCES}, got {self.reference!r}")
        if self.skip_threshold is not None:
            self._check_skip_threshold()
        if not 0.0 <= _check_real("GACConfig", "ema_decay", self.ema_decay) < 1.0:
            raise ValueError(f"GACConfig.ema_decay must be in [0, 1), got {self.ema_decay}")
        if _check_real("GACConfig", "eps", self.eps) < 0.0:
            raise ValueError(f"GACConfig.eps must be >= 0, got {self.eps}")
        if self.nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"GACConfig.nonfinite must be one of {NONFINITE_POLICIES}, got {self.nonfinite!r}")
        if self.space not in SPACES:
            raise ValueError(f"GACConfig.space must be one of {SPACES}, got {self.space!r}")
        if self.reference_dtype is not None and self.reference_dtype not in reference_dtypes():
            raise ValueError(f"GACConfig.reference_dtype must be None or one of torch.float16, bfloat16, float32, "
                             f"float64 (a dtype that holds the reference and its updates), "
                             f"got {self.reference_dtype!r}")

    def _check_skip_threshold(self) -> None:
        skip = _check_real("GACConfig", "skip_threshold", self.skip_threshold)
        if not -1.0 <= skip < 1.0:
            raise ValueError(f"GACConfig.skip_threshold must be in [-1, 1), got {self.skip_threshold}")
        if isinstance(self.threshold, float) and skip <= self.threshold:
            raise ValueError(f"GACConfig.skip_threshold ({self.skip_threshold}) must be greater than "
                             f"threshold ({self.threshold})")
        if isinstance(self.threshold, ThresholdRule) and skip <= self.threshold.lowest:
            raise ValueError(f"GACConfig.skip_threshold ({self.skip_threshold}) must be greater than the "
                             f"adaptive threshold's lowest value ({self.threshold.lowest})")


def reference_dtypes() -> tuple[torch.dtype, ...]:
    """Storage dtypes a reference may have: real floating dtypes with arithmetic (not integer, bool or complex, whose
    values cannot hold a gradient's direction, nor float8, which has no lerp or multiply kernels)."""
    import torch

    return torch.float16, torch.bfloat16, torch.float32, torch.float64


def reference_dtype_for(grad_dtype: torch.dtype, reference_dtype: torch.dtype | None) -> torch.dtype:
    """The reference's storage dtype for a gradient of ``grad_dtype``: ``reference_dtype`` (None: the gradient's),
    as the matching complex dtype for a complex gradient (its real and imaginary parts in that precision)."""
    if reference_dtype is None or not grad_dtype.is_complex:
        return reference_dtype or grad_dtype
    import torch

    # the complex dtype whose real and imaginary parts are stored in a given floating dtype
    complex_of = {torch.float16: torch.complex32, torch.float32: torch.complex64, torch.float64: torch.complex128}
    if reference_dtype not in complex_of:
        raise ValueError(f"GACConfig.reference_dtype={reference_dtype} has no complex counterpart for a {grad_dtype} "
                         f"gradient; use reference_dtype=None, torch.float16, float32 or float64")
    return complex_of[reference_dtype]


def check_config(cfg, where: str) -> GACConfig:
    """``cfg`` itself, a fresh ``GACConfig()`` for None, or a one-line TypeError naming ``where`` and what it got
    (``gac.wrap(opt, 0.3)`` used to end in an AttributeError deep inside the first step)."""
    if cfg is None:
        return GACConfig()
    if not isinstance(cfg, GACConfig):
        raise TypeError(f"{where} needs a gac.GACConfig (e.g. gac.GACConfig(threshold=0.3)) or None, "
                        f"got {type(cfg).__name__} {reprlib.repr(cfg)}")
    return cfg
