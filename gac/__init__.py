"""gac: Gradient Alignment Control for asynchronous (stale) policy-gradient training.

Pure core: ``state = gac.init(g, cfg)``; ``g', state, report = gac.update(g, state, cfg)`` on tensors of shape
(..., P): measure the cosine between the current vector and a reference direction (the previous one, or an EMA);
above a threshold, remove ("project") or shrink ("cap") the parallel part, or skip the step. In a training loop,
``opt = gac.wrap(optimizer, GACConfig(space=...))`` places the control in gradient, update or momentum space
(``gac.optim``). Depends on torch only.
"""

from gac.config import EMAThreshold, GACConfig, ThresholdRule
from gac.control import (
    ACT,
    KEEP,
    SKIP,
    AlignmentStats,
    ControlResult,
    Decision,
    NonFiniteGradientError,
    alignment,
    alignment_stats,
    apply_decision,
    cap_scale,
    control,
    decide,
    regime_name,
    update_reference,
)
from gac.optim import GACOptimizer, strip_gac_state, wrap
from gac.state import GACState, UpdateReport, init, update
from gac.tracker import GACReport, GradientAlignmentControl

__all__ = [
    "ACT", "KEEP", "SKIP", "AlignmentStats", "ControlResult", "Decision", "EMAThreshold", "GACConfig",
    "GACOptimizer", "GACReport", "GACState", "GradientAlignmentControl", "NonFiniteGradientError", "ThresholdRule",
    "UpdateReport", "init", "update",
    "alignment", "alignment_stats", "apply_decision", "cap_scale", "control", "decide", "regime_name",
    "update_reference", "strip_gac_state", "wrap",
]
__version__ = "0.1.0"
