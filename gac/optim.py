"""wrap(optimizer, cfg): an optimizer whose step() applies GAC to the gradients first.

The wrapper shares ``param_groups`` and ``state`` with the optimizer it wraps, so LR schedulers,
gradient clipping and checkpoint code see an ordinary ``torch.optim.Optimizer``. Its state_dict is
the inner one plus a "gac" entry; in the "skip" regime the inner step is not taken.
"""

from __future__ import annotations

import torch

from gac.config import GACConfig
from gac.tracker import GACReport, GradientAlignmentControl


class GACOptimizer(torch.optim.Optimizer):
    """An optimizer that applies Gradient Alignment Control before delegating to ``optimizer``."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: GACConfig | None = None, process_group=None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"wrap() needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self._wrapped = False
        self.optimizer = optimizer
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.gac = GradientAlignmentControl(params, cfg, process_group)
        # Sets up hook dictionaries and the step profiler the way torch expects; then the group and
        # state containers are replaced by the inner optimizer's own objects (shared, not copied).
        super().__init__(params, optimizer.defaults)
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.skipped_steps = 0
        self._wrapped = True

    @property
    def last_report(self) -> GACReport | None:
        return self.gac.last_report

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        report = self.gac.apply()
        if report.regime == "skip":
            self.skipped_steps += 1
            return loss
        self.optimizer.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict) -> None:
        if self._wrapped:
            raise NotImplementedError("GACOptimizer: add parameter groups before wrapping the optimizer")
        super().add_param_group(param_group)

    def state_dict(self) -> dict:
        state = self.optimizer.state_dict()
        state["gac"] = self.gac.state_dict()
        state["gac_skipped_steps"] = self.skipped_steps
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        gac_state = state_dict.pop("gac", None)
        self.skipped_steps = int(state_dict.pop("gac_skipped_steps", 0))
        self.optimizer.load_state_dict(state_dict)
        self.state = self.optimizer.state
        self.param_groups = self.optimizer.param_groups
        if gac_state is not None:
            self.gac.load_state_dict(gac_state)

    def __repr__(self) -> str:
        return f"GACOptimizer({self.gac.cfg}, {self.optimizer!r})"


def wrap(optimizer: torch.optim.Optimizer, cfg: GACConfig | None = None, process_group=None) -> GACOptimizer:
    """Return an optimizer whose ``step()`` applies GAC (``cfg``) to the gradients, then steps.

    Example::

        opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=1e-3), gac.GACConfig(threshold=0.3))
        loss.backward(); opt.step(); opt.zero_grad()
        opt.last_report.cosine
    """
    return GACOptimizer(optimizer, cfg, process_group)
