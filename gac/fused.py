"""The fused path of ``gac.wrap`` for ``torch.optim.Adam`` and ``torch.optim.AdamW``: the general path's decisions,
references and state with fewer passes over the parameters, using kernels torch already ships (user-facing
description: docs/usage.md, "The fused path").

- **The sums** ⟨v, d⟩ and ‖v‖² are BLAS dots in the input's dtype over chunks of ``SUM_CHUNK`` elements (‖v‖² reads
  the chunk again from cache), the chunk results added in float64. A tensor whose sums are not finite or so small
  that float32 products could underflow (below ``TINY_SQ``) is summed again by the general path's float64 code, so a
  finite gradient is never called non-finite; other dtypes (bfloat16, float16) always take the general path's code.
- **The projection** g' = g − α·d is one ``torch._foreach`` pass before the inner optimizer's own ``step()`` (torch's
  fused kernel takes the gradient as it is); ``gac.compiled`` folds it into a compiled step instead.
- **Keep regime, gradient space, reference "prev"**: where the loop hands a fresh gradient tensor each step, that
  tensor becomes the reference (no copy); a write into it after the step is caught at the next step.
- **Momentum space**: m_t is formed chunk by chunk and its sums (and Σg²) are taken while the chunk is in cache.
- **Update space**: the general path's structure (Δ formed chunk by chunk, never stored) with the sums above.

The path serves exactly ``Adam``/``AdamW`` with every parameter on one device and ``differentiable=False``; otherwise
``gac.wrap`` warns once naming why and runs the general path.
"""

from __future__ import annotations

import math
import warnings
import weakref

import torch

from gac.control import ACT, KEEP
from gac.distributed import local_tensor
from gac.tracker import GradientAlignmentControl, _parts, real_parts

FUSED_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)
"""The optimizers the fused path serves (exact classes: a subclass may change what its step does)."""

SUM_CHUNK = 1 << 16
"""Elements per chunk of the sums and of m_t's formation, per CPU thread: a chunk of v and of d (256 KB each in
float32) stays in cache between the dot ⟨v, d⟩ and the dot ‖v‖². Larger chunks fall out of cache before the second
dot; smaller ones pay more calls. With T threads a chunk is T times larger (each thread's share the same)."""


ACCELERATOR_CHUNK = 1 << 22
"""Elements per chunk on an accelerator, where each chunk costs kernel launches: few chunks, scratch bounded."""


def chunk_numel(device: torch.device) -> int:
    """Elements per chunk on ``device``: ``SUM_CHUNK`` per CPU thread, or ``ACCELERATOR_CHUNK``."""
    return SUM_CHUNK * max(1, torch.get_num_threads()) if device.type == "cpu" else ACCELERATOR_CHUNK

FAST_DTYPES = (torch.float32, torch.float64)
"""Dtypes whose sums the fused path takes with BLAS dots; others use the general path's float64 sums."""

TINY_SQ = 2.0**-60
"""A tensor's squared norm below this (on this rank) is recomputed in float64: float32 products of entries below
~1e-19 underflow, and under this level they could matter (above it they are at most ~1e-11 of the sum)."""

_ALIAS = object()
"""``FusedAlignmentControl._swappable``'s answer for "keep: the gradient tensor itself becomes the reference"."""


def coupled_weight_decay(optimizer: torch.optim.Optimizer, group: dict) -> bool:
    """Whether Adam-like ``optimizer`` adds its weight decay λ·θ to the gradient in ``group`` (Adam) rather than
    decaying θ (AdamW). AdamW is told by its class: torch before 2.7 has no ``decoupled_weight_decay`` group key."""
    decoupled = isinstance(optimizer, torch.optim.AdamW) or group.get("decoupled_weight_decay", False)
    return group["weight_decay"] != 0 and not decoupled


