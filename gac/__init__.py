"""gac: Gradient Alignment Control for asynchronous (stale) policy-gradient training.

Pure core: ``state = gac.init(g, cfg)``; ``g', state, report = gac.update(g, state, cfg)`` on tensors of shape
(..., P): measure the cosine between the current vector and a reference direction (the previous one, or an EMA);
above a threshold, remove ("project") or shrink ("cap") the parallel part, or skip the step. In a training loop,
``opt = gac.wrap(optimizer, GACConfig(space=...))`` places the control in gradient, update or momentum space
(``gac.optim``). Depends on torch only, and loads it on the first use of a name beyond the config: ``import gac`` and
``gac.GACConfig`` do not, so that a command line parses its config (and answers ``--help``) without torch.
"""

import importlib as _importlib
import sys as _sys
import types as _types

from gac.config import EMAThreshold, GACConfig, ThresholdRule

_HOME = {name: module for module, names in {
    "control": ("ACT", "KEEP", "SKIP", "AlignmentStats", "ControlResult", "Decision", "NonFiniteGradientError",
                "alignment", "alignment_stats", "apply_decision", "cap_scale", "control", "decide", "regime_name",
                "update_reference"),
    "optim": ("GACOptimizer", "strip_gac_state", "wrap"),
    "state": ("GACState", "UpdateReport", "init", "update"),
    "tracker": ("GACReport", "GradientAlignmentControl"),
}.items() for name in names}
"""The submodule of each name that needs torch."""
_SUBMODULES = ("compiled", "cosine64", "distributed", "fused", "optim", "state", "tracker")
"""The submodules ``import gac`` loaded when it imported the library whole, still attributes of the package."""

__all__ = ["EMAThreshold", "GACConfig", "ThresholdRule", *_HOME]
__version__ = "0.1.0"


def __getattr__(name: str):
    """A name that needs torch, imported on its first use (PEP 562)."""
    if name in _HOME:
        value = getattr(_importlib.import_module(f"gac.{_HOME[name]}"), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(f"gac.{name}")
        _importlib.import_module("gac.optim")  # the whole library, as the eager import loaded it
    else:
        raise AttributeError(f"module 'gac' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})


class _Package(_types.ModuleType):
    """``gac.control`` is the function ``control``, as when the package imported its library eagerly: loading the
    submodule of that name (``import gac.tracker`` does) would set the package's attribute to the submodule."""

    def __setattr__(self, name: str, value) -> None:
        if not (name == "control" and isinstance(value, _types.ModuleType)):
            super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
