"""``gac.wrap(..., compiled=True)``: GAC folded into a ``torch.compile``d Adam/AdamW step, in every space.

The fused path (``gac.fused``) adds passes of its own around torch's fused Adam/AdamW kernel. Here the step is
Adam/AdamW written out in torch ops and compiled into one generated loop per parameter, with GAC's work inside it:

- **gradient**: loop 1 returns ⟨g, d⟩, ‖g‖², ‖d‖² in float64 (reading g and d once); when GAC acts, loop 2 reads θ, g,
  d, m, v and writes g' (over d: the buffers swap roles as on the fused path), m, v, θ. Where d cannot take g' by
  a swap (a DTensor's local shard under FSDP2, a view into a bucket, ``swap_grads`` off, reference "ema" or in
  another dtype) loop 2 writes d ← lerp(d, raw g) (the raw g itself for "prev") and g' over g instead. Decision,
  keep and skip are the fused path's.
- **update**: loop 1 returns ⟨Δ, d⟩, ‖Δ‖², ‖d‖², Σg² of the step Δ it would take (nothing written); after the
  decision loop 2 writes θ + Δ − α·d (θ + 0 on a skip), m, v and the reference. No θ_before, no Δ stored.
- **momentum**: loop 1 returns the sums of m_t = β1·m + (1−β1)·g; loop 2 steps with m_t − α·d as the first moment and
  writes the reference from m_t. A skip runs no loop 2.

The sums are float64, as the general path's; the step is the arithmetic of torch's fused kernel, so results agree with
the other paths within float rounding (tests/gac/test_compiled.py). A step these loops do not serve
(``CompiledAdamStep._gather``) runs the fused path; a failed compile warns once, finishes that step eagerly, and the
fused path runs from then on. Opt-in because the compile is paid once per process and parameter layout, which short
runs never earn back.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch

from gac.control import ACT, SKIP
from gac.distributed import PLAIN_TYPES, local_tensor
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


def _double(tensor):
    """``tensor`` in float64; a 16-bit one through float32 (the same values; the generated loop converts bfloat16 to
    float64 directly more slowly)."""
    return (tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()).double()


def _sums(out, row: int, vector, ref, grad) -> None:
    """Row ``row`` of the float64 ``out``: ⟨v, d⟩, ‖v‖², ‖d‖², and Σg² where ``out`` has a fourth column. Written into
    an output the caller allocates, so the generated code stores each sum in place (a stacked result costs a buffer
    and its views per sum at every call)."""
    v, d = vector.double(), _double(ref)
    out[row, 0] = (v * d).sum()
    out[row, 1] = (v * v).sum()
    out[row, 2] = (d * d).sum()
    if out.shape[1] > 3:
        g = grad.double()
        out[row, 3] = (g * g).sum()


def gradient_sums(grads, refs, out) -> None:
    """Per parameter (⟨g, d⟩, ‖g‖², ‖d‖²) in float64 into ``out`` (parameters, 3): one loop reading g and d once."""
    for i in range(len(grads)):
        _sums(out, i, grads[i], refs[i], grads[i])


def _adam_step(theta, grad, exp_avg, exp_avg_sq, s, coupled: bool) -> None:
    """One Adam/AdamW step of θ on the gradient ``grad``, written into θ, m, v."""
    g = _effective_grad(theta, grad, s, coupled)
    m = _first_moment(exp_avg, g, s)
    theta_new, v = _finish(theta, g, m, exp_avg_sq, s)
    theta.copy_(theta_new)
    exp_avg.copy_(m)
    exp_avg_sq.copy_(v)


def gradient_step(thetas, grads, outs, exp_avgs, exp_avg_sqs, scalars, coupled):
    """Adam/AdamW on g' = g − COEF·d per parameter; ``outs`` hold d on entry and g' on exit (the buffer swap)."""
    for i in range(len(thetas)):
        projected = grads[i] - scalars[i][COEF] * outs[i]
        outs[i].copy_(projected)
        _adam_step(thetas[i], projected, exp_avgs[i], exp_avg_sqs[i], scalars[i], coupled[i])


def _gradient_step_in_place(thetas, grads, refs, exp_avgs, exp_avg_sqs, scalars, coupled, ema: bool):
    for i in range(len(thetas)):
        s, grad, ref = scalars[i], grads[i], refs[i]
        projected = grad - s[COEF] * ref.to(grad.dtype)
        ref.copy_(_lerp(ref, grad, s[REF_WEIGHT]) if ema else grad.to(ref.dtype))
        grad.copy_(projected)
        _adam_step(thetas[i], projected, exp_avgs[i], exp_avg_sqs[i], s, coupled[i])


def gradient_step_in_place(thetas, grads, refs, exp_avgs, exp_avg_sqs, scalars, coupled):
    """Adam/AdamW on g' = g − COEF·d per parameter where d cannot take g' by a buffer swap (a DTensor's local shard,
    a view into a bucket, a reference in another dtype): d takes the raw g (reference "prev") and ``grads`` g', one
    more write than ``gradient_step``."""
    _gradient_step_in_place(thetas, grads, refs, exp_avgs, exp_avg_sqs, scalars, coupled, ema=False)


def gradient_step_in_place_ema(thetas, grads, refs, exp_avgs, exp_avg_sqs, scalars, coupled):
    """``gradient_step_in_place`` with reference "ema": d ← lerp(d, raw g, REF_WEIGHT)."""
    _gradient_step_in_place(thetas, grads, refs, exp_avgs, exp_avg_sqs, scalars, coupled, ema=True)


def update_sums(thetas, grads, exp_avgs, exp_avg_sqs, refs, scalars, coupled, out) -> None:
    """Per parameter (⟨Δ, d⟩, ‖Δ‖², ‖d‖², Σg²) of the step Δ Adam/AdamW would take, into ``out`` (parameters, 4);
    nothing else written."""
    for i in range(len(thetas)):
        s, theta = scalars[i], thetas[i]
        g = _effective_grad(theta, grads[i], s, coupled[i])
        theta_new, _ = _finish(theta, g, _first_moment(exp_avgs[i], g, s), exp_avg_sqs[i], s)
        _sums(out, i, theta_new - theta, refs[i], grads[i])


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


def momentum_sums(thetas, grads, exp_avgs, exp_avg_sqs, refs, scalars, coupled, out) -> None:
    """Per parameter (⟨m_t, d⟩, ‖m_t‖², ‖d‖², Σg²) of the first moment the step would form, into ``out``
    (parameters, 4); nothing else written (nor ``exp_avg_sqs`` read: the signature is update_sums')."""
    for i in range(len(thetas)):
        s = scalars[i]
        g = _effective_grad(thetas[i], grads[i], s, coupled[i])
        _sums(out, i, _first_moment(exp_avgs[i], g, s), refs[i], grads[i])


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


def _reference_weight(cfg) -> float:
    """w of the reference's update d ← lerp(d, v, w): 1 for "prev" (d ← v), 1 − ema_decay for "ema"."""
    return 1.0 if cfg.reference == "prev" else 1.0 - cfg.ema_decay


class Batch(NamedTuple):
    """One compiled step's inputs (``CompiledAdamStep._gather``): per parameter with a gradient, in the optimizer's
    order, its tracker index, θ, g, m, v, its reference, its scalar row, whether its weight decay is coupled (Adam)
    and its step-count tensor."""

    indices: list
    thetas: list
    grads: list
    exp_avgs: list
    exp_avg_sqs: list
    refs: list
    rows: list
    coupled: list
    steps: list


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
        """Whether a step of ``optimizer`` can be a compiled one as far as the optimizer itself goes (no step hooks,
        no grad scaler, no amsgrad/capturable/differentiable group); its tensors are checked by ``_gather``."""
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
        return not any(group.get("amsgrad") or group.get("capturable") or group.get("differentiable")
                       for group in optimizer.param_groups)

    def gradient_step(self, wrapper):
        """Gradient space: the report, with the step taken (compiled when GAC acts on every parameter with a
        gradient, else the fused path's writes and the optimizer's own step). g' is written over d and the buffers
        swap where every gradient allows it (reference "prev" in the gradient's dtype), else in place."""
        tracker, optimizer = wrapper.gac, wrapper.optimizer
        # The references that g' will be written over (the buffer swap), else those that take the raw g in place.
        batch = self._gather(optimizer, lambda index, _: tracker._swappable(index, ACT)) if wrapper.swap_grads \
            else None
        swap = batch is not None
        if not swap:
            batch = self._gather(optimizer, lambda index, param: self._loop_reference(tracker, index, param))
        if batch is not None:  # the sums in one compiled loop (finite ones only: else the fused path looks closer)
            sums = self._run_sums("gradient_sums", 3, batch.grads, batch.refs)
            if bool(torch.isfinite(sums).all()):
                tracker.presum(batch.grads, sums.t().contiguous(), with_d_sq=True)
        report = tracker.apply(swap_grads=wrapper.swap_grads, defer=("act" if batch is not None else None))
        deferred, tracker.deferred = tracker.deferred, None
        if deferred is not None:
            indices, _, _, coef, _, _ = deferred
            if indices != batch.indices:  # a parameter takes no part (an all-zero gradient): the fused path's writes
                tracker._write(*deferred)
            else:
                weight = _reference_weight(tracker.cfg)
                for row in batch.rows:
                    row[COEF], row[REF_WEIGHT] = coef, weight
                ema = tracker.cfg.reference != "prev"
                kernel = "gradient_step" if swap else "gradient_step_in_place_ema" if ema else "gradient_step_in_place"
                self._launch(kernel, batch, batch.thetas,
                             batch.grads, batch.refs, batch.exp_avgs, batch.exp_avg_sqs)
                if swap:
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
        batch = self._gather(optimizer, lambda index, param: self._loop_reference(tracker, index, param))
        if batch is None:
            return None
        tensors = (batch.thetas, batch.grads, batch.exp_avgs, batch.exp_avg_sqs, batch.refs)
        sums = self._run_sums(f"{space}_sums", 4, *tensors, self._scalars(batch), batch.coupled)
        if not bool(torch.isfinite(sums).all()):  # a non-finite gradient, step or reference: the fused path decides
            return None
        has_gradient = [False] * len(tracker.params)
        for index, value in zip(batch.indices, (sums[:, 3] > 0).tolist(), strict=True):
            has_gradient[index] = value
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
        weight = _reference_weight(tracker.cfg)
        for row, index in zip(batch.rows, batch.indices, strict=True):
            row[COEF] = coef if regime == ACT and index in written else 0.0
            row[REF_WEIGHT] = weight if index in written and regime != SKIP else 0.0
            row[HOLD] = 1.0 if regime == SKIP else 0.0
        self._launch(f"{space}_step", batch, *tensors)
        tracker._spare.clear()  # the fused path's θ_before or m_t buffers, unused here
        return report

    # -- internals ------------------------------------------------------------------------------------------------
    @staticmethod
    def _loop_reference(tracker, index: int, param) -> torch.Tensor | None:
        """Parameter ``index``'s (rank-local) reference when a loop can read it: contiguous, of the parameter's local
        shape; else None."""
        ref = tracker._reference_of(index)
        return ref if ref is not None and ref.is_contiguous() and ref.shape == local_tensor(param).shape else None

    def _launch(self, name: str, batch: Batch, *tensors) -> None:
        """The step kernel ``name`` on ``tensors`` with the batch's scalar rows; the optimizer's step counts + 1."""
        self._call(name, *tensors, self._scalars(batch), batch.coupled)
        torch._foreach_add_(batch.steps, 1)
        self.steps_taken += 1

    def _run_sums(self, name: str, columns: int, *args) -> torch.Tensor:
        """The sums kernel ``name`` on ``args``: its rows (parameters, ``columns``) in float64."""
        out = torch.empty((len(args[0]), columns), dtype=torch.float64, device=args[0][0].device)
        self._call(name, *args, out)
        return out

    @staticmethod
    def _scalars(batch: Batch) -> torch.Tensor:
        return torch.tensor(batch.rows, dtype=batch.thetas[0].dtype, device=batch.thetas[0].device)

    def _gather(self, optimizer, reference) -> Batch | None:
        """The kernels' inputs, in the optimizer's order (the tracker's), for the parameters with a gradient; None
        when this step is not one the compiled loops serve: ``serves``, and per parameter its Adam state present,
        θ, g, m, v plain contiguous tensors of one float dtype and shape, and ``reference(index, param)`` (its
        tracker index) a tensor, not None. Each scalar row has ``COEF`` 0."""
        if not self.serves(optimizer):
            return None
        batch = Batch([], [], [], [], [], [], [], [], [])
        index, dtype = -1, None
        for group in optimizer.param_groups:
            beta1, beta2 = (float(b) for b in group["betas"])
            lr, weight_decay, eps = float(group["lr"]), float(group["weight_decay"]), float(group["eps"])
            is_coupled = coupled_weight_decay(optimizer, group)
            decay = 1.0 if is_coupled else 1.0 - lr * weight_decay
            sign = -1.0 if group.get("maximize", False) else 1.0
            rows = {}  # the scalar row of each step count in this group
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                state = optimizer.state.get(p)
                if state is None or "step" not in state or "exp_avg" not in state or "exp_avg_sq" not in state:
                    return None
                tensors = (local_tensor(p), local_tensor(p.grad), local_tensor(state["exp_avg"]),
                           local_tensor(state["exp_avg_sq"]))
                dtype = tensors[0].dtype if dtype is None else dtype
                shape = tensors[0].shape
                if dtype not in FOLDABLE_DTYPES:
                    return None
                for t in tensors:
                    if type(t) not in PLAIN_TYPES or t.dtype != dtype or t.shape != shape or not t.is_contiguous():
                        return None
                ref = reference(index, p)
                if ref is None:
                    return None
                step = int(state["step"]) + 1  # torch's kernels use the step count after adding 1
                row = rows.get(step)
                if row is None:
                    row = rows[step] = [0.0, decay, weight_decay, beta1, 1.0 - beta1, beta2, 1.0 - beta2,
                                        math.sqrt(1.0 - beta2**step), lr / (1.0 - beta1**step), eps, sign, 0.0, 0.0]
                batch.rows.append(list(row))
                batch.indices.append(index)
                batch.thetas.append(tensors[0].detach())
                batch.grads.append(tensors[1])
                batch.exp_avgs.append(tensors[2])
                batch.exp_avg_sqs.append(tensors[3])
                batch.refs.append(local_tensor(ref))
                batch.coupled.append(is_coupled)
                batch.steps.append(state["step"])
        return batch._replace(coupled=tuple(batch.coupled)) if batch.indices else None

    def _call(self, name: str, *args):
        """The compiled ``name`` on ``args``; after a failed compile (one warning) the same function, run eagerly."""
        function = KERNELS[name]
        if self.failed is None:
            compiled = self._functions.get(name)
            try:
                if compiled is None:
                    # No size asserts in the generated wrapper: dynamo's guards already check every input's size
                    # and stride, and the asserts repeat that for every tensor at every call.
                    compiled = self._functions[name] = torch.compile(function, fullgraph=True, dynamic=False,
                                                                     options={"size_asserts": False})
                return compiled(*args)
            except Exception as error:  # noqa: BLE001 - a failed compile (no C++ compiler, unsupported Python, ...)
                message = str(error).strip().splitlines()[0] if str(error).strip() else ""
                self.failed = f"{type(error).__name__}: {message}"[:300]
                warnings.warn(f"gac.wrap(compiled=True): torch.compile failed ({self.failed}); this step runs the "
                              f"same arithmetic uncompiled and later steps the fused path", stacklevel=5)
        return function(*args)


KERNELS = {"gradient_sums": gradient_sums, "gradient_step": gradient_step,
           "gradient_step_in_place": gradient_step_in_place, "gradient_step_in_place_ema": gradient_step_in_place_ema,
           "update_sums": update_sums,
           "update_step": update_step, "momentum_sums": momentum_sums, "momentum_step": momentum_step}


__all__ = ["CompiledAdamStep", "KERNELS"]
