"""``gac.wrap(..., compiled=True)``: GAC folded into a ``torch.compile``d Adam/AdamW step, in every space.

The fused path (``gac.fused``) adds passes of its own around torch's fused Adam/AdamW kernel. Here the step is
Adam/AdamW written out in torch ops and compiled into one generated loop per parameter, with GAC's work inside it:

- **gradient**: when GAC acts, one loop reads θ, g, d, m, v and writes g' (over d: the buffers swap roles as on the
  fused path), m, v, θ. Sums, decision, keep and skip are the fused path's.
- **update**: loop 1 returns ⟨Δ, d⟩, ‖Δ‖², ‖d‖², Σg² of the step Δ it would take (nothing written); after the
  decision loop 2 writes θ + Δ − α·d (θ + 0 on a skip), m, v and the reference. No θ_before, no Δ stored.
- **momentum**: loop 1 returns the sums of m_t = β1·m + (1−β1)·g; loop 2 steps with m_t − α·d as the first moment and
  writes the reference from m_t. A skip runs no loop 2.

The sums are float64, as the general path's; the step is the arithmetic of torch's fused kernel, so results agree with
the other paths within float rounding (tests/gac/test_compiled.py). A step these loops do not serve
(``CompiledAdamStep.serves`` and the callers' checks) runs the fused path; a failed compile warns once, finishes that
step eagerly, and the fused path runs from then on. Opt-in because the compile is paid once per process and parameter
layout, which short runs never earn back.
"""

from __future__ import annotations

import math
import warnings

import torch

from gac.control import ACT, SKIP
from gac.distributed import local_tensor
from gac.fused import coupled_weight_decay

FOLDABLE_DTYPES = (torch.float32, torch.float64)

# Columns of the per-tensor scalar rows (one row per parameter with a gradient, in the optimizer's order).
COEF, DECAY, WEIGHT_DECAY, BETA1, GRAD_WEIGHT1, BETA2, GRAD_WEIGHT2, BC2_SQRT, STEP_SIZE, EPS, SIGN, REF_WEIGHT, \
    HOLD = range(13)


# -- the step, written out in torch ops (compiled, or run eagerly after a failed compile) -----------------------------
def _effective_grad(theta, grad, s, coupled: bool):
    """g as Adam uses it: negated under ``maximize`` (SIGN = −1), plus λ·θ under coupled weight decay."""
    g = grad * s[SIGN]
    return g + theta * s[WEIGHT_DECAY] if coupled else g


def _first_moment(exp_avg, g, s):
    return exp_avg * s[BETA1] + g * s[GRAD_WEIGHT1]


def _finish(theta, g, m, exp_avg_sq, s):
    """(θ after the step, v) from the first moment m: torch's fused Adam/AdamW arithmetic."""
    v = exp_avg_sq * s[BETA2] + g * g * s[GRAD_WEIGHT2]
    return theta * s[DECAY] - s[STEP_SIZE] * m / (v.sqrt() / s[BC2_SQRT] + s[EPS]), v


def _lerp(start, end, weight):
    """torch.lerp's formula (exactly ``end`` at weight 1: reference "prev"; ``start`` at 0: no update), computed in
    ``end``'s dtype and stored in ``start``'s (a bfloat16 reference)."""
    start32 = start.to(end.dtype)
    diff = end - start32
    return torch.where(weight < 0.5, start32 + weight * diff, end - diff * (1 - weight)).to(start.dtype)


def _sums(vector, ref, grad):
    """(⟨v, d⟩, ‖v‖², ‖d‖², Σg²) in float64."""
    v, d, g = vector.double(), ref.double(), grad.double()
    return torch.stack([(v * d).sum(), (v * v).sum(), (d * d).sum(), (g * g).sum()])


def gradient_step(thetas, grads, outs, exp_avgs, exp_avg_sqs, scalars, coupled):
    """Adam/AdamW on g' = g − COEF·d per parameter; ``outs`` hold d on entry and g' on exit."""
    for i in range(len(thetas)):
        s, theta = scalars[i], thetas[i]
        projected = grads[i] - s[COEF] * outs[i]
        outs[i].copy_(projected)
        g = _effective_grad(theta, projected, s, coupled[i])
        m = _first_moment(exp_avgs[i], g, s)
        theta_new, v = _finish(theta, g, m, exp_avg_sqs[i], s)
        theta.copy_(theta_new)
        exp_avgs[i].copy_(m)
        exp_avg_sqs[i].copy_(v)


