"""wrap(optimizer, cfg): an optimizer whose step() applies GAC to the gradients first.

The wrapper shares ``param_groups`` and ``state`` with the optimizer it wraps, so LR schedulers,
gradient clipping and checkpoint code see an ordinary ``torch.optim.Optimizer``. The reference
direction lives in ``optimizer.state[p]["gac_reference"]`` (the torch convention, so FSDP and
distributed-checkpoint tooling carry it); the state_dict adds a small "gac" entry (step counts and
threshold statistics). In the "skip" regime the inner step is not taken.
"""

from __future__ import annotations

import torch

from gac.config import GACConfig
from gac.tracker import REFERENCE_KEY, GACReport, GradientAlignmentControl, check_reference_shape


class GACOptimizer(torch.optim.Optimizer):
    """An optimizer that applies Gradient Alignment Control before delegating to ``optimizer``."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: GACConfig | None = None, process_group=None):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"wrap() needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self._wrapped = False
        self.optimizer = optimizer
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.gac = GradientAlignmentControl(params, cfg, process_group, param_state=optimizer.state)
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
        # torch optimizers initialise a parameter's state when it is empty (Adam: len(state) == 0), so a
        # reference that arrived before the optimizer's own state is hidden during the inner step.
        alone = {p: s.pop(REFERENCE_KEY) for p, s in self.state.items() if list(s) == [REFERENCE_KEY]}
        self.optimizer.step()
        for param, reference in alone.items():
            self.state[param][REFERENCE_KEY] = reference
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict) -> None:
        if self._wrapped:
            raise NotImplementedError("GACOptimizer: add parameter groups before wrapping the optimizer")
        super().add_param_group(param_group)

    def state_dict(self) -> dict:
        state = self.optimizer.state_dict()  # holds the reference, under each parameter's "gac_reference"
        state["gac"] = self.gac.state_dict(with_reference=False)
        state["gac_skipped_steps"] = self.skipped_steps
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state of ``state_dict`` (or of gac 0.1, whose "gac" entry held the reference list)."""
        state_dict = dict(state_dict)
        gac_state = state_dict.pop("gac", None)
        self._check_saved_references(state_dict)
        if gac_state is not None and gac_state.get("reference") is not None:
            self.gac._check_reference_shapes(gac_state["reference"])
        skipped = int(state_dict.pop("gac_skipped_steps", 0))
        self.optimizer.load_state_dict(state_dict)
        self.state = self.gac.param_state = self.optimizer.state  # load_state_dict made a new dict
        self.gac._last_g_sq = None  # the references were replaced
        self.param_groups = self.optimizer.param_groups
        self.skipped_steps = skipped
        if gac_state is not None:
            self.gac.load_state_dict(gac_state)
        dtype = self.gac.cfg.reference_dtype
        if dtype is not None:  # torch casts loaded state to the parameter's dtype; keep the reference's
            for param_state in self.state.values():
                if REFERENCE_KEY in param_state:
                    param_state[REFERENCE_KEY] = param_state[REFERENCE_KEY].to(dtype)

    def _check_saved_references(self, state_dict: dict) -> None:
        """Every saved reference has its parameter's shape (saved ids map to parameters in group order)."""
        saved_ids = [i for group in state_dict.get("param_groups", []) for i in group["params"]]
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        for index, (saved_id, param) in enumerate(zip(saved_ids, params, strict=False)):
            check_reference_shape(index, state_dict.get("state", {}).get(saved_id, {}).get(REFERENCE_KEY), param)

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