def fused_unavailable(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> str | None:
    """Why the fused path cannot serve ``optimizer`` over ``params`` (one phrase), or None when it can."""
    if type(optimizer) not in FUSED_OPTIMIZERS:
        return f"{type(optimizer).__name__} is not torch.optim.Adam or torch.optim.AdamW"
    if any(group.get("differentiable", False) for group in optimizer.param_groups):
        return "differentiable=True (the fused path's buffers are not part of an autograd graph)"
    devices = {local_tensor(p).device for p in params}
    if len(devices) > 1:
        return f"parameters on several devices ({', '.join(sorted(map(str, devices)))})"
    return None


def make_tracker(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], cfg, process_group,
                 fused: bool | None) -> GradientAlignmentControl:
    """The tracker ``gac.wrap`` uses: the fused one when it applies (``fused`` None or True), else the general one,
    with one warning naming why when the fused path was asked for or the optimizer is Adam/AdamW."""
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"wrap(): fused must be True, False or None, got {fused!r}")
    why = None if fused is False else fused_unavailable(optimizer, params)
    if fused is not False and why is None:
        return FusedAlignmentControl(params, cfg, process_group, param_state=optimizer.state)
    if why is not None and (fused or isinstance(optimizer, FUSED_OPTIMIZERS)):
        warn_general(why)
    return GradientAlignmentControl(params, cfg, process_group, param_state=optimizer.state)


def warn_general(why: str) -> None:
    warnings.warn(f"gac.wrap: the fused path cannot apply ({why}); the general path runs (same results, slower)",
                  stacklevel=3)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.view(-1)