def update_sums(thetas, grads, exp_avgs, exp_avg_sqs, refs, scalars, coupled):
    """Per parameter (⟨Δ, d⟩, ‖Δ‖², ‖d‖², Σg²) of the step Δ Adam/AdamW would take; nothing written."""
    rows = []
    for i in range(len(thetas)):
        s, theta = scalars[i], thetas[i]
        g = _effective_grad(theta, grads[i], s, coupled[i])
        theta_new, _ = _finish(theta, g, _first_moment(exp_avgs[i], g, s), exp_avg_sqs[i], s)
        rows.append(_sums(theta_new - theta, refs[i], grads[i]))
    return torch.stack(rows)


def update_step(thetas, grads, exp_avgs, exp_avg_sqs, refs, scalars, coupled):
    """The step with Δ' = Δ − COEF·d (θ kept where HOLD, the state advancing), d ← lerp(d, Δ, REF_WEIGHT)."""
    for i in range(len(thetas)):
        s, theta, ref = scalars[i], thetas[i], refs[i]
        g = _effective_grad(theta, grads[i], s, coupled[i])
        m = _first_moment(exp_avgs[i], g, s)
        theta_new, v = _finish(theta, g, m, exp_avg_sqs[i], s)
        step = theta_new - theta
        moved = theta_new - s[COEF] * ref.to(theta.dtype)
        ref.copy_(_lerp(ref, step, s[REF_WEIGHT]))
        theta.copy_(torch.where(s[HOLD] > 0, theta, moved))
        exp_avgs[i].copy_(m)
        exp_avg_sqs[i].copy_(v)


def momentum_sums(thetas, grads, exp_avgs, exp_avg_sqs, refs, scalars, coupled):
    """Per parameter (⟨m_t, d⟩, ‖m_t‖², ‖d‖², Σg²) of the first moment the step would form; nothing written (nor
    ``exp_avg_sqs`` read: the signature is update_sums')."""
    rows = []
    for i in range(len(thetas)):
        s = scalars[i]
        g = _effective_grad(thetas[i], grads[i], s, coupled[i])
        rows.append(_sums(_first_moment(exp_avgs[i], g, s), refs[i], grads[i]))
    return torch.stack(rows)


def momentum_step(thetas, grads, exp_avgs, exp_avg_sqs, refs, scalars, coupled):
    """The step with m_t − COEF·d as the first moment, d ← lerp(d, m_t, REF_WEIGHT)."""
    for i in range(len(thetas)):
        s, theta, ref = scalars[i], thetas[i], refs[i]
        g = _effective_grad(theta, grads[i], s, coupled[i])
        moment = _first_moment(exp_avgs[i], g, s)
        m = moment - s[COEF] * ref.to(moment.dtype)
        theta_new, v = _finish(theta, g, m, exp_avg_sqs[i], s)
        ref.copy_(_lerp(ref, moment, s[REF_WEIGHT]))
        theta.copy_(theta_new)
        exp_avgs[i].copy_(m)
        exp_avg_sqs[i].copy_(v)


