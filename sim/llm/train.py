"""GRPO on a small Qwen3 model with stale rollouts: `python -m sim.llm --method gac --staleness 8`.

One RL step t: the behaviour policy θ_{t−s_t} (from a ring of snapshots) samples G responses for
each of P prompts; rewards are exact-match correctness; advantages are group-normalised; the batch
is split into ``minibatches`` updates (one pass), each: token-level clipped loss → backward → GAC
(method ``gac``) → clip_grad_norm → AdamW step. Several updates per batch keep the clip active in the
synchronous baseline too (its later minibatches are off-policy by the earlier updates).

The trainer reads like CleanRL: ``setup(args)`` builds a TrainState, ``rl_step(state)`` does one RL
step and returns its record (columns of sim/schema.py), ``train(args)`` yields the records one by one
(stop it early by breaking out), ``summary(state)`` gives the final held-out accuracy. What the loop measures
besides its loss lives in probes.py, checkpoints in checkpoint.py, the command line in __main__.py.
"""

from __future__ import annotations

import contextlib
import copy
import math
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import gac
from gac.control import regime_name
from sim.advantages import group_advantages
from sim.llm import grpo, probes
from sim.llm.checkpoint import (
    checked_resume,
    checkpoint_payload,
    out_dir_lock,
    prepare_out_dir,
    restore,
    save_checkpoint,
    trainer_fingerprint,
)
from sim.llm.grpo import group_samples
from sim.llm.model import SIZES, check_model_dir, load_model, sample, token_logprobs
from sim.llm.probes import Float64Vector, as_float64, cosine, cosine_to_prev, flat_grad, flat_params, snr_from_cosine
from sim.llm.task import AdditionTask
from sim.llm.warmstart import WarmStartConfig, heldout_accuracy, load_warm_start, warm_start
from sim.record import check_output_dir
from sim.schema import NO_REGIME, make_row
from sim.stabilizers import (
    GAC_SPACES,
    STALE_DATA,
    BAPOConfig,
    BrakingConfig,
    Combination,
    KLTargetConfig,
    M2POConfig,
    TISConfig,
    braking_scale,
    gac_config,
    kl_target_factor,
    method_params,
    parse_method,
)
from sim.staleness import KINDS, Staleness, VersionRing

GAC_REFERENCES = ("update", "step")