class FusedAlignmentControl(GradientAlignmentControl):
    """``GradientAlignmentControl`` with the fused path's sums and keep-regime reference (see the module docstring).

    Parameters that later join on another device (``add_param_group``) turn it into the general path, with one
    warning.
    """

    def __init__(self, *args, **kwargs):
        self.general: str | None = None  # why this tracker now runs the general path (None: fused)
        self._defer: str | None = None  # which writes ``apply`` leaves to its caller (gac.compiled): "act", "all"
        self.deferred: tuple | None = None  # the ``_write`` arguments of the writes left to the caller
        self._presummed: tuple[list, tuple] | None = None  # (vectors, sums) taken while momentum space formed them
        self._last_grads: dict[int, weakref.ref] = {}  # the .grad tensor each parameter had at the end of last step
        super().__init__(*args, **kwargs)

    def __getstate__(self) -> dict:
        """A copy (``copy.deepcopy``, pickle) without the weak references to last step's gradients (its next step
        copies the reference instead of keeping the gradient tensor: the same numbers) or sums in flight."""
        return {**super().__getstate__(), "_last_grads": {}, "_presummed": None, "deferred": None}

    def set_params(self, params: list[torch.Tensor]) -> None:
        super().set_params(params)
        self._last_grads.clear()
        devices = {local_tensor(p).device for p in params}
        if self.general is None and len(devices) > 1:
            self.general = f"parameters on several devices ({', '.join(sorted(map(str, devices)))})"
            warn_general(self.general)

    # -- the sums -----------------------------------------------------------------------------------
    def _fast(self, vector, ref) -> bool:
        """Whether the fused sums serve this tensor: a float32/float64 contiguous vector, a contiguous reference."""
        parts = _parts(vector)
        return (self.general is None and parts[0].dtype in FAST_DTYPES
                and all(t.is_contiguous() and t.dtype == parts[0].dtype for t in parts)
                and (ref is None or ref.is_contiguous()))

    def _chunks(self, vector, ref):
        """(v chunk, d chunk or None) flat views of at most ``chunk_numel`` elements; a Difference chunk is formed in
        scratch, a reference of another dtype (bfloat16) converted into scratch."""
        first = _parts(vector)[0]
        chunk = chunk_numel(first.device)
        size = min(first.numel(), chunk)
        pieces = [_flat(t).split(chunk) for t in _parts(vector)]
        refs = _flat(ref).split(chunk) if ref is not None else [None] * len(pieces[0])
        for parts, r in zip(zip(*pieces, strict=True), refs, strict=True):
            n = parts[0].numel()
            v = parts[0] if len(parts) == 1 else torch.sub(*parts, out=self._scratch(first, size, slot=1)[:n])
            if r is not None and r.dtype != v.dtype:
                r = self._scratch(first, size, slot=2)[:n].copy_(r)
            yield v, r

    def _sums64(self, vectors, refs, with_d_sq: bool) -> torch.Tensor:
        """Per tensor (⟨v,d⟩, ‖v‖², ‖d‖²) in float64, shape (3, tensors), as the general path's ``_sums64`` gives
        them: chunk dots in the input's dtype added in float64; a tensor whose fast sums cannot stand (see
        ``doubtful``) or that the fast sums do not serve is summed by the general path."""
        presummed, self._presummed = self._presummed, None
        if presummed is not None and len(presummed[0]) == len(vectors) and all(
                a is b for a, b in zip(presummed[0], vectors, strict=True)) and (presummed[2] or not with_d_sq):
            return presummed[1]
        fast = [self._fast(v, r) for v, r in zip(vectors, refs, strict=True)]
        terms = Terms(len(vectors))
        chunk = chunk_numel(_parts(vectors[0])[0].device)
        for tensor, (vector, ref, ok) in enumerate(zip(vectors, refs, fast, strict=True)):
            if not ok:
                continue
            if isinstance(vector, torch.Tensor) and (ref is None or ref.dtype == vector.dtype):
                terms.add_tensor(tensor, _flat(vector), None if ref is None else _flat(ref), with_d_sq, chunk)
            else:  # a Difference, or a reference of another dtype: formed or converted chunk by chunk in scratch
                for v, r in self._chunks(vector, ref):
                    terms.add(tensor, v, r, with_d_sq)
        sums = terms.sums(_parts(vectors[0])[0].device)
        redo = [t for t, ok in enumerate(fast) if not ok]
        redo += doubtful(sums, [r is not None for r in refs], with_d_sq, skip=set(redo))
        if redo:
            sums[:, redo] = super()._sums64([vectors[t] for t in redo], [refs[t] for t in redo], with_d_sq)
        return sums

    def presum(self, vectors: list, sums: torch.Tensor, with_d_sq: bool) -> None:
        """Per-tensor sums (3, tensors) of ``vectors`` (the next ``apply``'s, in its order) taken where the vectors
        were formed (momentum space's chunks, the compiled step's first loop)."""
        self._presummed = (vectors, sums, with_d_sq)

    def _cached_d_sq(self, indices: list[int], grads):
        """None while sums with ‖d‖² are presummed: those are the step's own (the compiled loops' float64 sums)."""
        if self._presummed is not None and self._presummed[2]:
            return None
        return super()._cached_d_sq(indices, grads)

    # -- keep regime: the gradient tensor becomes the reference ---------------------------------------------
    def _swappable(self, index: int, regime: int):
        if regime == KEEP and self._may_alias(index):
            return _ALIAS
        return super()._swappable(index, regime)

    def _may_alias(self, index: int) -> bool:
        """Keep with reference "prev" on a plain gradient tensor of the reference's dtype that the loop gave fresh
        this step (a different tensor from last step's), so nothing will write into it."""
        if self.general is not None or self.cfg.reference != "prev":
            return False
        param = self.params[index]
        grad = param.grad
        last = self._last_grads.get(index)
        if last is None or last() is grad:
            return False
        return (type(grad) is torch.Tensor and grad._base is None and not grad.is_complex() and grad.is_contiguous()
                and param.is_contiguous() and self._adopts(grad, self._reference_of(index)))

    def _swap_act(self, index: int, reference, coef: float) -> None:
        if reference is not _ALIAS:
            super()._swap_act(index, reference, coef)
            return
        grad = self.params[index].grad
        self._set_reference(index, grad)
        self._swapped[index] = (weakref.ref(grad), grad._version)

    # -- writes left to the caller (gac.compiled) ---------------------------------------------------------------
    def _write(self, indices: list[int], vectors: list, regime: int, coef: float, swap: bool, scratch: bool) -> None:
        if self._defer == "all" or (self._defer == "act" and regime == ACT):
            self.deferred = (list(indices), vectors, regime, coef, swap, scratch)
            return
        super()._write(indices, vectors, regime, coef, swap, scratch)

    def swap_written(self, index: int) -> None:
        """The buffer swap of ``_swap_act`` once g' = g − α·d has been written over d by someone else (the compiled
        step): ``.grad`` becomes the tensor holding g', the raw g the reference."""
        param = self.params[index]
        grad = param.grad
        param.grad = self._reference_of(index)
        self._set_reference(index, grad)
        self._swapped[index] = (weakref.ref(grad), grad._version)

    def apply(self, vectors: list | None = None, *args, defer: str | None = None, **kwargs):
        """The general path's ``apply``; ``defer`` = "act" (when GAC acts) or "all" leaves the writes of v' and the
        references to the caller: ``deferred`` then holds what ``_write`` was given (see ``gac.compiled``)."""
        self._defer, self.deferred = defer, None
        try:
            return super().apply(vectors, *args, **kwargs)
        finally:
            self._defer = None
            self._presummed = None
            if vectors is None:
                self._last_grads = {i: weakref.ref(p.grad) for i, p in enumerate(self.params) if p.grad is not None}


