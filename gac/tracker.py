"""GradientAlignmentControl: GAC over a model's parameters, editing ``.grad`` in place.

A thin stateful shell over ``gac.control``: it keeps the reference direction (one buffer per
parameter, optionally bfloat16), computes the three sums with per-tensor kernels (plus one
all_reduce when gradients are sharded), takes the decision with ``gac.control.decide`` and applies
g' = s·g − α·d tensor by tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import torch

from gac.config import GACConfig
from gac.control import ACT, SKIP, AlignmentStats, decide, regime_name
from gac.distributed import all_reduce_stats, infer_process_group, local_tensor


class NonFiniteGradientError(FloatingPointError):
    """Raised (by default) when a step's gradient has a NaN or infinite entry on any rank."""


@dataclass
class GACReport:
    """What GAC did at one step."""

    step: int
    cosine: float
    regime: str
    parallel_scale: float
    grad_norm_before: float
    grad_norm_after: float
    threshold: float
    nonfinite: bool = False

    def as_dict(self, prefix: str = "gac/") -> dict:
        return {prefix + key: value for key, value in asdict(self).items()}


class GradientAlignmentControl:
    """Keeps GAC's reference direction for ``params`` and applies GAC to their ``.grad`` in place.

    Call ``apply()`` after ``backward()`` (and before clipping and ``optimizer.step()``). With
    sharded gradients pass the sharding ``process_group`` (DTensor gradients from FSDP2 on a 1-D
    mesh are detected); every rank then takes the same decision from the summed statistics.
    """

    def __init__(self, params: Iterable[torch.Tensor], cfg: GACConfig | None = None, process_group=None):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("GradientAlignmentControl needs at least one parameter that requires grad")
        self.cfg = cfg if cfg is not None else GACConfig()
        self.process_group = process_group
        self.reference: list[torch.Tensor | None] = [None] * len(self.params)
        self.step = 0
        self.skipped_nonfinite = 0
        self.last_report: GACReport | None = None

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        rule = self.cfg.threshold
        return {
            "step": self.step,
            "skipped_nonfinite": self.skipped_nonfinite,
            "reference": [None if r is None else r.clone() for r in self.reference],
            "threshold_rule": None if isinstance(rule, float) else rule.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        if len(state["reference"]) != len(self.params):
            raise ValueError(f"GAC state has {len(state['reference'])} reference tensors, "
                             f"this model has {len(self.params)} parameters")
        self.step = int(state["step"])
        self.skipped_nonfinite = int(state["skipped_nonfinite"])
        self.reference = [None if r is None else r.detach().clone() for r in state["reference"]]
        if state.get("threshold_rule") is not None and not isinstance(self.cfg.threshold, float):
            self.cfg.threshold.load_state_dict(state["threshold_rule"])

    def reference_bytes(self) -> int:
        """Memory held by the reference direction on this rank."""
        return sum(r.numel() * r.element_size() for r in self.reference if r is not None)

    # -- the step ---------------------------------------------------------------------------------
    def _threshold(self) -> float:
        rule = self.cfg.threshold
        return rule if isinstance(rule, float) else float(rule.current())

    def _local_stats(self, grads, refs) -> torch.Tensor:
        """[⟨g,d⟩, ‖g‖², ‖d‖², non-finite flag] over this rank's tensors, as float64."""
        device = grads[0].device
        g_norms = torch._foreach_norm(grads)
        g_sq = torch.stack([n.double() for n in g_norms]).square().sum()
        pairs = [(g, r) for g, r in zip(grads, refs, strict=True) if r is not None]
        if pairs:
            dot = torch.stack([torch.dot(g.reshape(-1), r.reshape(-1).to(g.dtype)).double()
                               for g, r in pairs]).sum()
            d_sq = torch.stack([n.double() for n in torch._foreach_norm([r for _, r in pairs])]).square().sum()
        else:
            dot = d_sq = torch.zeros((), dtype=torch.float64, device=device)
        nonfinite = (~torch.isfinite(g_sq)).double()
        return torch.stack([dot, g_sq, d_sq, nonfinite])

    def _update_reference(self, index: int, grad: torch.Tensor) -> None:
        ref = self.reference[index]
        if ref is None:  # the reference starts at zero, as in gac.control.update_reference
            ref = self.reference[index] = torch.zeros_like(grad, dtype=self.cfg.reference_dtype or grad.dtype)
        if self.cfg.reference == "prev":
            ref.copy_(grad)
        else:
            ref.lerp_(grad.to(ref.dtype), 1.0 - self.cfg.ema_decay)

    def apply(self) -> GACReport:
        """Apply GAC to the current ``.grad`` of the parameters (in place) and return the report."""
        entries = [(i, local_tensor(p.grad)) for i, p in enumerate(self.params) if p.grad is not None]
        if not entries:
            raise ValueError(f"GAC step {self.step}: no parameter has a gradient; call backward() first")
        indices, grads = [i for i, _ in entries], [g for _, g in entries]
        refs = [self.reference[i] for i in indices]
        group = self.process_group if self.process_group is not None else infer_process_group(
            [p.grad for p in self.params if p.grad is not None])
        dot, g_sq, d_sq, nonfinite = all_reduce_stats(self._local_stats(grads, refs), group).tolist()
        threshold = self._threshold()

        if nonfinite > 0:
            if self.cfg.nonfinite == "raise":
                raise NonFiniteGradientError(f"GAC: non-finite gradient at step {self.step} "
                                             f"(NaN or inf in some parameter's .grad); nothing was changed")
            torch._foreach_zero_(grads)
            self.skipped_nonfinite += 1
            report = GACReport(self.step, 0.0, "skip", 0.0, float("nan"), 0.0, threshold, nonfinite=True)
            self.step += 1
            self.last_report = report
            return report

        stats = AlignmentStats(*(torch.tensor(v, dtype=torch.float64) for v in (dot, g_sq, d_sq)))
        decision = decide(stats, self.cfg, threshold)
        regime = int(decision.regime)
        coef = float(decision.ref_coef)
        for index, grad in zip(indices, grads, strict=True):
            ref = self.reference[index]
            if regime == ACT and ref is not None:
                # g' goes to a scratch tensor first: the reference must take the raw g, exactly.
                projected = torch.sub(grad, ref.to(grad.dtype), alpha=coef)
                self._update_reference(index, grad)
                grad.copy_(projected)
            else:
                self._update_reference(index, grad)
                if regime == SKIP:
                    grad.zero_()
        for index, param in enumerate(self.params):
            if param.grad is None and self.reference[index] is not None:
                # No gradient this step counts as a zero gradient for the reference.
                self.reference[index].mul_(0.0 if self.cfg.reference == "prev" else self.cfg.ema_decay)

        cosine = float(decision.cosine)
        if not isinstance(self.cfg.threshold, float):
            self.cfg.threshold.observe(cosine)
        report = GACReport(self.step, cosine, regime_name(regime, self.cfg.mode), float(decision.parallel_scale),
                           float(decision.norm_before), float(decision.norm_after), threshold)
        self.step += 1
        self.last_report = report
        return report
