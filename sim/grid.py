"""A grid of runs (settings × seeds) advanced by one tensor update per step, shared by the simulators.

Each simulator only computes the raw gradients of all runs, shape (R, P); ``GridUpdater`` turns them
into parameter updates with each row's method (``sim.stabilizers``, one choice per axis): GAC through
``gac.update`` once per group of rows that share a GAC configuration (in gradient, momentum or update
space), Adaptive Braking, the staleness-aware, KL-target or ESS-scaled (VCPO) step size, SGD, SGD with
heavy-ball momentum or Adam. Rows are ordered setting-major: row = setting_index · seeds + seed_index.
``GridResult`` holds what was recorded and turns it into the per-step record of ``runtime.files``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

import gac
from gac import placement
from gac.cosine64 import as_float64, cosine64
from sim import stabilizers
from sim.schema import NO_REGIME, columns, make_row
from sim.staleness import KINDS

OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
MOMENTUM_OPTIMIZERS = ("sgd_momentum", "adam")
"""The optimizers with a first moment (a velocity): GAC in momentum space and Adaptive Braking need one."""
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
SGD_MOMENTUM = 0.9
"""μ of heavy-ball SGD, torch.optim.SGD's convention: buf = μ·buf + g (buf = g on the first step), x −= η·buf."""
NO_GAC = -1  # regime code of rows without a GAC decision
PLACEMENT = {"gradient": placement.on_gradient, "momentum": placement.control_moment, "update": placement.control_step}
"""The library's placement per GAC space, for an optimizer written as explicit arithmetic: the raw gradient, the
first moment the row stores and steps with, the proposed step (a skip restarts the reference)."""


