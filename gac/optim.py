"""wrap(optimizer, cfg): an optimizer whose step() applies GAC where ``cfg.space`` says.

The wrapper shares ``param_groups`` and ``state`` with the optimizer it wraps, so schedulers, clipping and checkpoint
code see an ordinary ``torch.optim.Optimizer``. GAC's state lives in ``optimizer.state``-shaped entries: the reference
under each parameter's ``"gac_reference"``, and (in ``state_dict()`` only) the counts and threshold statistics as
plain numbers under the first parameter's ``"gac_counters"``.

Spaces (``GACConfig.space``), with v the controlled vector and d its reference:

- ``"gradient"``: v = ``.grad``, controlled before the inner step; skip = no inner step. Acting swaps buffers
  (``GACOptimizer.swap_grads``): ``.grad`` becomes the tensor holding g' and the one that held g the reference.
- ``"update"``: v = Δ = θ_after − θ_before (weight decay included), θ = θ_after − α·d (skip: θ = θ_before). θ_before
  is one buffer reused between steps; Δ is formed chunk by chunk (``gac.tracker.Difference``), never stored whole.
- ``"momentum"``: v = the first moment m_t the inner step is about to form (Adam: β1·exp_avg + (1−β1)·g; SGD:
  μ·buf + (1−δ)·g). Acting shifts the stored buffer so the inner step forms m' = m − α·d (exp_avg −= α·d/β1, SGD:
  buf −= α·d/μ); a step where some parameter has no first moment yet measures but keeps.

A skip restarts the reference in every space, so the next step is applied: a skip changes nothing the next vector is
made from, and measured against the skipped vector every later step would be skipped. Which parameters take part,
what is refused, ``torch.compile`` and copies: docs/usage.md and RELIABILITY.md.
"""

from __future__ import annotations

import warnings

import torch

from gac.compiled import CompiledAdamStep
from gac.config import SPACES, GACConfig, check_config, reference_dtype_for
from gac.control import ACT, NonFiniteGradientError
from gac.distributed import local_tensor
from gac.fused import FusedAlignmentControl, coupled_weight_decay, first_moments, fused_look_at_gradients, make_tracker
from gac.state import init_threshold_stats
from gac.tracker import (
    REFERENCE_KEY,
    Difference,
    GACReport,
    check_not_meta,
    check_reference_shape,
    real_parts,
)

COUNTERS_KEY = "gac_counters"
"""Key, in the first parameter's entry of ``state_dict()["state"]``, of GAC's step counts, threshold
statistics and space (plain Python numbers: torch casts loaded state tensors to the parameter's dtype,
and distributed-checkpoint tooling keeps only per-parameter state and param groups)."""

MOMENTUM_OPTIMIZERS = "torch.optim.Adam, torch.optim.AdamW, or torch.optim.SGD with momentum > 0"


def first_moment_kind(optimizer: torch.optim.Optimizer) -> str:
    """"adam" or "sgd" for optimizers whose first moment momentum space can control; else a one-line error."""
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        if any(float(group["betas"][0]) == 0 for group in optimizer.param_groups):
            raise ValueError("GACConfig(space='momentum') needs β1 > 0 (with β1 = 0 Adam keeps no first moment)")
        return "adam"
    if isinstance(optimizer, torch.optim.SGD) and all(group["momentum"] > 0 for group in optimizer.param_groups):
        return "sgd"
    raise ValueError(f"GACConfig(space='momentum') needs an optimizer with a first moment ({MOMENTUM_OPTIMIZERS}); "
                     f"got {type(optimizer).__name__} without one: use space='gradient' or 'update'")