# -- when and how it runs -----------------------------------------------------------------------------------------
class CompiledAdamStep:
    """The compiled steps of one wrapped Adam/AdamW (``gac.wrap(..., compiled=True)``). ``failed`` names why it
    stopped serving (a failed compile), None while it serves; ``steps_taken`` counts the steps it took."""

    def __init__(self):
        self.failed: str | None = None
        self.steps_taken = 0
        self._functions: dict = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_functions": {}}  # a copy compiles again at its first compiled step

    def serves(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether this step of ``optimizer`` can be a compiled one, as far as the optimizer goes (module
        docstring); GAC's side (references, the buffer swap, finite sums) is checked by each space."""
        if self.failed is not None or optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks:
            return False
        from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
        if _global_optimizer_pre_hooks or _global_optimizer_post_hooks:
            return False
        if getattr(optimizer, "grad_scale", None) is not None or getattr(optimizer, "found_inf", None) is not None:
            return False
        step = vars(optimizer).get("step")  # an instance-level step: only an LR scheduler's call counter is known
        if step is not None and not getattr(step, "_wrapped_by_lr_sched", False):
            return False
        dtypes = set()
        for group in optimizer.param_groups:
            if group.get("amsgrad") or group.get("capturable") or group.get("differentiable"):
                return False
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = optimizer.state.get(p, {})
                if "step" not in state or "exp_avg" not in state or "exp_avg_sq" not in state:
                    return False
                tensors = [local_tensor(t) for t in (p, p.grad, state["exp_avg"], state["exp_avg_sq"])]
                if not all(type(t) in (torch.Tensor, torch.nn.Parameter) and t.dtype in FOLDABLE_DTYPES
                           and t.is_contiguous() and t.shape == tensors[0].shape for t in tensors):
                    return False
                dtypes.update(t.dtype for t in tensors)
        return len(dtypes) == 1

    def gradient_step(self, wrapper):
        """Gradient space: the report, with the step taken (compiled when GAC acts on every parameter with a
        gradient by swapping buffers, else the fused path's writes and the optimizer's own step)."""
        tracker, optimizer = wrapper.gac, wrapper.optimizer
        with_grad = [i for i, p in enumerate(tracker.params) if p.grad is not None]
        outs = ([tracker._swappable(i, ACT) for i in with_grad] if wrapper.swap_grads and self.serves(optimizer)
                else [None])  # the references that g' will be written over (the buffer swap)
        swaps = all(out is not None for out in outs)
        report = tracker.apply(swap_grads=wrapper.swap_grads, defer=("act" if swaps else None))
        deferred, tracker.deferred = tracker.deferred, None
        if deferred is not None:
            indices, _, _, coef, _, _ = deferred
            if indices != with_grad:  # a parameter takes no part (an all-zero gradient): the fused path's writes
                tracker._write(*deferred)
            else:
                pairs = {tracker.params[i]: (tracker.params[i].grad, out) for i, out in zip(indices, outs, strict=True)}
                self._run(optimizer, "gradient", pairs, coef)
                for index in indices:
                    tracker.swap_written(index)
                return report
        if report.regime != "skip":
            wrapper._inner_step()
        return report

    def moment_step(self, wrapper, space: str):
        """Update or momentum space: the report with the step taken, or None (nothing changed) when this step is not
        one the compiled path takes; the caller then runs the fused path."""
        tracker, optimizer = wrapper.gac, wrapper.optimizer
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not params or not self.serves(optimizer):
            return None
        index_of = {p: i for i, p in enumerate(tracker.params)}
        refs = [tracker._reference_of(index_of[p]) for p in params]
        if any(r is None or not r.is_contiguous() or r.shape != local_tensor(p).shape
               for r, p in zip(refs, params, strict=True)):
            return None
        inputs = self._inputs(optimizer, {p: (p.grad, r) for p, r in zip(params, refs, strict=True)}, coef=0.0)
        thetas, grads, exp_avgs, exp_avg_sqs, ref_list, rows, coupled, steps = inputs
        scalars = torch.tensor(rows, dtype=thetas[0].dtype, device=thetas[0].device)
        tensors = (thetas, grads, exp_avgs, exp_avg_sqs, ref_list)
        sums = self._call(f"{space}_sums", *tensors, scalars, coupled)
        if not bool(torch.isfinite(sums).all()):  # a non-finite gradient, step or reference: the fused path decides
            return None
        has = (sums[:, 3] > 0).tolist()
        has_gradient = [False] * len(tracker.params)
        for p, value in zip(params, has, strict=True):
            has_gradient[index_of[p]] = value
        # The sums' rows follow the optimizer's order, which is the tracker's; the gradients stand for the vectors
        # they are sums of (Δ or m_t, never formed: the writes are deferred to the second loop).
        vectors = [p.grad for p in tracker.params]
        tracker.presum([local_tensor(v) for v in vectors if v is not None], sums[:, :3].t().contiguous(),
                       with_d_sq=True)
        report = tracker.apply(vectors, has_gradient=has_gradient, defer="all")
        deferred, tracker.deferred = tracker.deferred, None
        if deferred is None:  # another rank's sums were not finite: skipped (or raised) with nothing changed here
            return report
        indices, _, regime, coef, _, _ = deferred
        if space == "momentum" and regime == SKIP:
            self.steps_taken += 1
            return report  # no step: the optimizer's state is unchanged, the reference restarted
        written = set(indices)
        weight = 1.0 if tracker.cfg.reference == "prev" else 1.0 - tracker.cfg.ema_decay
        for row, p in zip(rows, params, strict=True):
            acting = regime == ACT and index_of[p] in written
            row[COEF] = coef if acting else 0.0
            row[REF_WEIGHT] = weight if index_of[p] in written and regime != SKIP else 0.0
            row[HOLD] = 1.0 if regime == SKIP else 0.0
        self._call(f"{space}_step", *tensors, torch.tensor(rows, dtype=thetas[0].dtype, device=thetas[0].device),
                   coupled)
        torch._foreach_add_(steps, 1)
        self.steps_taken += 1
        tracker._spare.clear()  # the fused path's θ_before or m_t buffers, unused here
        return report

    # -- internals ------------------------------------------------------------------------------------------------
    def _run(self, optimizer, name: str, pairs: dict, coef: float) -> None:
        thetas, grads, exp_avgs, exp_avg_sqs, outs, rows, coupled, steps = self._inputs(optimizer, pairs, coef)
        scalars = torch.tensor(rows, dtype=thetas[0].dtype, device=thetas[0].device)
        self._call(f"{name}_step", thetas, grads, outs, exp_avgs, exp_avg_sqs, scalars, coupled)
        torch._foreach_add_(steps, 1)
        self.steps_taken += 1

    @staticmethod
    def _inputs(optimizer, pairs: dict, coef: float):
        """The kernels' tensors in the optimizer's order, each parameter's scalar row (``COEF`` = coef) and the
        per-tensor coupled-weight-decay flags; ``pairs`` maps each parameter with a gradient to (g, d)."""
        thetas, grads, exp_avgs, exp_avg_sqs, refs, rows, coupled, steps = ([] for _ in range(8))
        for group in optimizer.param_groups:
            beta1, beta2 = (float(b) for b in group["betas"])
            lr, weight_decay, eps = float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
            is_coupled = coupled_weight_decay(optimizer, group)
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = optimizer.state[p]
                grad, ref = pairs[p]
                step = int(state["step"]) + 1  # torch's kernels use the step count after adding 1
                decay = 1.0 if is_coupled else 1.0 - lr * weight_decay
                rows.append([coef, decay, weight_decay, beta1, 1.0 - beta1, beta2, 1.0 - beta2,
                             math.sqrt(1.0 - beta2**step), lr / (1.0 - beta1**step), eps,
                             -1.0 if group.get("maximize", False) else 1.0, 0.0, 0.0])
                thetas.append(local_tensor(p).detach())
                grads.append(local_tensor(grad))
                refs.append(local_tensor(ref))
                exp_avgs.append(local_tensor(state["exp_avg"]))
                exp_avg_sqs.append(local_tensor(state["exp_avg_sq"]))
                coupled.append(is_coupled)
                steps.append(state["step"])
        return thetas, grads, exp_avgs, exp_avg_sqs, refs, rows, tuple(coupled), steps

    def _call(self, name: str, *args):
        """The compiled ``name`` on ``args``; after a failed compile (one warning) the same function, run eagerly."""
        function = KERNELS[name]
        if self.failed is None:
            compiled = self._functions.get(name)
            try:
                if compiled is None:
                    compiled = self._functions[name] = torch.compile(function, fullgraph=True, dynamic=False)
                return compiled(*args)
            except Exception as error:  # noqa: BLE001 - a failed compile (no C++ compiler, unsupported Python, ...)
                message = str(error).strip().splitlines()[0] if str(error).strip() else ""
                self.failed = f"{type(error).__name__}: {message}"[:300]
                warnings.warn(f"gac.wrap(compiled=True): torch.compile failed ({self.failed}); this step runs the "
                              f"same arithmetic uncompiled and later steps the fused path", stacklevel=5)
        return function(*args)


KERNELS = {"gradient_step": gradient_step, "update_sums": update_sums, "update_step": update_step,
           "momentum_sums": momentum_sums, "momentum_step": momentum_step}


__all__ = ["CompiledAdamStep", "KERNELS"]