@dataclass
class Args:
    method: str = "none"
    """method from sim/stabilizers.py: one choice per axis joined by + (objective tis/m2po/bapo, direction gac/braking,
    step lr_scale/kl_target; e.g. gac+tis), none = naive async, or sync (= none at s=0)"""
    staleness: int = 0
    """staleness s: rollouts of step t come from the policy of step t − s (max s when kind is random)"""
    staleness_kind: str = "fixed"
    """fixed: s at every step; random: s_t uniform in 0..s"""
    steps: int = 200
    """number of RL steps (rollout batches)"""
    seed: int = 0
    """seed of prompts, sampling and minibatch order (the warm start has its own seed)"""
    lr: float = 1e-3
    """AdamW step size of the RL stage"""
    size: str = "cpu"
    """model size in sim/llm/model.py: tiny, small, cpu, gpu"""
    model: str | None = None
    """local checkpoint directory (save_pretrained format) to start from instead of the warm start"""
    digits: int = 2
    """task difficulty: operand width of the addition problems"""
    prompts_per_step: int = 16
    """P: distinct prompts per RL step"""
    group_size: int = 8
    """G: samples per prompt (GRPO group)"""
    minibatches: int = 2
    """optimizer updates per RL step (the P prompt groups are split into this many, one pass)"""
    clip_eps: float = 0.2
    """ε of the clipped ratio"""
    ratio_to: str = "behaviour"
    """clip-ratio denominator (none/gac/lr_scale): behaviour = π_b; proximal = π_θ at the step's start (as if fresh)"""
    kl_coef: float = 0.0
    """β of the KL penalty to the reference (warm-start) policy; 0 disables it"""
    temperature: float = 1.0
    """sampling temperature of the rollouts"""
    max_grad_norm: float = 1.0
    """clip_grad_norm_ after GAC"""
    gac: gac.GACConfig = field(default_factory=gac_config)
    """method gac: its parameters (--gac.threshold, --gac.mode, ...)"""
    gac_reference: str = "update"
    """GAC reference: update = the previous optimizer update's raw gradient; step = the previous RL step's sum"""
    gac_space: str = "gradient"
    """where GAC acts: gradient (the raw gradient, before AdamW), update (AdamW's proposed step Δθ, after it; AdamW's
    state untouched) or momentum (AdamW's first moment, before its step); references: the previous uncontrolled one"""
    tis: TISConfig = field(default_factory=TISConfig)
    """method tis: its parameters"""
    m2po: M2POConfig = field(default_factory=M2POConfig)
    """method m2po: its parameters"""
    bapo: BAPOConfig = field(default_factory=BAPOConfig)
    """method bapo: its parameters"""
    braking: BrakingConfig = field(default_factory=BrakingConfig)
    """method braking (Adaptive Braking): its parameter"""
    kl_target: KLTargetConfig = field(default_factory=KLTargetConfig)
    """method kl_target (step control by the KL to π_b): its parameters"""
    eval_every: int = 20
    """held-out accuracy every this many steps"""
    eval_problems: int = 256
    """held-out problems per evaluation (a fixed set)"""
    snr_every: int = 10
    """SNR probe (cos_halves) every this many steps: one extra backward at the step's start"""
    warm_target: float = 0.3
    """warm start: supervised steps until held-out accuracy reaches this"""
    warm_seed: int = 0
    """seed of the warm start's initialisation and data"""
    checkpoint_every: int = 0
    """save a checkpoint every this many steps (0: never)"""
    out_dir: str = "runs/llm"
    """folder of the run's records.csv, summary.json and checkpoint.pt"""
    resume: bool = False
    """continue from out_dir/checkpoint.pt (same numbers as an uninterrupted run)"""
    overwrite: bool = False
    """replace the run already in out_dir (its records, summary and checkpoint) instead of refusing"""
    allow_code_change: bool = False
    """with --resume: continue although the source (gac/, sim/) changed since the checkpoint was written"""
    device: str = "cpu"
    """torch device: cpu or cuda"""
    threads: int = 1
    """torch CPU threads (keep 1 when other processes share the cores); part of the run's identity, since long
    sums (cosines, GAC's dot products) split across threads and their last bits depend on the count"""
    progress: bool = True
    """show a progress bar"""
    on_nonfinite: str = "raise"
    """non-finite loss/gradient: raise (error naming the step) or mark (record diverged=True, stop the run)"""

    def validate(self) -> None:
        """Raise ValueError (one line) for any bad setting, before work starts."""
        if self.method != "sync":
            parse_method(self.method, STALE_DATA)
        if self.method == "sync" and self.staleness != 0:
            raise ValueError(f"method sync means staleness 0, got --staleness {self.staleness}; use --method none")
        Staleness(self.staleness, self.staleness_kind)
        if self.staleness_kind not in KINDS:
            raise ValueError(f"staleness_kind must be one of {KINDS}")
        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; choose from {', '.join(SIZES)}")
        if min(self.steps, self.prompts_per_step, self.eval_every, self.eval_problems, self.digits) < 1:
            raise ValueError("steps, prompts_per_step, eval_every, eval_problems and digits must be >= 1")
        if self.snr_every < 1:
            raise ValueError(f"snr_every must be >= 1, got {self.snr_every}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (group-normalised advantages), got {self.group_size}")
        if self.minibatches < 1 or self.prompts_per_step % self.minibatches:
            raise ValueError(f"minibatches ({self.minibatches}) must divide prompts_per_step ({self.prompts_per_step})")
        for name in ("lr", "clip_eps", "temperature", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.kl_coef < 0 or self.checkpoint_every < 0 or self.threads < 1:
            raise ValueError("kl_coef >= 0, checkpoint_every >= 0, threads >= 1 required")
        # The method configs (gac, tis, m2po, bapo) checked their own values when they were built.
        if self.gac_reference not in GAC_REFERENCES:
            raise ValueError(f"gac_reference must be one of {GAC_REFERENCES}, got {self.gac_reference!r}")
        if self.gac_space not in GAC_SPACES:
            raise ValueError(f"gac_space must be one of {GAC_SPACES}, got {self.gac_space!r}")
        if self.gac_space != "gradient" and self.gac_reference != "update":
            raise ValueError(f"--gac-space {self.gac_space} takes its reference from the previous update; "
                             "--gac-reference step applies to the gradient space only")
        if getattr(self.gac, "space", "gradient") != "gradient":
            raise ValueError("the trainer places GAC with --gac-space, not --gac.space")
        if self.ratio_to not in ("behaviour", "proximal"):
            raise ValueError(f"ratio_to must be behaviour or proximal, got {self.ratio_to!r}")
        if self.on_nonfinite not in ("raise", "mark"):
            raise ValueError(f"on_nonfinite must be raise or mark, got {self.on_nonfinite!r}")
        if self.device != "cpu" and not self.device.split(":")[0] == "cuda":
            raise ValueError(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {self.device} but torch sees no CUDA device")
        if self.model is not None:
            check_model_dir(self.model)
        if self.checkpoint_every:
            check_output_dir(self.out_dir, "--out-dir")
        if self.resume and not (Path(self.out_dir) / "checkpoint.pt").exists():
            raise ValueError(f"--resume but {self.out_dir}/checkpoint.pt does not exist")

    @property
    def axes(self) -> Combination:
        """The run's objective, direction control and step control."""
        return Combination() if self.method == "sync" else parse_method(self.method, STALE_DATA)

    @property
    def registry_method(self) -> str:
        """The canonical registry name of the run's combination (none for sync)."""
        return self.axes.name

    @property
    def label(self) -> str:
        """The record's method name: sync for naive at s = 0, else the registry name."""
        return "sync" if self.registry_method == "none" and self.staleness == 0 else self.registry_method

    def method_params(self) -> dict:
        """The parameters of the run's objective (its config group as a dict; {} for one without)."""
        config = {"tis": self.tis, "m2po": self.m2po, "bapo": self.bapo}.get(self.axes.objective)
        return {} if config is None else asdict(config)


class NonFiniteError(FloatingPointError):
    """A non-finite loss or gradient; the message names the RL step."""


@dataclass
class TrainState:
    """Everything one run carries from step to step; the ``prev_*`` fields are the cosines' references."""

    args: Args
    task: AdditionTask
    heldout: torch.Tensor
    policy: torch.nn.Module
    reference: torch.nn.Module
    behaviour: torch.nn.Module
    optimizer: torch.optim.Optimizer
    controller: gac.GradientAlignmentControl | None
    schedule: torch.Tensor
    ring: VersionRing
    generator: torch.Generator
    warm_info: dict
    step: int = 0
    records: list = field(default_factory=list)
    prev_raw: torch.Tensor | None = None  # raw gradient of the previous optimizer update
    prev_applied: torch.Tensor | None = None  # its applied (post-GAC) gradient
    prev_delta: torch.Tensor | None = None  # its parameter update θ_{k+1} − θ_k
    prev_step_grad: torch.Tensor | None = None  # summed raw gradient of the previous RL step
    diverged_at: int | None = None
    space_reference: torch.Tensor | None = None  # GAC in update/momentum space: the previous uncontrolled Δθ or m
    prev64: dict = field(default_factory=dict)  # "raw", "applied", "delta", "step_grad" -> its prev_* as Float64Vector

    @property
    def params(self) -> list[torch.Tensor]:
        return [p for p in self.policy.parameters() if p.requires_grad]


def snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def warm_start_config(args: Args) -> WarmStartConfig | None:
    """The warm start a run of ``args`` begins from (None when ``--model`` names a checkpoint)."""
    if args.model is not None:
        return None
    return WarmStartConfig(size=args.size, digits=args.digits, seed=args.warm_seed, target_accuracy=args.warm_target)


def prepare_warm_start(args: Args, log=print) -> None:
    """Train and cache the warm start of ``args`` unless it is cached, as its run's ``setup`` would (same
    thread count and device), so that parallel runs only load it."""
    config = warm_start_config(args)
    if config is not None:
        torch.set_num_threads(args.threads)
        warm_start(config, args.device, log)


# -- setup --------------------------------------------------------------------------------------------
def load_models(args: Args, device: torch.device, log) -> tuple:
    """Policy θ, reference (the starting point) and behaviour (loaded from snapshots): loaded once, then copied."""
    if args.model is not None:
        policy, warm_info = load_model(args.model).to(device), {"source": args.model}
    else:
        policy, warm_info = load_warm_start(warm_start_config(args), args.device, log)
    reference, behaviour = copy.deepcopy(policy), copy.deepcopy(policy)
    for m in (reference, behaviour):
        m.eval().requires_grad_(False)
    policy.train()
    return policy, reference, behaviour, warm_info


def setup(args: Args, log=print) -> TrainState:
    """Validate ``args``, build the run's state, and restore it from the checkpoint with ``--resume``."""
    args.validate()
    checkpoint = checked_resume(args) if args.resume else None  # refuse before the models are built
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    policy, reference, behaviour, warm_info = load_models(args, device, log)
    params = [p for p in policy.parameters() if p.requires_grad]
    use_gac = args.axes.direction == "gac"
    use_tracker = use_gac and args.gac_reference == "update" and args.gac_space == "gradient"
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    task = AdditionTask(digits=args.digits)
    state = TrainState(
        args=args, task=task, heldout=task.heldout_set(args.eval_problems), policy=policy, reference=reference,
        behaviour=behaviour, optimizer=optimizer,
        controller=gac.GradientAlignmentControl(params, args.gac) if use_tracker else None,
        schedule=Staleness(args.staleness, args.staleness_kind).sample(
            args.steps, generator=torch.Generator().manual_seed(args.seed + 7)),
        ring=VersionRing(args.staleness + 1), generator=torch.Generator().manual_seed(args.seed), warm_info=warm_info)
    if checkpoint is not None:
        restore(state, checkpoint)
        log(f"[train] resumed from {Path(args.out_dir) / 'checkpoint.pt'} at step {state.step}")
    return state


# -- one RL step ----------------------------------------------------------------------------------------
def sample_batch(state: TrainState) -> dict:
    """The behaviour policy θ_{t−s_t} answers P prompts G times each; rewards and group advantages."""
    args, step, device = state.args, state.step, torch.device(state.args.device)
    state.ring.push(step, snapshot(state.policy))
    version = max(0, step - int(state.schedule[step]))
    state.behaviour.load_state_dict(state.ring.get(version))
    operands = state.task.sample_operands(args.prompts_per_step, state.generator).repeat_interleave(args.group_size, 0)
    prompts = state.task.prompts(operands).to(device)
    responses, behaviour_logp, mask = sample(state.behaviour, prompts, state.task.answer_len, state.generator,
                                             args.temperature)
    reward, correct, _ = state.task.reward(operands, responses.cpu())
    advantages = group_advantages(reward.reshape(-1, args.group_size)).reshape(-1).to(device)
    prox_logp = None
    if args.axes.objective == "tis" or args.ratio_to == "proximal":
        with torch.no_grad():
            prox_logp, _ = token_logprobs(state.policy, prompts, responses, args.temperature)
    # The clip's denominator: π_b (default) or, with ratio_to=proximal, π_θ at the step's start.
    proximal_clip = args.ratio_to == "proximal" and args.axes.objective == "none"
    return {"version": version, "prompts": prompts, "responses": responses, "behaviour_logp": behaviour_logp,
            "mask": mask, "reward": reward, "correct": correct, "advantages": advantages, "prox_logp": prox_logp,
            "old_logp": prox_logp if proximal_clip else behaviour_logp}


def minibatch_loss(state: TrainState, batch: dict, idx: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The method's token-level loss on the samples ``idx`` (plus the KL penalty), with its statistics."""
    args = state.args
    prompts, responses, mask = batch["prompts"][idx], batch["responses"][idx], batch["mask"][idx]
    logp, entropy = token_logprobs(state.policy, prompts, responses, args.temperature)
    prox = None if batch["prox_logp"] is None else batch["prox_logp"][idx]
    objective = args.axes.objective
    loss, stats = grpo.policy_loss(objective, logp, batch["old_logp"][idx], batch["advantages"][idx],
                                   mask, args.clip_eps, method_params(objective, **args.method_params()),
                                   prox)
    if args.kl_coef > 0:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(state.reference, prompts, responses, args.temperature)
        loss = loss + args.kl_coef * grpo.kl_k3(logp, ref_logp, mask)
    stats = {**stats, "kl_behaviour": grpo.behaviour_kl(logp, batch["behaviour_logp"][idx], mask),
             "entropy": float(grpo.masked_mean(entropy.detach(), mask.float()))}
    return loss, stats


def velocity(state: TrainState) -> torch.Tensor | None:
    """AdamW's first moment (its velocity) as one flat vector; None before its first step."""
    moments = [state.optimizer.state.get(p, {}).get("exp_avg") for p in state.params]
    return None if any(m is None for m in moments) else torch.cat([m.reshape(-1) for m in moments])


def apply_braking(state: TrainState, raw: Float64Vector) -> float:
    """Adaptive Braking on the .grad in place: g ← (1 − α·cos(g, v)) g, v AdamW's first moment; returns the factor."""
    v = velocity(state)
    factor = 1.0 if v is None else braking_scale(cosine(raw, as_float64(v)), state.args.braking.braking_alpha)
    for p in state.params:
        p.grad.mul_(factor)
    return factor


def gac_on_momentum(state: TrainState) -> tuple[str, float]:
    """GAC on AdamW's first moment (space momentum), before its step: the moment it is about to form,
    m_t = β1·m_{t−1} + (1 − β1)·g, is controlled against the previous uncontrolled m, and the stored moment is shifted
    so that AdamW forms the controlled m'_t (the removed part does not come back through it). Returns (regime, γ)."""
    moments = [state.optimizer.state.get(p, {}).get("exp_avg") for p in state.params]
    beta1 = state.optimizer.param_groups[0]["betas"][0]
    # AdamW starts its moment at zero: its first one is (1 − β1)·g (no reference yet, so it is kept).
    formed = torch.cat([(p.grad * (1 - beta1) if m is None else torch.lerp(m, p.grad, 1 - beta1)).reshape(-1)
                        for m, p in zip(moments, state.params, strict=True)])
    return controlled_in_place(state, formed, lambda i, p, change: moments[i].sub_(change.view_as(p) / beta1))


def gac_on_update(state: TrainState, before: torch.Tensor) -> tuple[str, float]:
    """GAC on AdamW's proposed step Δθ_t (space update), after its step: Δθ_t is controlled against the previous
    proposed step and θ set to θ_before + Δθ'_t; AdamW's state is left as its step left it. Returns (regime, γ)."""
    proposed = flat_params(state.params) - before
    regime, scale = controlled_in_place(state, proposed, lambda i, p, change: p.data.sub_(change.view_as(p)))
    if regime == "skip":  # no move at all this update
        for p, old in zip(state.params, before.split([p.numel() for p in state.params]), strict=True):
            p.data.copy_(old.view_as(p))
    return regime, scale


def controlled_in_place(state: TrainState, vector: torch.Tensor, subtract) -> tuple[str, float]:
    """GAC's pure core on ``vector`` against ``state.space_reference``; ``subtract(i, p, change)`` removes parameter
    i's share of ``vector − vector'``. The reference then becomes ``vector`` (uncontrolled, as in gradient space)."""
    cfg, reference = state.args.gac, state.space_reference
    state.space_reference = vector.clone() if reference is None else gac.update_reference(reference, vector, cfg)
    if reference is None:
        return "keep", 1.0
    out = gac.control(vector, reference, cfg)
    regime = regime_name(int(out.regime), cfg.mode)
    if regime in ("project", "cap"):
        change = vector - out.grad
        for i, (p, piece) in enumerate(zip(state.params, change.split([p.numel() for p in state.params]),
                                           strict=True)):
            subtract(i, p, piece)
    return regime, float(out.parallel_scale)


def apply_gac(state: TrainState) -> tuple[str, float]:
    """GAC on the parameters' .grad in place (direction gac in gradient space); returns (regime, parallel scale)."""
    if state.args.axes.direction != "gac" or state.args.gac_space != "gradient":
        return NO_REGIME, 1.0
    if state.controller is not None:  # reference: the previous optimizer update's raw gradient
        report = state.controller.apply()
        return report.regime, report.parallel_scale
    if state.prev_step_grad is None:  # reference "step" before any RL step: nothing to compare with
        return "keep", 1.0
    cfg = state.args.gac
    out = gac.control(flat_grad(state.params), state.prev_step_grad, cfg)
    for p, new in zip(state.params, out.grad.split([p.numel() for p in state.params]), strict=True):
        p.grad.copy_(new.view_as(p.grad))
    return regime_name(int(out.regime), cfg.mode), float(out.parallel_scale)


def optimizer_update(state: TrainState, batch: dict, idx: torch.Tensor, where: str) -> dict:
    """One update on the samples ``idx``: loss → backward → GAC → clip → AdamW; its update-level numbers."""
    args = state.args
    loss, stats = minibatch_loss(state, batch, idx)
    if not torch.isfinite(loss):
        raise NonFiniteError(f"non-finite loss at {where}: {loss.item()}")
    lr = args.lr / (1 + int(state.schedule[state.step])) if args.axes.step == "lr_scale" else args.lr
    if args.axes.step == "kl_target":  # the KL of this update's samples, measured before its step
        lr *= kl_target_factor(stats["kl_behaviour"], args.kl_target.kl_target, args.kl_target.kl_floor)
    for group in state.optimizer.param_groups:
        group["lr"] = lr
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    raw = flat_grad(state.params)
    if not torch.isfinite(raw).all():
        raise NonFiniteError(f"non-finite gradient at {where}")
    raw64 = as_float64(raw)
    regime, scale = apply_gac(state)
    if args.axes.direction == "braking":
        scale = apply_braking(state, raw64)
    applied = raw if regime == NO_REGIME and scale == 1.0 else flat_grad(state.params)
    applied64 = raw64 if applied is raw else as_float64(applied)
    numbers = {"grad_norm": float(raw.norm()), "cos_prev": cosine_to_prev(state, "raw", raw64),
               "cos_applied": cosine_to_prev(state, "applied", applied64), "regime": regime, "parallel_scale": scale,
               "clip_frac": stats["clip_frac"], "clip_low": stats["clip_low"], "clip_high": stats["clip_high"],
               "kl_behaviour": stats["kl_behaviour"], "entropy": stats["entropy"],
               "raw": raw, "cos_update": math.nan, "step_norm": 0.0, "lr": lr}
    state.prev_raw, state.prev_applied = raw, applied
    torch.nn.utils.clip_grad_norm_(state.params, args.max_grad_norm)
    space = args.gac_space if args.axes.direction == "gac" else "gradient"
    if space == "momentum":  # on the (clipped) gradient AdamW is about to take into its moment
        regime, scale = numbers["regime"], numbers["parallel_scale"] = gac_on_momentum(state)
    if regime != "skip":  # a skipped update moves nothing; the Δθ reference stays the last real move
        before = flat_params(state.params)
        state.optimizer.step()
        if space == "update":
            numbers["regime"], numbers["parallel_scale"] = gac_on_update(state, before)
        delta = flat_params(state.params) - before
        if numbers["regime"] != "skip":
            numbers["cos_update"] = cosine_to_prev(state, "delta", as_float64(delta))
            numbers["step_norm"] = float(delta.norm())
            state.prev_delta = delta
    return numbers


def mean_of(updates: list[dict], key: str) -> float:
    """Mean of an update-level number over the step's updates (NaN entries left out; NaN if none)."""
    values = [u[key] for u in updates if not math.isnan(u[key])]
    return sum(values) / len(values) if values else math.nan


def rl_step(state: TrainState) -> dict:
    """One RL step: sample, reward, advantage, (SNR probe), minibatch updates, log. Returns its record."""
    args, step = state.args, state.step
    accuracy = heldout_accuracy(state.policy, state.task, state.heldout) if step % args.eval_every == 0 else None
    batch = sample_batch(state)
    cos_halves = probes.snr_probe(state, batch, minibatch_loss) if step % args.snr_every == 0 else math.nan
    # Minibatches split by prompt group (each group whole in one update): consecutive updates then
    # see different prompts, so their gradients share no samples.
    order = group_samples(torch.randperm(args.prompts_per_step, generator=state.generator), args.group_size,
                          args.device)
    updates = [optimizer_update(state, batch, idx, f"step {step} (update {k})")
               for k, idx in enumerate(order.chunk(args.minibatches))]
    # One update: its raw gradient is the step's (same object, so its float64 copy serves both cosines).
    step_grad = updates[0]["raw"] if len(updates) == 1 else updates[0]["raw"].clone()
    for u in updates[1:]:
        step_grad.add_(u["raw"])
    cos_prev_step = cosine_to_prev(state, "step_grad", as_float64(step_grad, state.prev64.get("raw")))
    record = make_row(
        "llm", step=step, seed=args.seed, method=args.label, label=args.label, staleness=args.staleness,
        objective=float(batch["reward"].mean()), grad_norm=mean_of(updates, "grad_norm"),
        cos_prev=mean_of(updates, "cos_prev"), cos_prev_step=cos_prev_step,
        cos_update=mean_of(updates, "cos_update"), cos_halves=cos_halves,
        snr_halves=snr_from_cosine(cos_halves),
        cos_applied=mean_of(updates, "cos_applied"),
        regime=Counter(u["regime"] for u in updates).most_common(1)[0][0],
        parallel_scale=mean_of(updates, "parallel_scale"), lr=mean_of(updates, "lr"),
        step_norm=mean_of(updates, "step_norm"), kl_behaviour=updates[0]["kl_behaviour"],
        entropy=updates[0]["entropy"], accuracy=accuracy, train_accuracy=float(batch["correct"].mean()),
        response_length=float(batch["mask"].sum(1).float().mean()), clip_frac=mean_of(updates, "clip_frac"),
        clip_low=mean_of(updates, "clip_low"), clip_high=mean_of(updates, "clip_high"),
        behaviour_version=batch["version"], ratio_to=args.ratio_to, objective_fn=args.axes.objective,
        direction_control=args.axes.direction, step_control=args.axes.step)
    state.prev_step_grad = step_grad
    state.records.append(record)
    state.step += 1
    return record


# -- the loop -------------------------------------------------------------------------------------------
def train(args: Args, state: TrainState | None = None, log=print) -> Iterator[dict]:
    """Yield the record of each RL step from ``state.step`` (a fresh ``setup(args)`` if not given) to args.steps.

    A non-finite step raises NonFiniteError (``on_nonfinite=raise``) or yields a ``diverged`` record and
    stops (``mark``). With ``checkpoint_every`` the out_dir is locked and checkpoints are written (a fresh run
    into a folder with another run's outputs is refused unless ``overwrite``).
    """
    state = setup(args, log) if state is None else state
    with out_dir_lock(args.out_dir) if args.checkpoint_every else contextlib.nullcontext():
        if args.checkpoint_every and state.step == 0:
            prepare_out_dir(args)  # a fresh run: refuse (or, with --overwrite, clear) another run's outputs
        from tqdm.auto import tqdm
        bar = tqdm(range(state.step, args.steps), disable=not args.progress, initial=state.step, total=args.steps,
                   desc=f"{args.label} s={args.staleness}", leave=False)
        for step in bar:
            try:
                record = rl_step(state)
            except NonFiniteError as err:
                if args.on_nonfinite == "raise":
                    raise
                log(f"[train] {args.label} s={args.staleness} seed={args.seed}: {err}; run stopped")
                state.diverged_at = step
                record = make_row("llm", step=step, seed=args.seed, method=args.label, label=args.label,
                                  staleness=args.staleness, diverged=True)
                state.records.append(record)
                yield record
                break
            bar.set_postfix(reward=f"{record['objective']:.2f}", cos=f"{record['cos_prev']:.2f}")
            if args.checkpoint_every and state.step % args.checkpoint_every == 0 and state.step < args.steps:
                save_checkpoint(Path(args.out_dir) / "checkpoint.pt", checkpoint_payload(state))
            yield record
        bar.close()


def summary(state: TrainState) -> dict:
    """The run's summary: its args, label, warm start, final held-out accuracy, first diverged step, and the
    fingerprint of the code that ran it (gac/, sim/)."""
    final_accuracy = heldout_accuracy(state.policy, state.task, state.heldout)
    return {"args": asdict(state.args), "label": state.args.label, "warm_start": state.warm_info,
            "final_accuracy": final_accuracy, "diverged_at": state.diverged_at,
            "code_fingerprint": trainer_fingerprint()}


def run_records(args: Args, log=print) -> dict:
    """Train to the end; ``{"records": every record (a resumed run's earlier ones too), "summary": ...}``."""
    state = setup(args, log)
    for _ in train(args, state, log):
        pass
    return {"records": state.records, "summary": summary(state)}


if __name__ == "__main__":  # the command line lives in sim/llm/__main__.py; this name stays an alias
    from sim.llm.__main__ import main

    sys.exit(main())