@dataclass(frozen=True)
class Setting:
    """One point of the grid: method (registry name) with its parameters, staleness, step size, optimizer."""

    method: str = stabilizers.NAIVE
    """Method name from ``sim.stabilizers``: registry names joined by + (one per axis), e.g. "gac", "gac+tis"."""
    staleness: int = 0
    """s (fixed) or s_max (random); sync is s = 0."""
    lr: float = 0.1
    """Step size η."""
    staleness_kind: str = "fixed"
    """"fixed" s every step, or "random" s_t ~ U{0..s}."""
    optimizer: str = "sgd"
    """"sgd" (x −= η·u), "sgd_momentum" (heavy ball: buf = μ·buf + u, x −= η·buf) or "adam" (x −= η·m̂/(√v̂+ε))."""
    params: tuple[tuple[str, Any], ...] = ()
    """Method parameters as sorted (name, value) pairs (see ``setting``)."""
    label: str | None = None
    """Name in figures and records' ``label`` column when the method alone does not tell the run apart (e.g. its
    parameters); default: the records' method (``run_method``)."""

    def __post_init__(self) -> None:
        if isinstance(self.staleness, bool) or not isinstance(self.staleness, int) or self.staleness < 0:
            raise ValueError(f"staleness must be an integer >= 0, got {self.staleness!r}")
        if self.staleness_kind not in KINDS:
            raise ValueError(f"staleness kind must be one of {KINDS}, got {self.staleness_kind!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        self.method_params()  # unknown method or parameter fails here, before any work
        direction = self.combination.direction
        if direction == "gac":
            space = self.part_params("gac")["space"]
            stabilizers.gac_config(**self.part_params("gac"))
            if space in ("update", "momentum") and self.optimizer not in MOMENTUM_OPTIMIZERS:
                raise ValueError(f"gac space={space!r} needs optimizer sgd_momentum or adam (plain SGD's update "
                                 "is the gradient and it has no momentum)")
        if direction == "braking" and self.optimizer not in MOMENTUM_OPTIMIZERS:
            raise ValueError("braking needs optimizer sgd_momentum or adam: plain SGD has no velocity to brake against")

    @property
    def combination(self) -> stabilizers.Combination:
        """The method's choice on each axis (``sim.stabilizers.parse_method``)."""
        return stabilizers.parse_method(self.method)

    def part_params(self, part: str) -> dict:
        """The parameters of one part of the method (its registry defaults updated with this setting's values)."""
        own = stabilizers.get_stabilizer(part).defaults
        return stabilizers.method_params(part, **{k: v for k, v in self.params if k in own})

    def method_params(self) -> dict:
        """Every part's parameters in one dict (the registry's parameter names differ between entries)."""
        merged: dict = {}
        for part in self.combination.parts or (stabilizers.NAIVE,):
            merged.update(self.part_params(part))
        unknown = sorted(set(dict(self.params)) - set(merged))
        if unknown:
            raise ValueError(f"method {self.method!r} has no parameter(s) {unknown}; it takes {sorted(merged)}")
        return merged

    @property
    def run_method(self) -> str:
        """The records' ``method``: the canonical method name, ``sync`` for naive at s = 0."""
        return stabilizers.record_method(self.combination, self.staleness)

    @property
    def name(self) -> str:
        """The records' ``label``: ``label`` if given, else ``run_method``."""
        return self.run_method if self.label is None else self.label


def setting(method: str = stabilizers.NAIVE, staleness: int = 0, lr: float = 0.1, *, staleness_kind: str = "fixed",
            optimizer: str = "sgd", label: str | None = None, **params) -> Setting:
    """Build a ``Setting``; keyword ``params`` are the method's parameters (checked against the registry)."""
    return Setting(method, staleness, lr, staleness_kind, optimizer, tuple(sorted(params.items())), label)


def check_models(settings, model: str) -> None:
    """Fail before any work if a method (or a part of it) does not apply to this staleness model."""
    for s in settings:
        stabilizers.parse_method(s.method, model)


def _as_slice_if_contiguous(rows: torch.Tensor) -> torch.Tensor | slice:
    """A slice for consecutive rows: reading them is then a view, not a gather (same values)."""
    start = int(rows[0])
    consecutive = torch.equal(rows, torch.arange(start, start + len(rows), device=rows.device))
    return slice(start, start + len(rows)) if consecutive else rows


@dataclass
class _GacGroup:
    rows: torch.Tensor | slice
    cfg: gac.GACConfig
    space: str
    state: gac.GACState
    fixed_threshold: torch.Tensor | None  # per-row τ when cfg.threshold is fixed; None for an adaptive rule


def _row_factors(rows: torch.Tensor, params: torch.Tensor, factor_of, signal: torch.Tensor) -> torch.Tensor:
    """A step-size factor per row: ``factor_of(signal, *p)`` on the ``rows`` whose parameters are p (one call per
    distinct p among them), 1 elsewhere."""
    factor = torch.ones_like(signal)
    for values in torch.unique(params[rows], dim=0).tolist():
        chosen = rows & (params == torch.tensor(values, dtype=params.dtype, device=params.device)).all(-1)
        factor = torch.where(chosen, factor_of(signal, *values), factor)
    return factor


class GridUpdater:
    """Per-row methods and optimizer state of a grid; ``update`` maps raw gradients to new parameters."""

    def __init__(self, settings: list[Setting], seeds: int, dim: int, dtype: torch.dtype = torch.float64,
                 device: str | torch.device = "cpu"):
        self.settings, self.seeds, self.rows = list(settings), int(seeds), len(settings) * int(seeds)
        rep = lambda values, dt: torch.tensor(values, dtype=dt, device=device).repeat_interleave(self.seeds)
        self.setting_index = rep(list(range(len(settings))), torch.int64)
        self.seed_index = torch.arange(self.seeds, device=device).repeat(len(settings))
        self.lr = rep([s.lr for s in settings], dtype)
        self.max_staleness = rep([s.staleness for s in settings], torch.int64)
        self.random_staleness = rep([s.staleness_kind == "random" for s in settings], torch.bool)
        self.adam = rep([s.optimizer == "adam" for s in settings], torch.bool)
        self.heavy_ball = rep([s.optimizer == "sgd_momentum" for s in settings], torch.bool)
        axes = [s.combination for s in settings]
        # A part's parameter per setting (``absent`` where the setting does not use that part).
        param = lambda part, name, absent: [s.part_params(part)[name] if part in a.parts else absent
                                            for s, a in zip(settings, axes, strict=True)]
        self.lr_scale = rep([a.step == "lr_scale" for a in axes], torch.bool)
        self.kl_target = rep([a.step == "kl_target" for a in axes], torch.bool)
        self.kl_params = torch.stack([rep(param("kl_target", "kl_target", 1.0), dtype),
                                      rep(param("kl_target", "kl_floor", 1.0), dtype)], dim=-1)
        self.vcpo = rep([a.step == "vcpo" for a in axes], torch.bool)
        self.vcpo_params = torch.stack([rep(param("vcpo", "vcpo_reference_ratio", 1.0), dtype),
                                        rep(param("vcpo", "vcpo_power", 1.0), dtype)], dim=-1)
        self.dc = rep([a.objective == "dc" for a in axes], torch.bool)
        self.dc_lambda = rep(param("dc", "dc_lambda", 0.0), dtype)
        self.braking_rows = torch.nonzero(rep([a.direction == "braking" for a in axes], torch.bool))[:, 0]
        self.braking_alpha = rep(param("braking", "braking_alpha", 0.0), dtype)[self.braking_rows]
        self.any_adam, self.any_dc = bool(self.adam.any()), bool(self.dc.any())
        self.any_heavy_ball, self.any_kl_target = bool(self.heavy_ball.any()), bool(self.kl_target.any())
        self.any_vcpo = bool(self.vcpo.any())
        self.has_moment = self.adam | self.heavy_ball
        shape = (self.rows, dim)
        self.groups = self._gac_groups(torch.zeros(shape, dtype=dtype, device=device))
        # Each vector in float64 with its ‖·‖² (gac.cosine64), kept as the reference of the next step's cosine.
        self.prev_raw = as_float64(torch.zeros(shape, dtype=dtype, device=device))
        self.prev_applied = self.prev_raw
        # The first moment of each row's optimizer: Adam's m, heavy-ball SGD's buf (one tensor, one meaning).
        self.exp_avg = torch.zeros(shape, dtype=dtype, device=device) if bool(self.has_moment.any()) else None
        self.exp_avg_sq = torch.zeros(shape, dtype=dtype, device=device) if self.any_adam else None
        self.adam_steps = torch.zeros(self.rows, dtype=torch.int64, device=device)

    def _gac_groups(self, like: torch.Tensor) -> list[_GacGroup]:
        """Rows grouped by everything of their GAC setting except a fixed threshold (a per-row tensor)."""
        keyed: dict[tuple, list[int]] = {}
        for index, s in enumerate(self.settings):
            if s.combination.direction != "gac":
                continue
            params = s.part_params("gac")
            key = tuple(sorted((k, v) for k, v in params.items() if k != "threshold" or params["threshold_rule"]))
            keyed.setdefault(key, []).append(index)
        groups = []
        for indices in keyed.values():
            rows = _as_slice_if_contiguous(torch.cat([torch.arange(i * self.seeds, (i + 1) * self.seeds)
                                                      for i in indices]).to(like.device))
            params = self.settings[indices[0]].part_params("gac")
            cfg = stabilizers.gac_config(**params)  # per-row thresholds were validated in Setting
            threshold = None if params["threshold_rule"] else torch.tensor(
                [self.settings[i].part_params("gac")["threshold"] for i in indices],
                dtype=like.dtype, device=like.device).repeat_interleave(self.seeds)
            groups.append(_GacGroup(rows, cfg, params["space"], gac.init(like[rows], cfg), threshold))
        return groups

    def staleness(self, uniform_per_seed: torch.Tensor) -> torch.Tensor:
        """s_t per row: s for fixed rows, ⌊u·(s_max+1)⌋ for random rows (u ~ U[0,1) drawn per seed)."""
        u = uniform_per_seed[self.seed_index]
        drawn = (u * (self.max_staleness + 1).to(u.dtype)).floor().long().clamp_max(self.max_staleness)
        return torch.where(self.random_staleness, drawn, self.max_staleness)

    def _apply_gac(self, space: str, vectors: torch.Tensor, info: dict) -> torch.Tensor:
        """GAC of the rows placed in ``space`` on ``vectors`` (the library's ``gac.placement``: the raw gradient,
        the formed first moment the row stores, or the proposed step); regime, γ and τ into ``info``."""
        out = vectors
        for group in self.groups:
            if group.space != space:
                continue
            rows = group.rows
            placed = PLACEMENT[space](vectors[rows], group.state, group.cfg, group.fixed_threshold)
            new, group.state, report = placed
            if out is vectors:
                out = vectors.clone()
            out[rows] = new
            info["regime"][rows] = report.regime.to(torch.int64)
            info["parallel_scale"][rows] = report.parallel_scale.to(info["parallel_scale"].dtype)
            info["threshold"][rows] = report.threshold.to(info["threshold"].dtype)
        return out

    def _apply_braking(self, direction: torch.Tensor, info: dict) -> torch.Tensor:
        """Adaptive Braking on the braking rows: g ← (1 − α·cos(g, v))·g, v the first moment before this step
        (zero before the first step: cosine 0, factor 1)."""
        rows = self.braking_rows
        factor = stabilizers.braking_scale(gac.alignment(direction[rows], self.exp_avg[rows]), self.braking_alpha)
        out = direction.clone()
        out[rows] = factor[:, None].to(direction.dtype) * direction[rows]
        info["parallel_scale"][rows] = factor.to(info["parallel_scale"].dtype)
        return out

    def step_sizes(self, staleness: torch.Tensor, kl_behaviour: torch.Tensor | None, dtype,
                   ess_ratio: torch.Tensor | None = None) -> torch.Tensor:
        """η_t per row: η, η/(1+s_t) (lr_scale rows), η·clip(κ/KL_t, floor, 1) (kl_target rows) or
        η·min(1, (ESS/N)/ρ_ref)^power (vcpo rows, ``stabilizers.vcpo_step_factor`` of the update's ``ess_ratio``)."""
        lr = torch.where(self.lr_scale, self.lr / (1.0 + staleness.to(dtype)), self.lr)
        if self.any_kl_target:
            if kl_behaviour is None:
                raise ValueError("kl_target needs the KL to the behaviour policy (stale-data model only)")
            lr = lr * _row_factors(self.kl_target, self.kl_params, stabilizers.kl_target_factor, kl_behaviour.to(dtype))
        if self.any_vcpo:
            if ess_ratio is None:
                raise ValueError("vcpo needs the ESS of the update's importance weights (stale-data model only)")
            lr = lr * _row_factors(self.vcpo, self.vcpo_params, stabilizers.vcpo_step_factor, ess_ratio.to(dtype))
        return lr

    def update(self, params: torch.Tensor, grad: torch.Tensor, stale_params: torch.Tensor,
               staleness: torch.Tensor, active: torch.Tensor,
               kl_behaviour: torch.Tensor | None = None,
               ess_ratio: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """New parameters of all rows from their raw gradients; rows with ``active`` False stay put.

        Order per row: DC correction (dc rows), GAC in gradient space or Adaptive Braking, the first moment
        m_t (Adam: β1·m + (1−β1)·g; heavy ball: μ·buf + g), GAC in momentum space (m_t controlled against
        past uncontrolled m; the controlled m'_t is stored, so the removed part does not come back), the
        proposed step (Adam: m̂/(√v̂+ε); heavy ball: m'_t; SGD: g), GAC in update space (the proposed step
        against past proposed steps; optimizer state as without it), step size η_t (÷(1+s_t) for lr_scale
        rows, × clip(κ/KL_t, floor, 1) for kl_target rows, KL_t = ``kl_behaviour``, × VCPO's factor of
        ``ess_ratio`` for vcpo rows). A GAC "skip" in any
        space leaves the row unchanged, optimizer state included (``gac.wrap`` does so in gradient and momentum
        space; in update space its inner optimizer has already stepped); in update space the skipped row's
        reference restarts at zero, as in ``gac.wrap`` (``gac.placement.control_step``).
        """
        dtype, cos_dtype = grad.dtype, torch.promote_types(grad.dtype, torch.float32)
        info = {"regime": torch.full((self.rows,), NO_GAC, dtype=torch.int64),
                "parallel_scale": torch.ones(self.rows, dtype=dtype),
                "threshold": torch.full((self.rows,), float("nan"), dtype=dtype),
                "grad_norm": grad.norm(dim=-1)}
        raw = as_float64(grad)
        info["cos_prev"], self.prev_raw = cosine64(raw, self.prev_raw).to(cos_dtype), raw
        direction = grad
        if self.any_dc:
            corrected = stabilizers.delay_compensated_gradient(grad, params, stale_params, self.dc_lambda[:, None])
            direction = torch.where(self.dc[:, None], corrected, grad)
        direction = self._apply_gac("gradient", direction, info)
        if len(self.braking_rows):
            direction = self._apply_braking(direction, info)
        if self.exp_avg is not None:
            beta1, beta2 = ADAM_BETAS
            first = torch.lerp(self.exp_avg, direction, 1 - beta1) if self.any_adam else None
            if self.any_heavy_ball:
                buf = SGD_MOMENTUM * self.exp_avg + direction
                first = buf if first is None else torch.where(self.heavy_ball[:, None], buf, first)
            first = self._apply_gac("momentum", first, info)
            proposed = first
            if self.any_adam:
                steps = self.adam_steps + 1
                exp_avg_sq = beta2 * self.exp_avg_sq + (1 - beta2) * direction * direction
                corr1 = (1 - beta1 ** steps.to(dtype))[:, None]
                corr2 = (1 - beta2 ** steps.to(dtype))[:, None]
                adam_step = (first / corr1) / ((exp_avg_sq / corr2).sqrt() + ADAM_EPS)
                proposed = adam_step if not self.any_heavy_ball else torch.where(self.adam[:, None], adam_step, first)
            direction = torch.where(self.has_moment[:, None], proposed, direction)
            direction = self._apply_gac("update", direction, info)
            # The optimizer state moves only where the step is taken (no GAC skip in any space, run active).
            moving = (active & (info["regime"] != gac.SKIP))[:, None]
            self.exp_avg = torch.where(moving & self.has_moment[:, None], first, self.exp_avg)
            if self.any_adam:
                adam_moving = moving & self.adam[:, None]
                self.exp_avg_sq = torch.where(adam_moving, exp_avg_sq, self.exp_avg_sq)
                self.adam_steps = torch.where(adam_moving[:, 0], steps, self.adam_steps)
        moving = active & (info["regime"] != gac.SKIP)
        lr = self.step_sizes(staleness, kl_behaviour, dtype, ess_ratio)
        applied = direction * moving[:, None].to(dtype)  # frozen or skipped rows apply nothing
        applied64 = as_float64(applied)
        info["cos_applied"], self.prev_applied = cosine64(applied64, self.prev_applied).to(cos_dtype), applied64
        info["lr"] = lr
        return params - lr[:, None] * applied, info


@dataclass
class GridResult:
    """Recorded traces of a grid: ``traces[name]`` has shape (recorded steps, R); ``summary[name]`` (R,)."""

    sim: str
    settings: list[Setting]
    seeds: int
    seed: int
    steps: torch.Tensor
    traces: dict[str, torch.Tensor]
    summary: dict[str, torch.Tensor]
    meta: dict = field(default_factory=dict)

    def row_of(self, setting_index: int, seed_index: int) -> int:
        return setting_index * self.seeds + seed_index

    def rows_of(self, setting_index: int) -> slice:
        return slice(setting_index * self.seeds, (setting_index + 1) * self.seeds)

    def find(self, **match) -> list[int]:
        """Indices of settings whose fields (or ``name``) equal ``match``."""
        return [i for i, s in enumerate(self.settings)
                if all((s.name if k == "name" else getattr(s, k)) == v for k, v in match.items())]

    def regime_names(self, codes: torch.Tensor, setting_index: int) -> list[str]:
        s = self.settings[setting_index]
        mode = s.part_params("gac")["mode"] if s.combination.direction == "gac" else ""
        return [NO_REGIME if c < 0 else gac.regime_name(c, mode) for c in codes.tolist()]

    def records(self) -> list[dict]:
        """The per-step record rows, built by ``sim.schema.make_row``: exactly ``sim.schema.columns(self.sim)``.

        Every column the grid recorded a trace for is filled; the others (e.g. cos_halves) are NaN.
        """
        rows = []
        t = self.traces
        traced = [name for name in columns(self.sim) if name in t and name not in ("regime", "diverged")]
        for si, s in enumerate(self.settings):
            for k in range(self.seeds):
                r = self.row_of(si, k)
                names = self.regime_names(t["regime"][:, r], si)
                for j, step in enumerate(self.steps.tolist()):
                    values = {name: float(t[name][j, r]) for name in traced}
                    rows.append(make_row(self.sim, step=step, seed=k, method=s.run_method, staleness=s.staleness,
                                         label=s.name, regime=names[j], diverged=bool(t["diverged"][j, r]), **values))
        return rows

    def summary_rows(self) -> list[dict]:
        """One row per run: the setting, its seed and every summary value."""
        rows = []
        for si, s in enumerate(self.settings):
            for k in range(self.seeds):
                r = self.row_of(si, k)
                row = {"sim": self.sim, "label": s.name, "method": s.run_method, "staleness": s.staleness,
                       "staleness_kind": s.staleness_kind, "lr": s.lr, "optimizer": s.optimizer, "seed": k,
                       "params": ";".join(f"{a}={b}" for a, b in s.params)}
                row.update({name: _scalar(v[r]) for name, v in self.summary.items()})
                rows.append(row)
        return rows


def _scalar(value: torch.Tensor):
    return bool(value) if value.dtype == torch.bool else (int(value) if not value.is_floating_point()
                                                           else float(value))


class Recorder:
    """Keeps every ``every``-th step's values of all rows, and running summaries per row.

    Summaries: ``mean_cos_prev`` / ``mean_cos_applied`` over steps ≥ ``warmup`` before divergence (NaN
    if it diverged before warm-up); ``mean_cos_prev_alive`` over all steps ≥ 1 before divergence; ``final_objective``
    = mean objective over the last ``tail`` steps (inf, or −inf for rewards, if the run diverged); ``diverged`` and
    ``diverged_step`` (−1 if never); ``act_fraction`` / ``skip_fraction`` of GAC steps ≥ warmup; ``mean_<name>`` for
    each of ``means`` (recorded values averaged like the cosines: steps ≥ warmup before divergence).
    After a run diverges its cosines are recorded as NaN (it is frozen, nothing is compared any more).
    """

    FIELDS = ("objective", "grad_norm", "cos_prev", "cos_applied", "regime", "parallel_scale", "lr", "diverged")

    def __init__(self, rows: int, steps: int, every: int = 1, warmup: int = 0, tail: int = 1,
                 extras: tuple[str, ...] = (), dtype=torch.float64, higher_is_better: bool = False,
                 means: tuple[str, ...] = ()):
        self.higher_is_better, self.means = higher_is_better, tuple(means)
        self.every, self.warmup, self.steps, self.tail = max(1, every), warmup, steps, max(1, tail)
        self.names = (*self.FIELDS, *extras)
        self.kept: dict[str, list[torch.Tensor]] = {n: [] for n in self.names}
        self.kept_steps: list[int] = []
        zeros = lambda: torch.zeros(rows, dtype=dtype)
        self.sums = {"cos_prev": zeros(), "cos_applied": zeros(), "objective": zeros(), "act": zeros(),
                     "skip": zeros(), "cos_prev_alive": zeros(), **{f"mean_{n}": zeros() for n in self.means}}
        self.alive_counts = zeros()
        self.counts, self.tail_counted = zeros(), 0
        self.diverged_step = torch.full((rows,), -1, dtype=torch.int64)

    def observe(self, step: int, values: dict[str, torch.Tensor]) -> None:
        diverged = values["diverged"]
        fresh = diverged & (self.diverged_step < 0)
        self.diverged_step = torch.where(fresh, step, self.diverged_step)
        # A frozen (diverged) run has no more gradients to compare: its cosines read NaN from then on.
        frozen = diverged & ~fresh
        nan = torch.full_like(values["cos_prev"], float("nan"))
        values = dict(values, cos_prev=torch.where(frozen, nan, values["cos_prev"]),
                      cos_applied=torch.where(frozen, nan, values["cos_applied"]))
        if step % self.every == 0 or step == self.steps - 1:
            self.kept_steps.append(step)
            for n in self.names:
                self.kept[n].append(values[n].detach().clone())
        live = (~diverged).to(self.sums["act"].dtype)
        if step >= 1:  # step 0 has no previous gradient
            self.alive_counts += live
            self.sums["cos_prev_alive"] += live * values["cos_prev"].nan_to_num()
        if step >= self.warmup:
            self.counts += live
            self.sums["cos_prev"] += live * values["cos_prev"].nan_to_num()
            self.sums["cos_applied"] += live * values["cos_applied"].nan_to_num()
            self.sums["act"] += live * (values["regime"] == gac.ACT).to(live.dtype)
            self.sums["skip"] += live * (values["regime"] == gac.SKIP).to(live.dtype)
            for name in self.means:
                self.sums[f"mean_{name}"] += live * values[name].nan_to_num()
        if step >= self.steps - self.tail:
            self.tail_counted += 1
            self.sums["objective"] += values["objective"]

    def result(self, sim: str, settings, seeds: int, seed: int, meta: dict | None = None) -> GridResult:
        traces = {n: torch.stack(v) for n, v in self.kept.items()}
        count = torch.where(self.counts > 0, self.counts, torch.nan)  # steps ≥ warmup before divergence
        diverged = self.diverged_step >= 0
        final = self.sums["objective"] / max(self.tail_counted, 1)
        bad = float("-inf") if self.higher_is_better else float("inf")
        summary = {
            "mean_cos_prev": self.sums["cos_prev"] / count,
            "mean_cos_applied": self.sums["cos_applied"] / count,
            "mean_cos_prev_alive": self.sums["cos_prev_alive"] / self.alive_counts.clamp_min(1),
            "final_objective": torch.where(diverged, torch.full_like(final, bad), final),
            "diverged": diverged,
            "diverged_step": self.diverged_step,
            "act_fraction": self.sums["act"] / count,
            "skip_fraction": self.sums["skip"] / count,
            **{f"mean_{name}": self.sums[f"mean_{name}"] / count for name in self.means},
        }
        return GridResult(sim, list(settings), seeds, seed, torch.tensor(self.kept_steps), traces, summary,
                          meta or {})


__all__ = ["Setting", "setting", "check_models", "GridUpdater", "GridResult", "Recorder", "OPTIMIZERS", "NO_GAC"]
