"""GAC for Hugging Face trainers (TRL's GRPOTrainer, its async GRPO trainer, any transformers Trainer).

``add_gac(trainer, cfg)`` registers a ``TrainerCallback`` that, when training begins, wraps the trainer's
optimizer with ``gac.wrap(optimizer, cfg)``: GAC then runs inside ``optimizer.step()`` (after the trainer's
gradient clipping) in any ``cfg.space`` — a callback alone cannot act between the optimizer's step and
its state ("update", "momentum"), nor keep the inner step from running (a true "skip"). Because GAC's
state lives in the optimizer's state dict, the trainer's own checkpoints (``optimizer.pt``) carry it, and
``resume_from_checkpoint`` restores it: the trainer loads the saved state into its optimizer before
training begins, and the wrapper adopts GAC's part of it.

The callback merges the ``METRICS`` — ``gac/cos_prev``, ``gac/regime``, ``gac/parallel_scale``,
``gac/grad_norm``, ``gac/grad_norm_after`` (means since the last log; a NaN cosine, where nothing was measured, is
left out of its mean) — into the trainer's own logs, so
every reporter (TensorBoard, W&B, trackio, the console) gets them. The names are the package's record
columns (``sim/schema.py``) under a ``gac/`` prefix; in update / momentum space the norms are those of the
controlled vector (Δθ or the first moment). Clipping by global norm scales the whole gradient, so the cosine
and the projection are the same as on the raw gradient; only an EMA reference weighs past steps by their
clipped norms. Install with ``pip install 'gac-lab[trl]'``.
"""

from __future__ import annotations

import math
from collections import defaultdict

try:
    from transformers import TrainerCallback
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("gac.integrations.trl needs transformers (and TRL for GRPO): "
                      "pip install 'gac-lab[trl]'") from error

import torch

from gac.config import GACConfig, check_config
from gac.optim import GACOptimizer, wrap

REGIME_CODES = {"keep": 0.0, "project": 1.0, "cap": 1.0, "skip": 2.0}
"""Numeric code logged as gac/regime (0 keep, 1 project/cap, 2 skip); its mean is the acting rate."""

PREFIX = "gac/"
METRICS: dict[str, str] = {
    "cos_prev": "cos(g_k, d_k): the raw gradient against GAC's reference (the last nonzero raw gradient by "
                "default; its EMA with reference='ema'); NaN where either is zero",
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
    """Wraps a transformers ``Trainer``'s optimizer with GAC when training begins and collects its reports."""

    def __init__(self, cfg: GACConfig | None = None, process_group=None, trainer=None):
        self.cfg = check_config(cfg, "add_gac")
        self.requested_cfg = cfg  # None: use the config of an optimizer that is already wrapped
        self.process_group = process_group
        self.trainer = trainer
        self.optimizer: GACOptimizer | None = None
        self._pending: dict[str, list[float]] = defaultdict(list)

    @property
    def tracker(self):
        """The wrapped optimizer's ``GradientAlignmentControl`` (None before training begins)."""
        return None if self.optimizer is None else self.optimizer.gac

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        self.optimizer = self._install(optimizer)

    def _install(self, optimizer) -> GACOptimizer:
        """Wrap the optimizer the trainer steps: accelerate's ``AcceleratedOptimizer`` holds it as ``.optimizer``."""
        if isinstance(optimizer, GACOptimizer):  # before the next test: a GACOptimizer holds .optimizer too
            return self._adopt(optimizer)
        inner = getattr(optimizer, "optimizer", None)
        if isinstance(inner, torch.optim.Optimizer):  # accelerate's wrapper (the Trainer always makes one)
            if isinstance(inner, GACOptimizer):
                self._adopt(inner)
            else:
                optimizer.optimizer = wrap(inner, self.cfg, self.process_group)
                if getattr(optimizer, "scaler", None) is not None:  # fp16: accelerate patched the old step
                    from accelerate.optimizer import patch_optimizer_step
                    optimizer._optimizer_original_step_method = optimizer.optimizer.step
                    optimizer._optimizer_patched_step_method = patch_optimizer_step(optimizer,
                                                                                    optimizer.optimizer.step)
            return optimizer.optimizer
        if self.trainer is None or not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"GAC: cannot wrap the trainer's optimizer ({type(optimizer).__name__}); pass "
                             f"optimizers=(gac.wrap(optimizer, cfg), scheduler) to the trainer instead")
        wrapped = wrap(optimizer, self.cfg, self.process_group)
        self.trainer.optimizer = self.trainer.callback_handler.optimizer = wrapped
        return wrapped

    def _adopt(self, wrapped: GACOptimizer) -> GACOptimizer:
        """An optimizer GAC already wraps (``gac.wrap`` by the user, or an earlier ``train()``) is kept when
        add_gac was given no config or the same one; another config is refused rather than silently ignored."""
        if self.requested_cfg is not None and self.requested_cfg != wrapped.cfg:
            raise ValueError(f"add_gac: the trainer's optimizer is already wrapped by GAC with {wrapped.cfg}, "
                             f"so add_gac's {self.requested_cfg} would be ignored; give the config once "
                             f"(to gac.wrap, or to add_gac with the plain optimizer)")
        self.cfg = wrapped.cfg
        return wrapped

    def on_optimizer_step(self, args, state, control, **kwargs):
        for name, value in report_metrics(self.optimizer.last_report).items():
            self._pending[name].append(value)

    def pop_metrics(self) -> dict[str, float]:
        """Means of the reports since the last call (empty when no optimizer step happened). A NaN (the cosine of a
        zero gradient or of the first step, which has no reference) is no measurement: it is left out of the mean,
        which is NaN only when no step since the last call was measured."""
        metrics = {}
        for key, values in self._pending.items():
            measured = [v for v in values if not math.isnan(v)]
            if values:
                metrics[key] = sum(measured) / len(measured) if measured else math.nan
        self._pending.clear()
        return metrics


def add_gac(trainer, cfg: GACConfig | None = None, process_group=None) -> GACCallback:
    """Enable GAC on ``trainer`` (a transformers/TRL trainer) and log its metrics through ``trainer.log``.

    When the trainer's optimizer is already wrapped (``optimizers=(gac.wrap(opt, cfg), scheduler)``), that wrapper is
    kept if ``cfg`` is None or equal to its config; another ``cfg`` is refused in one line when training begins.
    """
    callback = GACCallback(cfg, process_group, trainer)
    trainer.add_callback(callback)
    original_log = trainer.log

    def log_with_gac(logs, *args, **kwargs):
        return original_log({**logs, **callback.pop_metrics()}, *args, **kwargs)

    trainer.log = log_with_gac
    return callback