class GACOptimizer(torch.optim.Optimizer):
    """An optimizer that applies Gradient Alignment Control (in ``cfg.space``) around ``optimizer``'s step.

    GAC covers the parameters the inner optimizer steps, including groups added and parameters unfrozen after
    wrapping (each from its first gradient, with a fresh reference: ``_follow_params``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: GACConfig | None = None, process_group=None,
                 fused: bool | None = None, compiled: bool = False):
        if isinstance(optimizer, GACOptimizer) or getattr(optimizer, "_gac_wrapped", False):
            raise ValueError("wrap(): this optimizer is already wrapped by GAC; wrap the plain optimizer once")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"wrap() needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if isinstance(optimizer, torch.optim.LBFGS):
            raise ValueError("wrap(): LBFGS re-evaluates its closure several times within one step, so GAC has no "
                             "single gradient to control; use GAC with a first-order optimizer")
        if any(cls.__name__ == "ZeroRedundancyOptimizer" and cls.__module__.startswith("torch.distributed")
               for cls in type(optimizer).__mro__):
            raise ValueError("wrap(): ZeroRedundancyOptimizer shards the optimizer state and saves only its own, so "
                             "GAC's reference would be lost from checkpoints; wrap the plain optimizer under DDP, or "
                             "shard with FSDP (fully_shard), which GAC supports")
        cfg = check_config(cfg, "wrap()")
        self._moment_kind = first_moment_kind(optimizer) if cfg.space == "momentum" else None
        self._wrapped = False
        self.optimizer = optimizer
        check_not_meta(named_parameters(optimizer.param_groups))
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.gac = make_tracker(optimizer, params, cfg, process_group, fused)  # gac.fused: Adam/AdamW's fast path
        self._compiled = compiled_step(compiled, self.gac)  # gac.compiled: GAC inside a compiled Adam step
        self.gac.set_params(params)  # frozen ones too: GAC follows what the optimizer steps (see _follow_params)
        # Sets up hook dictionaries and the step profiler the way torch expects; then the group and
        # state containers are replaced by the inner optimizer's own objects (shared, not copied).
        super().__init__(params, optimizer.defaults)
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.skipped_steps = 0
        self._adopt_loaded_counters()
        optimizer._gac_wrapped = True
        self._wrapped = True

    @property
    def last_report(self) -> GACReport | None:
        return self.gac.last_report

    @property
    def cfg(self) -> GACConfig:
        return self.gac.cfg

    @property
    def fused(self) -> bool:
        """Whether GAC runs its fused path (``gac.fused``: torch.optim.Adam / AdamW, unless it could not apply)."""
        return isinstance(self.gac, FusedAlignmentControl) and self.gac.general is None

    _compiled: CompiledAdamStep | None = None  # wrap(compiled=True)

    swap_grads = True
    """In gradient space, act by swapping buffers: ``.grad`` becomes the tensor holding g' and the tensor that held g
    becomes the reference (one pass over the parameters instead of three; the same values). Set it to False when
    the training loop keeps gradient tensors across steps and writes into them rather than re-reading ``p.grad``
    (a step detects that and raises)."""

    # -- the step ---------------------------------------------------------------------------------
    def step(self, closure=None):
        if torch.compiler.is_compiling():
            refuse_compiled_step()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._follow_params()
        if any(p.grad is not None and p.grad.is_sparse for p in self.gac.params):
            raise ValueError("GAC does not support sparse gradients (e.g. nn.Embedding(sparse=True)): use dense "
                             "gradients, or leave those parameters out of the optimizer GAC wraps")
        if self._is_state_initialisation():
            self._inner_step()
            return loss
        space = self.cfg.space
        report = (self._gradient_step() if space == "gradient" else
                  self._update_step() if space == "update" else self._momentum_step())
        if report.regime == "skip":
            self.skipped_steps += 1
        return loss

    def _follow_params(self) -> None:
        """GAC controls every parameter of the inner optimizer's groups, frozen or not, so one unfrozen later (its
        first gradient) or added in a new group (``add_param_group``, on this wrapper or the inner optimizer) is
        controlled and counted in the cosine from its first gradient on, with a fresh reference (zero)."""
        params = [p for group in self.param_groups for p in group["params"]]
        tracked = self.gac.params
        if len(params) != len(tracked) or any(a is not b for a, b in zip(params, tracked, strict=True)):
            check_not_meta(named_parameters(self.param_groups))
            self.gac.set_params(params)

    def _is_state_initialisation(self) -> bool:
        """A step that cannot move the parameters (lr 0 everywhere, every gradient 0 or absent): what torch's
        distributed-checkpoint API runs to create the inner state. It is passed through, GAC's state kept."""
        if any(float(group.get("lr", 1.0)) != 0.0 for group in self.param_groups):
            return False
        return all(p.grad is None or not bool(local_tensor(p.grad).any()) for p in self.gac.params)

    def _inner_step(self) -> None:
        # torch optimizers initialise a parameter's state when it is empty (Adam: len(state) == 0), so a
        # reference that arrived before the optimizer's own state is hidden during the inner step.
        alone = {p: s.pop(REFERENCE_KEY) for p, s in self.state.items() if list(s) == [REFERENCE_KEY]}
        self.optimizer.step()
        for param, reference in alone.items():
            self.state[param][REFERENCE_KEY] = reference

    def _gradient_step(self) -> GACReport:
        if self._compiled is not None and self.fused:  # gac.compiled: the projection folded into the step
            return self._compiled.gradient_step(self)
        report = self.gac.apply(swap_grads=self.swap_grads)  # this wrapper owns the step: .grad may be swapped
        if report.regime != "skip":
            self._inner_step()
        return report

    @torch.no_grad()
    def _update_step(self) -> GACReport:
        if self._compiled is not None and self.fused:  # gac.compiled: the step and GAC in two loops
            report = self._compiled.moment_step(self, "update")
            if report is not None:
                return report
        params = self.gac.params
        grads = [local_tensor(p.grad) for p in params if p.grad is not None]
        if not grads:
            raise ValueError(f"GAC step {self.gac.step}: no parameter has a gradient; call backward() first")
        finite, has_gradient = (fused_look_at_gradients(params, look_at_gradients) if self.fused
                                else look_at_gradients(params))
        if not finite:
            # No inner step on a non-finite gradient (it would corrupt the optimizer's state): the tracker sees
            # the gradient itself, so every rank raises or skips together after its one all_reduce.
            return self.gac.apply([p.grad for p in params])
        indices = [i for i, p in enumerate(params) if p.grad is not None]
        stepped = [local_tensor(params[i]) for i in indices]
        before = [self.gac.take_spare(i, t) for i, t in zip(indices, stepped, strict=True)]
        torch._foreach_copy_(before, stepped)
        self._inner_step()
        # Δ = θ_after − θ_before is formed chunk by chunk inside the tracker (never stored whole), which writes
        # θ_after − α·d in the same pass when it acts.
        steps = iter([Difference(t, b) for t, b in zip(stepped, before, strict=True)])
        try:
            report = self.gac.apply([next(steps) if p.grad is not None else None for p in params],
                                    has_gradient=has_gradient)
        except NonFiniteGradientError:
            self._restore(stepped, before)
            raise
        if report.regime == "skip":  # skipped, or a non-finite Δ (overflow in the inner step): not applied
            self._restore(stepped, before)
        for index, buffer in zip(indices, before, strict=True):
            self.gac.keep_spare(index, buffer)
        return report

    @staticmethod
    def _restore(stepped: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        torch._foreach_copy_(stepped, values)

    @torch.no_grad()
    def _momentum_step(self) -> GACReport:
        if self._compiled is not None and self.fused:  # gac.compiled: m_t's sums, then the step with m_t − α·d
            report = self._compiled.moment_step(self, "momentum")
            if report is not None:
                return report
        params = self.gac.params
        index_of = {p: i for i, p in enumerate(params)}
        if self.fused:  # m_t formed with its sums, and which parameters have a gradient, in one pass
            moments, buffers, has_gradient = first_moments(self, index_of, look_at_gradients)
        else:
            moments, buffers = self._first_moments(index_of)
            has_gradient = look_at_gradients(params)[1]

        def shift_buffers(regime: int, coef: float, taking_part: set[int]) -> None:
            if regime != ACT:
                return
            for param, (buffer, factor) in buffers.items():
                reference = self.gac._reference_of(index_of[param])
                if buffer is not None and reference is not None and index_of[param] in taking_part:
                    real_parts(buffer).sub_(real_parts(reference.to(buffer.dtype)), alpha=coef * factor)

        complete = all(buffer is not None for buffer, _ in buffers.values())
        # m_t is formed in a buffer kept between steps, and with reference "prev" becomes the reference itself
        report = self.gac.apply([moments.get(p) for p in params], allow_action=complete, before_write=shift_buffers,
                                scratch_vectors=True, has_gradient=has_gradient)
        if report.regime != "skip":
            self._inner_step()
        return report

    def _first_moments(self, index_of: dict | None = None) -> tuple[dict, dict]:
        """{param: m_t} the inner step is about to form, and {param: (stored buffer or None, 1/β1 or 1/μ)}.
        Each m_t is written into the tracker's spare buffer for that parameter (same kernels, no allocation)."""
        index_of = index_of if index_of is not None else {p: i for i, p in enumerate(self.gac.params)}
        moments, buffers = {}, {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = local_tensor(p.grad)
                grad = -grad if group.get("maximize", False) else grad
                state = self.state.get(p, {})
                if self._moment_kind == "adam":
                    beta1 = float(group["betas"][0])
                    if coupled_weight_decay(self.optimizer, group):
                        grad = grad.add(local_tensor(p), alpha=group["weight_decay"])
                    buffer = state.get("exp_avg")
                    buffer = None if buffer is None else local_tensor(buffer)
                    out = self.gac.take_spare(index_of[p], grad)
                    if buffer is None:
                        torch.mul(real_parts(grad), 1.0 - beta1, out=real_parts(out))
                    else:  # in the real view, as torch's Adam forms a complex parameter's moment (the same bits)
                        torch.lerp(real_parts(buffer), real_parts(grad), 1.0 - beta1, out=real_parts(out))
                    moments[p] = out
                    factor = 1.0 / beta1
                else:
                    momentum, dampening = float(group["momentum"]), float(group["dampening"])
                    if group["weight_decay"] != 0:
                        grad = grad.add(local_tensor(p), alpha=group["weight_decay"])
                    buffer = state.get("momentum_buffer")
                    buffer = None if buffer is None else local_tensor(buffer)
                    if buffer is None:
                        moments[p] = self.gac.take_spare(index_of[p], grad).copy_(grad)
                    elif dampening == 0:  # (1 − 0)·g = g exactly: the same sum as below, without temporaries
                        out = self.gac.take_spare(index_of[p], grad)
                        moments[p] = torch.mul(buffer, momentum, out=out).add_(grad)
                    else:
                        moments[p] = momentum * buffer + (1.0 - dampening) * grad
                    factor = 1.0 / momentum
                buffers[p] = (buffer, factor)
        return moments, buffers

    # -- torch.optim conventions ------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group to the inner optimizer; GAC controls its parameters from the next step (fresh reference)."""
        if self._wrapped:
            self.optimizer.add_param_group(param_group)
            self._follow_params()
        else:  # torch.optim.Optimizer.__init__ building this wrapper's placeholder groups
            super().add_param_group(param_group)

    def _counters(self) -> dict:
        # Numbers only: torch's load_state_dict rebuilds iterables element by element (a str never ends).
        return {"space": SPACES.index(self.cfg.space), "step": self.gac.step,
                "skipped_nonfinite": self.gac.skipped_nonfinite, "skipped_steps": self.skipped_steps,
                "threshold_stats": [t.tolist() for t in self.gac.threshold_stats]}

    def state_dict(self) -> dict:
        state = self.optimizer.state_dict()  # holds the reference, under each parameter's "gac_reference"
        first_id = state["param_groups"][0]["params"][0]
        state["state"][first_id] = {**state["state"].get(first_id, {}), COUNTERS_KEY: self._counters()}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state of ``state_dict``.

        A state without GAC entries (a plain optimizer's) starts GAC anew: no reference, step 0.
        """
        state_dict = {**state_dict, "state": {k: dict(v) for k, v in state_dict.get("state", {}).items()}}
        counters = None
        for entry in state_dict["state"].values():
            counters = entry.pop(COUNTERS_KEY, None) or counters
        if counters is not None:
            self._check_space(counters)
        self._check_saved_references(state_dict)
        gac_state = self._gac_state(counters)
        self.gac._loaded_threshold_stats(gac_state)  # a config mismatch fails here, before anything is loaded
        self.optimizer.load_state_dict(state_dict)
        self.state = self.gac.param_state = self.optimizer.state  # load_state_dict made a new dict
        self.gac._last_g_sq = None  # the references were replaced
        self.param_groups = self.optimizer.param_groups
        self.skipped_steps = int(counters["skipped_steps"]) if counters is not None else 0
        self.gac.load_state_dict(gac_state)
        dtype = self.cfg.reference_dtype
        if dtype is not None:  # torch casts loaded state to the parameter's dtype; keep the reference's
            for param_state in self.state.values():
                if REFERENCE_KEY in param_state:
                    param_state[REFERENCE_KEY] = loaded_reference(param_state[REFERENCE_KEY], dtype)

    def _gac_state(self, counters: dict | None) -> dict:
        """The tracker's state_dict from the saved counters (none saved: fresh)."""
        if counters is not None:
            fresh = self.gac.threshold_stats
            stats = [torch.tensor(v, dtype=f.dtype) for v, f in zip(counters["threshold_stats"], fresh, strict=False)]
            if len(counters["threshold_stats"]) != len(fresh):
                stats = [torch.tensor(v) for v in counters["threshold_stats"]]  # rejected with the config's message
            return {"step": counters["step"], "skipped_nonfinite": counters["skipped_nonfinite"],
                    "threshold_stats": stats}
        return {"step": 0, "skipped_nonfinite": 0, "threshold_stats": list(init_threshold_stats(self.cfg))}

    def _check_space(self, counters: dict) -> None:
        saved = SPACES[int(counters["space"])]
        if saved != self.cfg.space:
            raise ValueError(f"GAC state was saved with space={saved!r}, this optimizer has "
                             f"space={self.cfg.space!r}; load it with the GACConfig it was saved with")

    def _adopt_loaded_counters(self) -> None:
        """GAC counters that a plain ``load_state_dict`` left in the inner state (a checkpoint of a wrapped
        optimizer loaded before wrapping, as transformers' Trainer does on resume) become this wrapper's."""
        found = [s.pop(COUNTERS_KEY) for s in self.state.values() if COUNTERS_KEY in s]
        if not found:
            return
        counters = found[0]
        self._check_space(counters)
        self.skipped_steps = int(counters["skipped_steps"])
        self.gac.load_state_dict(self._gac_state(counters))
        dtype = self.cfg.reference_dtype
        for param_state in self.state.values():
            if dtype is not None and REFERENCE_KEY in param_state:
                param_state[REFERENCE_KEY] = loaded_reference(param_state[REFERENCE_KEY], dtype)

    def _check_saved_references(self, state_dict: dict) -> None:
        """Every saved reference has its parameter's shape (saved ids map to parameters in group order)."""
        saved_ids = [i for group in state_dict.get("param_groups", []) for i in group["params"]]
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        for index, (saved_id, param) in enumerate(zip(saved_ids, params, strict=False)):
            check_reference_shape(index, state_dict.get("state", {}).get(saved_id, {}).get(REFERENCE_KEY), param)

    # -- copies (copy.deepcopy, pickle, torch.save of the optimizer object) --------------------------
    def __getstate__(self) -> dict:
        """All of the wrapper, so a copy steps as this optimizer would: torch.optim.Optimizer's own keeps only
        defaults, state and param_groups (a copy used to lose GAC). Hooks are left out, as torch leaves them out."""
        return {key: value for key, value in self.__dict__.items()
                if not (key.startswith("_optimizer_") and key.endswith("_hooks"))}

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)  # torch's: empty hook dictionaries, the step profiler
        self.optimizer._gac_wrapped = True  # the inner optimizer's pickled state does not carry the mark

    def __repr__(self) -> str:
        return f"GACOptimizer({self.gac.cfg}, {self.optimizer!r})"


_disable_dynamo = getattr(torch, "_disable_dynamo", torch.compiler.disable)
"""``torch.compiler.disable`` that imports dynamo at the first call, not here (torch.optim's own methods use it):
``torch.compiler.disable`` itself imports dynamo, which would cost every process that imports gac its import time."""


@_disable_dynamo
def refuse_compiled_step() -> None:
    """The one-line refusal of ``torch.compile(opt.step)``. Called while dynamo traces ``step``; disabled for dynamo,
    so it runs, and raises, for real instead of sending dynamo back to an eager rerun of the frame."""
    raise ValueError("GAC: torch.compile of a gac.wrap optimizer's step is not supported (its decision is "
                     "data-dependent, one host sync per step, and a compiled update-space step was seen to drift); "
                     "compile the model and call opt.step() uncompiled")


def look_at_gradients(params: list[torch.Tensor]) -> tuple[bool, list[bool]]:
    """(whether every gradient entry is finite, per parameter whether its gradient on this rank has a nonzero entry:
    False for None), from one read-only reduction per tensor (min and max: a NaN makes both NaN, ±inf shows as an
    extreme; neither overflows) instead of per-entry ``isfinite`` and ``any`` passes."""
    grads = [local_tensor(p.grad) if p.grad is not None and p.grad.numel() > 0 else None for p in params]
    present = [g for g in grads if g is not None]
    if not present:
        return True, [False] * len(params)
    extremes = torch.stack([torch.stack(torch.aminmax(real_parts(g).reshape(-1))) for g in present])
    numbers = torch.cat([torch.isfinite(extremes).all().reshape(1), (extremes != 0).any(1)]).tolist()
    nonzero = iter(numbers[1:])
    return bool(numbers[0]), [g is not None and bool(next(nonzero)) for g in grads]


def loaded_reference(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A loaded reference back in ``GACConfig.reference_dtype`` (torch casts loaded state to the parameter's dtype)."""
    return reference.to(reference_dtype_for(reference.dtype, dtype))


def named_parameters(param_groups: list[dict]):
    """(label, parameter) for every parameter of the groups: its name when the group has ``param_names``."""
    for group_index, group in enumerate(param_groups):
        names = group.get("param_names")
        for index, param in enumerate(group["params"]):
            where = f"param_groups[{group_index}]['params'][{index}]"
            yield (f"parameter {names[index]!r} ({where})" if names else f"parameter {where}"), param


def strip_gac_state(state_dict: dict) -> dict:
    """A copy of a wrapped optimizer's ``state_dict`` without GAC's entries, for a plain optimizer to load.

    torch's ``load_state_dict`` keeps every per-parameter key it is given, so loading a wrapped state into a
    plain optimizer directly would carry the reference along as dead memory.
    """
    state = {k: {key: v for key, v in entry.items() if key not in (REFERENCE_KEY, COUNTERS_KEY)}
             for k, entry in state_dict["state"].items()}
    return {key: value for key, value in state_dict.items() if key not in ("gac", "gac_skipped_steps")} | {
        "state": {k: v for k, v in state.items() if v}}


def compiled_step(compiled: bool, tracker) -> CompiledAdamStep | None:
    """The compiled step ``wrap(..., compiled=True)`` asks for, or None (one warning naming why it cannot serve)."""
    if not isinstance(compiled, bool):
        raise TypeError(f"wrap(): compiled must be True or False, got {compiled!r}")
    if not compiled:
        return None
    why = None
    if not isinstance(tracker, FusedAlignmentControl) or tracker.general is not None:
        why = "it needs the fused path (Adam/AdamW)"
    if why is not None:
        warnings.warn(f"gac.wrap(compiled=True): the compiled step cannot apply ({why}); it is not used",
                      stacklevel=4)
        return None
    return CompiledAdamStep()


def wrap(optimizer: torch.optim.Optimizer, cfg: GACConfig | None = None, process_group=None,
         fused: bool | None = None, compiled: bool = False) -> GACOptimizer:
    """Return an optimizer whose ``step()`` applies GAC (``cfg``, in ``cfg.space``) and steps ``optimizer``.

    ``cfg`` must be a ``GACConfig`` (or None for the defaults); anything else is a one-line TypeError. Parameters
    added to ``optimizer`` or unfrozen later are controlled from their first gradient on (fresh reference).
    ``fused``: torch.optim.Adam / AdamW get the fused path (``gac.fused``) unless False; True warns when it cannot
    apply. ``compiled=True`` (Adam/AdamW on the fused path): GAC folded into a ``torch.compile``d Adam/AdamW step
    (``gac.compiled``), faster per step after a compile of seconds to minutes at the first steps it takes.

    Example::

        opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=1e-3), gac.GACConfig(threshold=0.3))
        loss.backward(); opt.step(); opt.zero_grad()
        opt.last_report.cosine
    """
    return GACOptimizer(optimizer, cfg, process_group, fused, compiled)


__all__ = ["GACOptimizer", "wrap", "strip_gac_state", "first_moment_kind", "COUNTERS_KEY"]