class Terms:
    """Chunk dots of (⟨v, d⟩, ‖v‖², ‖d‖²) with the tensor each belongs to, added per tensor in float64 by one
    stacked ``index_add_`` per dtype present: ⟨v, d⟩ first, reading both from memory; the squares then read the
    chunk from cache."""

    def __init__(self, tensors: int):
        self.tensors = tensors
        self.rows: dict[torch.dtype, tuple[list, list, list, list, list, list]] = {}

    def add(self, tensor: int, v: torch.Tensor, r: torch.Tensor | None, with_d_sq: bool) -> None:
        dots, dot_of, g_sqs, g_of, d_sqs, d_of = self.rows.setdefault(v.dtype, ([], [], [], [], [], []))
        if r is not None:
            dots.append(torch.dot(v, r))
            dot_of.append(tensor)
        g_sqs.append(torch.dot(v, v))
        g_of.append(tensor)
        if r is not None and with_d_sq:
            d_sqs.append(torch.dot(r, r))
            d_of.append(tensor)

    def add_tensor(self, tensor: int, v: torch.Tensor, r: torch.Tensor | None, with_d_sq: bool, chunk: int) -> None:
        """``add`` for each chunk of ``chunk`` elements of flat tensors ``v`` and ``r`` (the same dots, in the same
        order, with one Python call per tensor instead of a generator and a call per chunk)."""
        dots, dot_of, g_sqs, g_of, d_sqs, d_of = self.rows.setdefault(v.dtype, ([], [], [], [], [], []))
        pieces = (v,) if v.numel() <= chunk else v.split(chunk)
        r_pieces = (None,) * len(pieces) if r is None else (r,) if len(pieces) == 1 else r.split(chunk)
        dot = torch.dot
        for v_c, r_c in zip(pieces, r_pieces, strict=True):
            if r_c is not None:
                dots.append(dot(v_c, r_c))
            g_sqs.append(dot(v_c, v_c))
            if r_c is not None and with_d_sq:
                d_sqs.append(dot(r_c, r_c))
        count = len(pieces)
        g_of.extend([tensor] * count)
        if r is not None:
            dot_of.extend([tensor] * count)
            if with_d_sq:
                d_of.extend([tensor] * count)

    def sums(self, device) -> torch.Tensor:
        out = torch.zeros(3, self.tensors, dtype=torch.float64, device=device)
        for dots, dot_of, g_sqs, g_of, d_sqs, d_of in self.rows.values():
            # one index_add_ over the three rows' slots (each slot's terms added in the order they came)
            slots = dot_of + [self.tensors + t for t in g_of] + [2 * self.tensors + t for t in d_of]
            out.view(-1).index_add_(0, torch.tensor(slots, device=device),
                                    torch.stack(dots + g_sqs + d_sqs).to(torch.float64))
        return out


