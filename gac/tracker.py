"""GradientAlignmentControl: GAC over a model's parameters, editing ``.grad`` in place.

A thin per-parameter shell over the pure core: the decision is ``gac.control.decide`` (as Python floats:
``decide_scalar``, the same bits) and the adaptive threshold's statistics advance with
``gac.state.observe_threshold``, exactly as in ``gac.update``. What it adds is memory: the reference is one buffer
per parameter (optionally bfloat16), the three sums are float64 products and sums (as every cosine in gac):
``gac.cosine64.dot64`` for a tensor of at most one chunk (its bits), float64 ``torch.dot`` of reused chunk buffers
for larger ones (plus one all_reduce when gradients are sharded), and g' = s·g − α·d is written into ``.grad`` chunk
by chunk. A non-finite entry shows as a non-finite sum, so finiteness costs no pass of its own.
"""

from __future__ import annotations

import math
import weakref
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch

from gac.config import GACConfig, check_config, reference_dtype_for
from gac.control import ACT, SKIP, NonFiniteGradientError, decide_scalar, regime_name
from gac.cosine64 import dot64
from gac.distributed import all_reduce_stats, check_process_group, infer_process_group, local_tensor
from gac.state import current_threshold, init_threshold_stats, observe_threshold

REFERENCE_KEY = "gac_reference"
"""Key of the reference direction in a parameter's state dict (``optimizer.state[p]`` under ``gac.wrap``)."""

CHUNK_NUMEL = 1 << 17
"""Elements per chunk of the float64 sums and of the in-place update (the scratch buffers' size): a chunk of g, d and
g' stays in cache between the passes over it; larger chunks pay fewer torch calls (``benchmarks.gac_overhead``)."""


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


def check_reference_shape(index: int, reference: torch.Tensor | None, param: torch.Tensor) -> None:
    """One-line ValueError when a saved reference does not have parameter ``index``'s shape
    (a DTensor reference is compared with the whole parameter, a plain one with the local shard)."""
    if reference is None:
        return
    expected = param.shape if getattr(reference, "device_mesh", None) is not None else local_tensor(param).shape
    if tuple(reference.shape) != tuple(expected):
        raise ValueError(f"GAC state does not fit this model: reference {index} has shape "
                         f"{tuple(reference.shape)}, parameter {index} has {tuple(expected)}")


def check_not_meta(named_params) -> None:
    """One-line ValueError naming the first of ``(label, parameter)`` whose storage is on the meta device (shapes
    only, no values: GAC cannot measure anything, and torch would fail later inside the step)."""
    for label, param in named_params:
        if param.is_meta or local_tensor(param).is_meta:
            raise ValueError(f"GAC: {label} (shape {tuple(param.shape)}) is on the meta device (no values); "
                             f"materialise and initialise the model (e.g. model.to_empty(device=...), then load or "
                             f"init its weights) before building the optimizer GAC controls")


class Difference(NamedTuple):
    """The vector after − before, given as its two tensors (update space: θ after the inner step, θ before it).

    The tracker forms it chunk by chunk and never stores it whole; acting on it writes ``after`` = before + v'
    (see ``GradientAlignmentControl._apply_to_tensor``)."""

    after: torch.Tensor
    before: torch.Tensor


def _parts(vector) -> tuple[torch.Tensor, ...]:
    return tuple(vector) if isinstance(vector, Difference) else (vector,)


def _whole(vector) -> torch.Tensor:
    """The vector as one tensor (a Difference is formed: an allocation, for the rare paths only)."""
    return vector.after - vector.before if isinstance(vector, Difference) else vector


def _real_parts(vector):
    if isinstance(vector, Difference):
        return Difference(real_parts(vector.after), real_parts(vector.before))
    return real_parts(vector)


