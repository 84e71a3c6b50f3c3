"""GAC for Hugging Face trainers (TRL's GRPOTrainer, its async GRPO trainer, any transformers Trainer).

``add_gac(trainer, cfg)`` registers a ``TrainerCallback`` whose ``on_pre_optimizer_step`` applies GAC
to the accumulated gradients (after the trainer's gradient clipping, before ``optimizer.step()``),
and merges the ``METRICS`` — ``gac/cos_prev``, ``gac/regime``, ``gac/parallel_scale``, ``gac/grad_norm``,
``gac/grad_norm_after`` (means since the last log) — into the trainer's own logs, so every reporter
(TensorBoard, W&B, trackio, the console) gets them. The names are the package's record columns
(``sim/schema.py``) under a ``gac/`` prefix.

Clipping by global norm scales the whole gradient, so the cosine and the projection are the same
as on the raw gradient; only an EMA reference weighs past steps by their clipped norms. In the
"skip" regime the callback zeroes the gradient; a stateful optimizer (Adam) still applies its
momentum — for a true skip pass ``optimizers=(gac.wrap(optimizer, cfg), scheduler)`` instead.
Install with ``pip install 'gac-lab[trl]'``.
"""

from __future__ import annotations

from collections import defaultdict

try:
    from transformers import TrainerCallback
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("gac.integrations.trl needs transformers (and TRL for GRPO): "
                      "pip install 'gac-lab[trl]'") from error

from gac.config import GACConfig
from gac.tracker import GradientAlignmentControl

REGIME_CODES = {"keep": 0.0, "project": 1.0, "cap": 1.0, "skip": 2.0}
"""Numeric code logged as gac/regime (0 keep, 1 project/cap, 2 skip); its mean is the acting rate."""

PREFIX = "gac/"
METRICS: dict[str, str] = {
    "cos_prev": "cos(g_k, d_k): the raw gradient against GAC's reference (the previous raw gradient by "
                "default; its EMA with reference='ema')",
    "regime": "GAC's decision as REGIME_CODES (the record column holds the name; a mean of codes is loggable)",
    "parallel_scale": "γ, the factor GAC left on the gradient's part along the reference (1 = untouched)",
    "grad_norm": "‖g_k‖ before GAC (after the trainer's gradient clipping, which runs first)",
    "grad_norm_after": "‖g'_k‖ after GAC; not a record column (the records keep only the raw norm)",
}
"""Logged metric names (without PREFIX) and their meaning; all but ``grad_norm_after`` are record columns."""


def report_metrics(report) -> dict[str, float]:
    """The METRICS of one ``GACReport``, named with PREFIX."""
    values = {"cos_prev": report.cosine, "regime": REGIME_CODES[report.regime],
              "parallel_scale": report.parallel_scale, "grad_norm": report.grad_norm_before,
              "grad_norm_after": report.grad_norm_after}
    return {PREFIX + name: float(values[name]) for name in METRICS}


class GACCallback(TrainerCallback):
    """Applies GAC at every optimizer step of a transformers ``Trainer`` and collects its reports."""

    def __init__(self, cfg: GACConfig | None = None, process_group=None):
        self.cfg = cfg if cfg is not None else GACConfig()
        self.process_group = process_group
        self.tracker: GradientAlignmentControl | None = None
        self._pending: dict[str, list[float]] = defaultdict(list)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.tracker is None:
            self.tracker = GradientAlignmentControl(model.parameters(), self.cfg, self.process_group)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        for name, value in report_metrics(self.tracker.apply()).items():
            self._pending[name].append(value)

    def pop_metrics(self) -> dict[str, float]:
        """Means of the reports since the last call (empty when no optimizer step happened)."""
        metrics = {key: sum(values) / len(values) for key, values in self._pending.items() if values}
        self._pending.clear()
        return metrics


def add_gac(trainer, cfg: GACConfig | None = None, process_group=None) -> GACCallback:
    """Enable GAC on ``trainer`` (a transformers/TRL trainer) and log its metrics through ``trainer.log``."""
    callback = GACCallback(cfg, process_group)
    trainer.add_callback(callback)
    original_log = trainer.log

    def log_with_gac(logs, *args, **kwargs):
        return original_log({**logs, **callback.pop_metrics()}, *args, **kwargs)

    trainer.log = log_with_gac
    return callback