def doubtful(sums: torch.Tensor, has_ref: list[bool], with_d_sq: bool, skip: set[int] = frozenset()) -> list[int]:
    """Tensors whose fast sums cannot stand: one not finite, or ‖v‖² (or ‖d‖², when taken with a reference) below
    ``TINY_SQ`` — zero included, as a float32 square can underflow to it (a zero gradient costs one float64 pass;
    whether a tensor counts as having a gradient is decided by its ‖v‖² being nonzero)."""
    dots, g_sqs, d_sqs = sums.tolist()
    return [t for t, (dot, g_sq, d_sq, ref) in enumerate(zip(dots, g_sqs, d_sqs, has_ref, strict=True))
            if t not in skip and not (math.isfinite(dot) and math.isfinite(g_sq) and math.isfinite(d_sq)
                                      and g_sq >= TINY_SQ and not (with_d_sq and ref and d_sq < TINY_SQ))]


def fused_look_at_gradients(params: list[torch.Tensor], exact) -> tuple[bool, list[bool]]:
    """``gac.optim.look_at_gradients`` (whether every gradient entry is finite; per parameter whether its gradient
    has a nonzero entry) from Σg² per tensor by one BLAS dot instead of min/max reductions. A tensor whose Σg² is
    not finite (a NaN, an inf, or a finite gradient's overflow) or below ``TINY_SQ`` (zero, or tiny entries whose
    squares may underflow) is looked at by ``exact``."""
    grads = [None if p.grad is None else real_parts(local_tensor(p.grad)).reshape(-1) for p in params]
    fast = [i for i, g in enumerate(grads) if g is not None and g.numel() > 0 and g.dtype in FAST_DTYPES]
    has = [False] * len(params)
    if fast:
        squares = torch.stack([torch.dot(grads[i], grads[i]).to(torch.float64) for i in fast]).tolist()
        for i, square in zip(fast, squares, strict=True):
            has[i] = square >= TINY_SQ and square != float("inf")
    rest = [i for i, g in enumerate(grads) if g is not None and not has[i]]
    if not rest:
        return True, has
    finite, rest_has = exact([params[i] for i in rest])
    for i, value in zip(rest, rest_has, strict=True):
        has[i] = value
    return finite, has