def real_parts(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as the real tensor of its real and imaginary parts (shape (..., 2), a view); else itself."""
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """True (a 0-dim bool tensor) when every entry of every tensor is finite."""
    return torch.stack([torch.isfinite(t).all() for t in tensors]).all() if tensors else torch.tensor(True)


class GradientAlignmentControl:
    """Keeps GAC's reference direction for ``params`` and applies GAC to their ``.grad`` in place.

    Call ``apply()`` after ``backward()`` (and before clipping and ``optimizer.step()``). With
    sharded gradients pass the sharding ``process_group`` (DTensor gradients from FSDP2 on a 1-D
    mesh are detected); every rank then takes the same decision from the summed statistics.
    """

    def __init__(self, params: Iterable[torch.Tensor], cfg: GACConfig | None = None, process_group=None,
                 param_state: dict | None = None):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("GradientAlignmentControl needs at least one parameter that requires grad")
        self.cfg = check_config(cfg, "GradientAlignmentControl")
        check_not_meta((f"parameter {index}", p) for index, p in enumerate(self.params))
        for param in self.params:  # a complex parameter with a bfloat16 reference is refused here, not mid-run
            reference_dtype_for(param.dtype, self.cfg.reference_dtype)
        self.process_group = check_process_group(process_group)
        # Per-parameter state (the reference under REFERENCE_KEY); gac.wrap passes optimizer.state.
        self.param_state = param_state if param_state is not None else defaultdict(dict)
        self.threshold_stats = init_threshold_stats(self.cfg)
        self.step = 0
        self.skipped_nonfinite = 0
        self.last_report: GACReport | None = None
        self._scratch_buffers: dict = {}
        self._spare: dict[int, torch.Tensor] = {}  # parameter-sized buffers kept between steps (take_spare)
        self._last_g_sq: tuple[list[int], list[float]] | None = None  # (indices, local ‖g‖²) of the last step
        self._swapped: dict[int, tuple] = {}  # index -> (weakref, version) of a former .grad that became the reference
        self._layout_checked: int | None = None  # the parameter count the ranks were found to share (_check_layout)

    def __getstate__(self) -> dict:
        """What a copy (``copy.deepcopy``, pickle) needs to step as this one would: without the scratch and spare
        buffers (a speed-up, rebuilt on use), the cached ‖d‖² (recomputed: the same numbers) and the weak
        references of the buffer-swap check. A process group cannot be copied: one line."""
        if self.process_group is not None:
            raise TypeError("GAC: an optimizer wrapped with a process_group cannot be copied or pickled (a process "
                            "group is not copyable); save and load its state_dict() instead")
        return {**self.__dict__, "_scratch_buffers": {}, "_spare": {}, "_last_g_sq": None, "_swapped": {}}

    @property
    def reference(self) -> list[torch.Tensor | None]:
        """The reference direction, one rank-local tensor per parameter (None before its first gradient)."""
        return [self._reference_of(index) for index in range(len(self.params))]

    def _reference_of(self, index: int) -> torch.Tensor | None:
        state = self.param_state.get(self.params[index])  # .get: a defaultdict's missing entry is not created
        stored = None if state is None else state.get(REFERENCE_KEY)
        return None if stored is None else local_tensor(stored)

    def _set_reference(self, index: int, local: torch.Tensor | None) -> None:
        param = self.params[index]
        if local is None:
            self.param_state.get(param, {}).pop(REFERENCE_KEY, None)
            return
        mesh = getattr(param, "device_mesh", None)
        if mesh is not None:  # sharded like its parameter, so distributed checkpoints save every shard
            from torch.distributed.tensor import DTensor
            local = DTensor.from_local(local, mesh, param.placements, run_check=False)
        self.param_state[param][REFERENCE_KEY] = local

    def set_params(self, params: list[torch.Tensor]) -> None:
        """Control exactly ``params`` from now on (``gac.wrap`` calls this when the optimizer's parameters change).

        A parameter that joins starts with a fresh reference (none: zero, as at init), so its first gradient adds
        to ‖g‖² but not to ⟨g, d⟩; one that leaves loses its reference.
        """
        staying = {id(p) for p in params}
        for param in self.params:
            if id(param) not in staying and param in self.param_state:
                self.param_state[param].pop(REFERENCE_KEY, None)
        self.params = list(params)
        self._last_g_sq = None  # indices into the old list
        self._spare.clear()

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self, with_reference: bool = True) -> dict:
        """Step counts, the threshold rule's statistics and (unless held elsewhere) the reference."""
        state = {"step": self.step, "skipped_nonfinite": self.skipped_nonfinite,
                 "threshold_stats": [t.clone() for t in self.threshold_stats]}
        if with_reference:
            state["reference"] = [None if r is None else r.clone() for r in self.reference]
        return state

    def load_state_dict(self, state: dict) -> None:
        """Load a state of ``state_dict``; shapes are checked."""
        stats = self._loaded_threshold_stats(state)
        references = state.get("reference")
        if references is not None:
            self._check_reference_shapes(references)
        self.step, self.skipped_nonfinite = int(state["step"]), int(state["skipped_nonfinite"])
        self._last_g_sq = None
        self.threshold_stats = stats
        if references is not None:
            for index, ref in enumerate(references):
                self._set_reference(index, None if ref is None else ref.detach().clone())

    def _check_reference_shapes(self, references: list) -> None:
        if len(references) != len(self.params):
            raise ValueError(f"GAC state has {len(references)} reference tensors, "
                             f"this model has {len(self.params)} parameters")
        for index, ref in enumerate(references):
            check_reference_shape(index, ref, self.params[index])

    def _loaded_threshold_stats(self, state: dict) -> tuple[torch.Tensor, ...]:
        fresh = init_threshold_stats(self.cfg)
        saved = tuple(torch.as_tensor(t) for t in state.get("threshold_stats", ()))
        if len(saved) != len(fresh) or any(s.shape != f.shape for s, f in zip(saved, fresh, strict=False)):
            raise ValueError(f"GAC state's threshold statistics ({len(saved)} tensors) do not fit "
                             f"threshold={self.cfg.threshold!r}; load it with the GACConfig it was saved with")
        return tuple(s.to(f.dtype) for s, f in zip(saved, fresh, strict=True))

    def restart_reference(self) -> None:
        """Forget the reference direction (as at init): the next step is measured against nothing (cosine NaN)."""
        for index in range(len(self.params)):
            self._set_reference(index, None)
        self._last_g_sq = None

    def reference_bytes(self) -> int:
        """Memory held by the reference direction on this rank."""
        return sum(r.numel() * r.element_size() for r in self.reference if r is not None)

    def scratch_bytes(self) -> int:
        """Memory of the parameter-sized buffers kept between steps for ``gac.wrap`` (see ``take_spare``)."""
        return sum(t.numel() * t.element_size() for t in self._spare.values())

    # -- the step ---------------------------------------------------------------------------------
    def take_spare(self, index: int, like: torch.Tensor) -> torch.Tensor:
        """A contiguous buffer shaped like ``like`` for parameter ``index``: the one kept from an earlier step when
        it fits, else a new one. Reusing it matters on CPU, where a fresh parameter-sized allocation costs page
        faults, several times a copy into an existing buffer."""
        spare = self._spare.pop(index, None)
        if (spare is not None and spare.shape == like.shape and spare.dtype == like.dtype
                and spare.device == like.device and spare.is_contiguous()):
            return spare
        return torch.empty(like.shape, dtype=like.dtype, device=like.device)

    def keep_spare(self, index: int, buffer: torch.Tensor) -> None:
        """Keep ``buffer`` (no longer used by anything else) for ``take_spare`` at a later step."""
        self._spare[index] = buffer

    def _scratch(self, like: torch.Tensor, numel: int, slot: int = 0, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A reused flat buffer (device of ``like``, ``dtype`` or like's) of at least ``numel`` elements, per slot."""
        key = (dtype or like.dtype, like.device, slot)
        buffer = self._scratch_buffers.get(key)
        if buffer is None or buffer.numel() < numel:
            buffer = self._scratch_buffers[key] = torch.empty(numel, dtype=key[0], device=like.device)
        return buffer if buffer.numel() == numel else buffer[:numel]  # a slice is an op too

    @staticmethod
    def _chunked(vector) -> bool:
        """Whether the vector (a tensor or a Difference) is summed and written in flat chunks."""
        first = vector[0] if isinstance(vector, Difference) else vector
        return first.numel() > CHUNK_NUMEL and all(t.is_contiguous() for t in _parts(vector))

    def _pieces(self, vector, ref: torch.Tensor):
        """Matching pieces (views) of the vector and ref: flat chunks of CHUNK_NUMEL elements, or the whole tensor
        when it is at most one chunk or not contiguous. A Difference comes as (after, before) pieces."""
        if not self._chunked(vector):
            shape = vector[0].shape if isinstance(vector, Difference) else vector.shape
            yield vector, ref.view(shape)
            return
        # split: all the chunk views in one call (slicing each chunk would be one more op per chunk)
        r_chunks = ref.view(-1).split(CHUNK_NUMEL)
        if isinstance(vector, Difference):
            chunks = (Difference(a, b) for a, b in zip(vector.after.view(-1).split(CHUNK_NUMEL),
                                                       vector.before.view(-1).split(CHUNK_NUMEL), strict=True))
        else:
            chunks = vector.view(-1).split(CHUNK_NUMEL)
        yield from zip(chunks, r_chunks, strict=True)

    def _formed(self, piece) -> torch.Tensor:
        """The vector piece itself, or for a Difference piece after − before (a chunk goes to scratch)."""
        if not isinstance(piece, Difference):
            return piece
        after, before = piece
        if after.dim() == 1 and after.numel() <= CHUNK_NUMEL:
            return torch.sub(after, before, out=self._scratch(after, after.numel(), slot=1))
        return after - before

    def _sums64(self, vectors, refs, with_d_sq: bool) -> torch.Tensor:
        """Per tensor (⟨v,d⟩, ‖v‖², ‖d‖²) in float64 (products exact, sums in float64), shape (3, tensors); ‖d‖²
        left 0 unless ``with_d_sq``, ⟨v,d⟩ and ‖d‖² 0 where there is no reference.

        A tensor of at most CHUNK_NUMEL elements (or a non-contiguous one) is summed with ``dot64``: ``cosine64``'s
        own bits. A larger one is summed chunk by chunk: each chunk converted into a reused float64 buffer (no
        allocation) and reduced with ``torch.dot`` (a float64 dot: other summation order than ``dot64``'s
        multiply-then-sum, agreeing to float64 rounding, and no temporary for the products); its chunks' terms are
        added in order, 0 + t₁ + t₂ + …, by one ``cumsum`` (sequential on CPU) rather than one addition op per term.
        """
        device = _parts(vectors[0])[0].device
        zero = torch.zeros((), dtype=torch.float64, device=device)
        per_tensor = []
        for vector, ref in zip(vectors, refs, strict=True):
            dots, g_sqs, d_sqs = [], [], []
            chunked = self._chunked(vector)
            if chunked:
                first = _parts(vector)[0]
                g_buffer = self._scratch(first, min(first.numel(), CHUNK_NUMEL), slot=0, dtype=torch.float64)
                r_buffer = self._scratch(first, min(first.numel(), CHUNK_NUMEL), slot=1, dtype=torch.float64)
            for piece, r_piece in self._pieces(vector, _parts(vector)[0] if ref is None else ref):
                piece = self._formed(piece)
                if chunked:
                    size = piece.numel()
                    g64 = (g_buffer if size == g_buffer.numel() else g_buffer[:size]).copy_(piece)
                    dot_fn = torch.dot
                else:
                    g64, dot_fn = piece.reshape(-1).to(torch.float64), dot64
                g_sqs.append(dot_fn(g64, g64))
                if ref is not None:
                    r64 = ((r_buffer if size == r_buffer.numel() else r_buffer[:size]).copy_(r_piece)
                           if chunked else r_piece.reshape(-1).to(torch.float64))
                    dots.append(dot_fn(g64, r64))
                    if with_d_sq:
                        d_sqs.append(dot_fn(r64, r64))
            per_tensor.extend(terms[0] if len(terms) == 1 else torch.stack([zero, *terms]).cumsum(0)[-1] if terms
                              else zero for terms in (dots, g_sqs, d_sqs))
        return torch.stack(per_tensor).view(-1, 3).t()

    def _local_stats(self, indices: list[int], vectors, refs, cached_d_sq: list[float] | None,
                     has_gradient: list[bool] | None) -> list[float]:
        """This rank's [non-finite flags of v and d, then per parameter ⟨v,d⟩, ‖v‖², ‖d‖² and whether it has a
        gradient (1 or 0)]: 2 + 4·len(params) float64 numbers (Python floats), for one all_reduce.

        ``cached_d_sq``, when given, is this rank's per-tensor ‖d‖² already known (see ``_cached_d_sq``).
        ``has_gradient`` (per parameter) tells which parameters received a gradient; None: those whose v is not zero
        (gradient space, where v is the gradient). The sums tell finiteness (a NaN or inf entry makes ‖v‖² or
        ⟨v,d⟩ non-finite); the entries are looked at only when a sum is not finite, since a finite vector's sum may
        still overflow.
        """
        dot, g_sq, d_sq = self._sums64(vectors, refs, with_d_sq=cached_d_sq is None).tolist()
        if cached_d_sq is not None:
            d_sq = cached_d_sq
        finite = math.isfinite
        nonfinite = 0.0 if all(map(finite, g_sq)) else float(not all_finite([_whole(v) for v in vectors]))
        # ‖d‖² may come from the cache (last step's ‖g‖²), so a non-finite ⟨g, d⟩ also sends us to look at d.
        suspect = not (all(map(finite, d_sq)) and all(map(finite, dot)))
        reference_nonfinite = float(not all_finite([r for r in refs if r is not None])) if suspect else 0.0
        has = ([float(value > 0) for value in g_sq] if has_gradient is None
               else [float(has_gradient[i]) for i in indices])
        count = len(self.params)
        local = [nonfinite, reference_nonfinite] + [0.0] * (4 * count)
        for row, values in enumerate((dot, g_sq, d_sq, has)):
            start = 2 + row * count
            for index, value in zip(indices, values, strict=True):
                local[start + index] = value
        return local

    def _check_layout(self, group, device) -> None:
        """One line unless every rank of ``group`` holds the same number of parameter tensors: the step's all_reduce
        sums the ranks' partial sums parameter by parameter, so the ranks must hold shards of the same parameters in
        the same order (FSDP's layout). Checked once per parameter list, with one small all_reduce."""
        count = float(len(self.params))
        total, squares, ranks = all_reduce_stats(torch.tensor([count, count * count, 1.0], dtype=torch.float64,
                                                              device=device), group).tolist()
        if ranks * squares != total * total:  # Σn² · W = (Σn)² only when every rank's n is the same
            raise ValueError(f"GAC: the ranks of the process group hold different numbers of parameter tensors "
                             f"(this rank {len(self.params)}, {total / ranks:g} on average); every rank must hold "
                             f"shards of the same parameters in the same order, as FSDP gives")
        self._layout_checked = len(self.params)

    def _cached_d_sq(self, indices: list[int], grads) -> torch.Tensor | None:
        """This rank's per-tensor ‖d‖² without a pass over d, when d is exactly last step's raw gradient.

        With reference="prev" stored in the gradient's dtype, d is a copy of the previous raw g whose
        ‖g‖² was computed then (same tensors, same kernel: the same number). Only valid when the same
        parameters had gradients at both steps, all of them took part, and nothing replaced the reference since.
        """
        cached = self._last_g_sq
        if cached is None or cached[0] != indices or self.cfg.reference != "prev":
            return None
        if self.cfg.reference_dtype is not None and any(_parts(g)[0].dtype != self.cfg.reference_dtype
                                                        for g in grads):
            return None
        return cached[1]

    def _new_reference(self, grad: torch.Tensor) -> torch.Tensor:
        # Contiguous whatever the gradient's layout, so that chunked views always work.
        return torch.zeros(grad.shape, dtype=reference_dtype_for(grad.dtype, self.cfg.reference_dtype),
                           device=grad.device)

    def _update_reference_piece(self, ref: torch.Tensor, grad: torch.Tensor) -> None:
        if self.cfg.reference == "prev":
            ref.copy_(grad)
        else:
            ref.lerp_(grad.to(ref.dtype), 1.0 - self.cfg.ema_decay)

    def _adopts(self, vector, reference: torch.Tensor | None) -> bool:
        """Whether a scratch vector can itself become the new "prev" reference (same storage dtype, contiguous)."""
        return (self.cfg.reference == "prev" and isinstance(vector, torch.Tensor) and vector.is_contiguous()
                and reference_dtype_for(vector.dtype, self.cfg.reference_dtype) == vector.dtype
                and (reference is None or reference.shape == vector.shape))

    def _apply_to_tensor(self, index: int, vector, regime: int, coef: float, scratch: bool = False) -> None:
        """v ← s·v − α·d and d ← update(d, raw v) for one tensor, chunk by chunk, with no allocation.

        A ``Difference(after, before)`` is the step v = after − before, formed chunk by chunk and never stored
        whole: acting writes after ← before + v' = after − α·d; a skip leaves ``after`` to the caller (update space
        restores θ_before, as it does for a non-finite step). With ``scratch`` the vector
        is the caller's throwaway buffer: v' is not written, and with reference "prev" the buffer itself becomes
        the reference (no copy; the old reference is kept for ``take_spare``).
        """
        reference = self._reference_of(index)
        if scratch and self._adopts(vector, reference):
            self._set_reference(index, vector)
            if reference is not None:
                self.keep_spare(index, reference)
            return
        if reference is None:  # the reference starts at zero, as in gac.init
            self._set_reference(index, self._new_reference(_parts(vector)[0]))
            reference = self._reference_of(index)
        if scratch:  # no v' to form: d ← update(d, v) in one pass, and the buffer is kept for the next step
            self._update_reference_piece(real_parts(reference), _whole(_real_parts(vector)))
            self.keep_spare(index, vector)
            return
        vector, reference = _real_parts(vector), real_parts(reference)
        if regime != ACT and isinstance(vector, torch.Tensor) and reference.dtype == vector.dtype:
            # no v' to form: one pass, nothing to chunk
            self._update_reference_piece(reference, vector)
            if regime == SKIP:
                vector.zero_()
            return
        for piece, r_piece in self._pieces(vector, reference):
            if isinstance(piece, Difference):
                after, before = piece
                step = self._formed(piece)  # the raw step, before ``after`` moves
                if regime == ACT:
                    after.add_(r_piece.to(after.dtype), alpha=-coef)
                self._update_reference_piece(r_piece, step)
            elif regime == ACT:
                # g' goes to scratch first: the reference must take the raw g, exactly.
                projected = (self._scratch(piece, piece.numel()) if piece.dim() == 1
                             else torch.empty_like(piece))
                torch.sub(piece, r_piece, alpha=coef, out=projected)
                self._update_reference_piece(r_piece, piece)
                piece.copy_(projected)
            else:
                self._update_reference_piece(r_piece, piece)
                if regime == SKIP:
                    piece.zero_()

    def _swappable(self, index: int, regime: int) -> torch.Tensor | None:
        """The reference to write g' over when acting on parameter ``index``'s ``.grad`` can swap buffers instead of
        copying (else None): g' = g − α·d goes into d's storage (one pass: read g and d, write g'), the tensor holding g
        becomes the new reference (exactly the raw g, as "prev" asks; ``_adopts``) and ``.grad`` the tensor holding
        g'. Only for a plain tensor that owns its storage (not a DTensor, not a view into a bucket such as DDP's
        ``gradient_as_bucket_view``), and a plain contiguous reference of its dtype and device."""
        if regime != ACT:
            return None
        param = self.params[index]
        grad, reference = param.grad, self.param_state.get(param, {}).get(REFERENCE_KEY)
        if (type(grad) is not torch.Tensor or type(reference) is not torch.Tensor or grad._base is not None
                or grad.is_complex() or not param.is_contiguous() or not self._adopts(grad, reference)):
            return None
        fits = reference.is_contiguous() and reference.dtype == grad.dtype and reference.device == grad.device
        return reference if fits else None

    def _swap_act(self, index: int, reference: torch.Tensor, coef: float) -> None:
        """Acting by swapping buffers (see ``_swappable``): the same values as the chunked path (g' = g − α·d by the
        same elementwise op, the reference exactly g), one pass over the parameter instead of three."""
        param = self.params[index]
        grad = param.grad
        torch.sub(grad, reference, alpha=coef, out=reference)
        param.grad = reference
        self._set_reference(index, grad)
        self._swapped[index] = (weakref.ref(grad), grad._version)

    def _check_swapped(self) -> None:
        """One-line ValueError when a tensor that was ``.grad`` before a swapping step (and so became the reference)
        was written since: the caller kept it and wrote a new gradient into it, which would corrupt the reference."""
        for index, (tensor_ref, version) in self._swapped.items():
            tensor = tensor_ref()
            if tensor is not None and tensor is self._reference_of(index) and tensor._version != version:
                raise ValueError(f"GAC: parameter {index}'s gradient tensor from the last step was written after it "
                                 f"became GAC's reference (gac.wrap swaps .grad buffers in gradient space); re-read "
                                 f"p.grad each step instead of keeping the tensor, or set "
                                 f"optimizer.swap_grads = False")
        self._swapped.clear()

    def _write(self, indices: list[int], vectors: list, regime: int, coef: float, swap: bool, scratch: bool) -> None:
        """v' and the new reference for each controlled tensor (``_apply_to_tensor`` or the buffer swap)."""
        for index, vector in zip(indices, vectors, strict=True):
            reference = self._swappable(index, regime) if swap else None
            if reference is not None:
                self._swap_act(index, reference, coef)
            else:
                self._apply_to_tensor(index, vector, regime, coef, scratch=scratch)

    @torch.no_grad()
    def apply(self, vectors: list | None = None, allow_action: bool = True, before_write=None,
              scratch_vectors: bool = False, swap_grads: bool = False,
              has_gradient: list[bool] | None = None) -> GACReport:
        """Apply GAC to the current ``.grad`` of the parameters (in place) and return the report.

        A parameter without a gradient at this step (``.grad`` None or all zeros on every rank) takes no part: not
        counted in the cosine, its vector not written, its reference kept.

        ``vectors`` (one per parameter, None where it has no value this step) replaces ``.grad`` as the
        controlled vector: ``gac.wrap`` passes the proposed step Δθ ("update" space) or the first moment
        ("momentum" space), with ``has_gradient`` (per parameter: whether its gradient on this rank has a nonzero
        entry), since there the vector of a parameter without a gradient need not be zero. ``allow_action=False``
        measures and updates the reference but keeps the vector (regime "keep"). ``before_write(regime, coef,
        taking_part)``, when given, runs after the decision and before any vector or reference is written (so it
        still sees the old reference): v' = v − coef·d on the parameters (indices) in ``taking_part``.
        A vector may be a ``Difference(after, before)`` (update space): v = after − before; acting writes
        after ← before + v', a skip (or a non-finite step) leaves ``after`` for the caller to restore.
        ``scratch_vectors=True``: the vectors are the caller's throwaway buffers; v' is not written, and with
        reference "prev" each buffer becomes the new reference (no copy).
        ``swap_grads=True`` (``gac.wrap`` in gradient space, which owns the step): when acting on ``.grad``,
        ``.grad`` may be replaced by another tensor holding g' (the values are those of the in-place path; see
        ``_swappable``), so a tensor taken from ``.grad`` before the call may keep the raw g.
        """
        swap = swap_grads and vectors is None and not scratch_vectors
        if self._swapped:
            self._check_swapped()
        source = [p.grad for p in self.params] if vectors is None else list(vectors)
        if len(source) != len(self.params):
            raise ValueError(f"GAC: {len(source)} vectors given for {len(self.params)} parameters")
        if any(v is not None and any(t.is_sparse for t in _parts(v)) for v in source):
            raise ValueError("GAC does not support sparse gradients (e.g. nn.Embedding(sparse=True)): "
                             "use dense gradients, or leave those parameters out of the optimizer GAC wraps")
        entries = [(i, Difference(*map(local_tensor, v)) if isinstance(v, Difference) else local_tensor(v))
                   for i, v in enumerate(source) if v is not None]
        if not entries:
            raise ValueError(f"GAC step {self.step}: no parameter has a gradient; call backward() first")
        indices, vectors = [i for i, _ in entries], [g for _, g in entries]
        all_refs = self.reference
        # Complex tensors are measured in their real view: ⟨g, d⟩ = Re Σ g·conj(d) (see gac.control.real_view).
        grads, refs = [_real_parts(g) for g in vectors], [None if all_refs[i] is None else real_parts(all_refs[i])
                                                           for i in indices]
        group = self.process_group if self.process_group is not None else infer_process_group(
            [p.grad for p in self.params if p.grad is not None] + [t for v in source if v is not None
                                                                   for t in _parts(v)])
        if group is not None and self._layout_checked != len(self.params):
            self._check_layout(group, _parts(grads[0])[0].device)
        local = self._local_stats(indices, grads, refs, self._cached_d_sq(indices, grads), has_gradient)
        self._last_g_sq = None  # valid again only once this step's references are written
        count = len(self.params)
        local_g_sq = [local[2 + count + i] for i in indices]
        reduced = local if group is None else all_reduce_stats(
            torch.tensor(local, dtype=torch.float64, device=_parts(grads[0])[0].device), group).tolist()
        nonfinite, reference_nonfinite = reduced[:2]
        takes = [value > 0 for value in reduced[2 + 3 * count:]]
        # Summed over the parameters that took part, in order (0 + t₁ + t₂ + …).
        totals = []
        for row in range(3):
            total = 0.0
            for value, taking in zip(reduced[2 + row * count:2 + (row + 1) * count], takes, strict=True):
                total += value if taking else 0.0
            totals.append(total)
        dot, g_sq, d_sq = totals
        taking_part = {i for i in indices if takes[i]}
        threshold = float(current_threshold(self.cfg, self.threshold_stats))

        if nonfinite > 0 or reference_nonfinite > 0:
            what = "gradient" if nonfinite > 0 else "GAC reference (the stored previous direction)"
            if self.cfg.nonfinite == "raise":
                raise NonFiniteGradientError(f"GAC: non-finite {what} at step {self.step} "
                                             f"(NaN or inf in some parameter's tensor); nothing was changed")
            for vector in grads:  # g' = 0; a Difference (a step already taken) is the caller's to undo
                if not isinstance(vector, Difference):
                    vector.zero_()
            if reference_nonfinite > 0:  # a broken reference would skip every later step: start it anew
                self.restart_reference()
            self.skipped_nonfinite += 1
            report = GACReport(self.step, float("nan"), "skip", 0.0, float("nan"), 0.0, threshold, nonfinite=True)
            self.step += 1
            self.last_report = report
            return report

        # c ≤ 1, so τ = 1 without skipping always keeps (allow_action=False)
        decision = (decide_scalar(dot, g_sq, d_sq, self.cfg, threshold, self.cfg.skip_threshold) if allow_action
                    else decide_scalar(dot, g_sq, d_sq, self.cfg, 1.0))
        regime, coef = decision.regime, decision.ref_coef
        if decision.norm_before <= self.cfg.eps:  # no direction (cosine NaN, keep): references keep theirs
            taking_part = set()
        if before_write is not None:
            before_write(regime, coef, taking_part)
        written = [(i, v) for i, v in zip(indices, vectors, strict=True) if i in taking_part]
        self._write([i for i, _ in written], [v for _, v in written], regime, coef, swap, scratch_vectors)
        if len(written) == len(indices):  # every reference now holds this step's vector
            self._last_g_sq = (indices, local_g_sq)
        if scratch_vectors:  # the caller's buffers of parameters that took no part are kept for later steps
            for index, vector in zip(indices, vectors, strict=True):
                if index not in taking_part:
                    self.keep_spare(index, vector)
        if regime == SKIP:
            # A skip changes nothing the next vector is made from (θ, the stored moment; in update space the
            # optimizer's momentum proposes the skipped step again): measured against the skipped vector every later
            # step would be skipped. The reference restarts (as at init), so the next step is kept.
            self.restart_reference()

        if not isinstance(self.cfg.threshold, float):  # an adaptive rule observes the cosine
            self.threshold_stats = observe_threshold(self.cfg, self.threshold_stats,
                                                     torch.tensor(decision.cosine, dtype=torch.float64))
        report = GACReport(self.step, decision.cosine, regime_name(regime, self.cfg.mode), decision.parallel_scale,
                           decision.norm_before, decision.norm_after, threshold)
        self.step += 1
        self.last_report = report
        return report
