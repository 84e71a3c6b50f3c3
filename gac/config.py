"""GAC configuration: one validated dataclass, and the interface of adaptive threshold rules.

Every field is checked when the config is built, so a bad setting fails with one line before any
training work starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

MODES = ("project", "cap")
REFERENCES = ("prev", "ema")
NONFINITE_POLICIES = ("raise", "skip")


@runtime_checkable
class ThresholdRule(Protocol):
    """An adaptive threshold ("dynamic threshold"): τ_t chosen from the cosines seen so far.

    ``current()`` gives τ for the coming step (a float in [0, 1)); ``observe(cosine)`` is called once
    per step with the measured cosine after the decision. ``state_dict`` / ``load_state_dict`` make a
    resumed run continue with the same τ sequence.
    """

    def current(self) -> float: ...

    def observe(self, cosine: float) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class EMAThreshold:
    """τ_t = clip(m_t + margin, floor, ceiling), m_t an exponential moving average of past cosines.

    Acts when a gradient is more aligned than the recent typical alignment by more than ``margin``;
    until ``warmup`` cosines have been seen it returns ``ceiling`` (acts only on extreme alignment).
    """

    margin: float = 0.2
    decay: float = 0.9
    floor: float = 0.1
    ceiling: float = 0.9
    warmup: int = 5
    mean: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.floor <= self.ceiling < 1.0:
            raise ValueError(f"EMAThreshold needs 0 <= floor <= ceiling < 1, got {self.floor}, {self.ceiling}")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"EMAThreshold decay must be in [0, 1), got {self.decay}")

    def current(self) -> float:
        if self.count < self.warmup:
            return self.ceiling
        return min(max(self.mean + self.margin, self.floor), self.ceiling)

    def observe(self, cosine: float) -> None:
        self.mean = cosine if self.count == 0 else self.decay * self.mean + (1.0 - self.decay) * cosine
        self.count += 1

    def state_dict(self) -> dict:
        return {"mean": self.mean, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.count = float(state["mean"]), int(state["count"])


@dataclass
class GACConfig:
    """Settings of Gradient Alignment Control (see DESIGN.md, "GAC specification")."""

    threshold: float | ThresholdRule = 0.0
    """τ: act only when cos(g, d) > τ; a float in [0, 1) or an adaptive ``ThresholdRule``."""
    mode: str = "project"
    """"project" removes the whole parallel part; "cap" shrinks it so that cos(g', d) = τ exactly."""
    skip_threshold: float | None = None
    """τ_skip: when cos(g, d) > τ_skip the step makes no update at all (regime "skip")."""
    reference: str = "prev"
    """Reference direction d: "prev" = previous raw gradient, "ema" = EMA of past raw gradients."""
    ema_decay: float = 0.9
    """β of the EMA reference (used when reference="ema")."""
    eps: float = 0.0
    """Norms at or below eps count as zero (cosine 0, no action)."""
    nonfinite: str = "raise"
    """What a non-finite gradient does: "raise" an error naming the step, or "skip" the step and count it."""
    reference_dtype: torch.dtype | None = None
    """Storage dtype of the reference (None: the gradient's dtype; torch.bfloat16 halves its memory)."""

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float, ThresholdRule)):
            raise ValueError(f"GACConfig.threshold must be a float in [0, 1) or a ThresholdRule, "
                             f"got {self.threshold!r}")
        if isinstance(self.threshold, (int, float)):
            if not 0.0 <= float(self.threshold) < 1.0:
                raise ValueError(f"GACConfig.threshold must be in [0, 1), got {self.threshold}")
            self.threshold = float(self.threshold)
        if self.mode not in MODES:
            raise ValueError(f"GACConfig.mode must be one of {MODES}, got {self.mode!r}")
        if self.reference not in REFERENCES:
            raise ValueError(f"GACConfig.reference must be one of {REFERENCES}, got {self.reference!r}")
        if self.skip_threshold is not None:
            if not -1.0 <= self.skip_threshold < 1.0:
                raise ValueError(f"GACConfig.skip_threshold must be in [-1, 1), got {self.skip_threshold}")
            if isinstance(self.threshold, float) and self.skip_threshold <= self.threshold:
                raise ValueError(f"GACConfig.skip_threshold ({self.skip_threshold}) must be greater than "
                                 f"threshold ({self.threshold})")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"GACConfig.ema_decay must be in [0, 1), got {self.ema_decay}")
        if self.eps < 0.0:
            raise ValueError(f"GACConfig.eps must be >= 0, got {self.eps}")
        if self.nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"GACConfig.nonfinite must be one of {NONFINITE_POLICIES}, got {self.nonfinite!r}")
        if self.reference_dtype is not None and not (isinstance(self.reference_dtype, torch.dtype)
                                                     and self.reference_dtype.is_floating_point):
            raise ValueError(f"GACConfig.reference_dtype must be a floating torch.dtype or None, "
                             f"got {self.reference_dtype!r}")