@torch.no_grad()
def first_moments(wrapper, index_of: dict, exact_look) -> tuple[dict, dict, list[bool]]:
    """``GACOptimizer._first_moments`` for Adam/AdamW, and which parameters have a gradient (``has_gradient`` of
    ``gac.optim.look_at_gradients``), with the sums of m_t and Σg² taken from each chunk right after m_t is formed
    (in cache), instead of in further passes over m_t and g.

    The same kernels on the same elements as the general path (from the same state, m_t has the same bits); the sums
    go to the tracker for the ``apply`` that follows (``presum``). A tensor that cannot be chunked (not
    contiguous, complex) is formed whole, and then the ``apply`` takes the sums itself. A gradient whose Σg² is not
    finite or below ``TINY_SQ`` is looked at by ``exact_look`` (``look_at_gradients``).
    """
    tracker: FusedAlignmentControl = wrapper.gac
    indices = [i for i, p in enumerate(tracker.params) if p.grad is not None]
    position = {tracker.params[i]: k for k, i in enumerate(indices)}
    with_d_sq = tracker._cached_d_sq(indices, [local_tensor(tracker.params[i].grad) for i in indices]) is None
    moments, buffers, folded = {}, {}, tracker.general is None
    terms, grad_terms = Terms(len(indices)), Terms(len(indices))
    for group in wrapper.param_groups:
        beta1 = float(group["betas"][0])
        coupled = coupled_weight_decay(wrapper.optimizer, group)
        for p in group["params"]:
            if p.grad is None:
                continue
            grad, param = local_tensor(p.grad), local_tensor(p)
            buffer = wrapper.state.get(p, {}).get("exp_avg")
            buffer = None if buffer is None else local_tensor(buffer)
            out = tracker.take_spare(index_of[p], grad)
            moments[p], buffers[p] = out, (buffer, 1.0 / beta1)
            ref = tracker._reference_of(index_of[p])
            pieces = [grad, param, out] + ([] if buffer is None else [buffer])
            if grad.is_complex() or not all(t.is_contiguous() for t in pieces) or not tracker._fast(out, ref):
                form_moment(grad, param, buffer, out, group, beta1, coupled, scratch=None)
                folded = False
                continue
            chunk = chunk_numel(grad.device)
            chunks = [_flat(t).split(chunk) for t in pieces]
            scratch = tracker._scratch(grad, min(grad.numel(), chunk), slot=3)
            for (g_c, p_c, o_c, *b_c), (_, r_c) in zip(zip(*chunks, strict=True), tracker._chunks(out, ref),
                                                       strict=True):
                form_moment(g_c, p_c, b_c[0] if b_c else None, o_c, group, beta1, coupled, scratch[:g_c.numel()])
                terms.add(position[p], o_c, r_c, with_d_sq)
                grad_terms.add(position[p], g_c, None, False)
    has_gradient = [False] * len(tracker.params)
    if not moments:
        return moments, buffers, has_gradient
    device = next(iter(moments.values())).device
    if not folded:  # the apply takes the sums; which parameters have a gradient, from their Σg²
        return moments, buffers, fused_look_at_gradients(tracker.params, exact_look)[1]
    squares = grad_terms.sums(device)[1]
    vectors = [moments[tracker.params[i]] for i in indices]
    refs = [tracker._reference_of(i) for i in indices]
    sums = terms.sums(device)
    redo = doubtful(sums, [r is not None for r in refs], with_d_sq)
    if redo:
        sums[:, redo] = GradientAlignmentControl._sums64(tracker, [vectors[t] for t in redo], [refs[t] for t in redo],
                                                          with_d_sq)
    tracker.presum(vectors, sums, with_d_sq)
    unsure = [k for k, square in enumerate(squares.tolist()) if not TINY_SQ <= square < float("inf")]
    for k, index in enumerate(indices):
        has_gradient[index] = k not in unsure
    if unsure:
        _, exact = exact_look([tracker.params[indices[k]] for k in unsure])
        for k, value in zip(unsure, exact, strict=True):
            has_gradient[indices[k]] = value
    return moments, buffers, has_gradient


def form_moment(grad, param, buffer, out, group, beta1: float, coupled: bool, scratch) -> None:
    """m_t = β1·exp_avg + (1−β1)·g into ``out``, g with ``maximize`` and coupled weight decay: the general path's
    ops (``GACOptimizer._first_moments``), on a chunk when ``scratch`` (a chunk-sized buffer) is given."""
    if group.get("maximize", False):
        grad = torch.neg(grad, out=scratch) if scratch is not None else -grad
    if coupled:
        grad = (torch.add(grad, param, alpha=group["weight_decay"], out=scratch) if scratch is not None
                else grad.add(param, alpha=group["weight_decay"]))
    if buffer is None:
        torch.mul(grad, 1.0 - beta1, out=out)
    else:
        torch.lerp(buffer, grad, 1.0 - beta1, out=out)


__all__ = ["FusedAlignmentControl", "fused_unavailable", "make_tracker", "first_moments", "fused_look_at_gradients",
           "SUM_CHUNK"]
