"""GRPO on a small Qwen3 model with stale rollouts: `python -m sim.llm --method gac --staleness 8`.

One RL step t: the behaviour policy θ_{t−s_t} (from a ring of snapshots) samples G responses for
each of P prompts; rewards are exact-match correctness; advantages are group-normalised; the batch
is split into ``minibatches`` updates (one pass), each: token-level clipped loss → backward → GAC
(method ``gac``) → clip_grad_norm → AdamW step. Several updates per batch keep the clip active in the
synchronous baseline too (its later minibatches are off-policy by the earlier updates).

The trainer reads like CleanRL: ``setup(args)`` builds a TrainState, ``rl_step(state)`` does one RL
step and returns its record (columns of sim/schema.py), ``train(args)`` yields the records one by one
(stop it early by breaking out), ``summary(state)`` gives the final held-out accuracy. Beside the loop: its
configuration in args.py, the direction and step controls in controls.py, what it measures besides its loss in
probes.py, checkpoints in checkpoint.py, the command line in __main__.py.
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
from sim.advantages import group_advantages
from sim.llm import grpo, probes
from sim.llm.args import Args
from sim.llm.checkpoint import (
    checked_resume,
    checkpoint_payload,
    out_dir_lock,
    prepare_out_dir,
    restore,
    save_checkpoint,
    trainer_fingerprint,
)
from sim.llm.controls import apply_braking, apply_gac, build_optimizer, gac_space, learning_rate, space_report
from sim.llm.grpo import group_samples
from sim.llm.model import load_model, sample, token_logprobs
from sim.llm.probes import as_float64, cosine_to_prev, flat_grad, flat_params, snr_from_cosine
from sim.llm.task import AdditionTask
from sim.llm.warmstart import WarmStartConfig, heldout_accuracy, load_warm_start, warm_start
from sim.schema import NO_REGIME, make_row
from sim.stabilizers import method_params
from sim.staleness import Staleness, VersionRing

__all__ = ["Args", "NonFiniteError", "TrainState", "setup", "rl_step", "train", "summary", "run_records",
           "prepare_warm_start", "warm_start_config"]


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
    optimizer, controller = build_optimizer([p for p in policy.parameters() if p.requires_grad], args)
    task = AdditionTask(digits=args.digits)
    state = TrainState(
        args=args, task=task, heldout=task.heldout_set(args.eval_problems), policy=policy, reference=reference,
        behaviour=behaviour, optimizer=optimizer, controller=controller,
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


def optimizer_update(state: TrainState, batch: dict, idx: torch.Tensor, where: str) -> dict:
    """One update on the samples ``idx``: loss → backward → GAC → clip → AdamW; its update-level numbers."""
    args = state.args
    loss, stats = minibatch_loss(state, batch, idx)
    if not torch.isfinite(loss):
        raise NonFiniteError(f"non-finite loss at {where}: {loss.item()}")
    lr = learning_rate(state, stats["kl_behaviour"])
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
    if regime != "skip":  # a skipped update moves nothing; the Δθ reference stays the last real move
        before = flat_params(state.params)
        state.optimizer.step()  # GAC in update or momentum space acts inside it (gac.wrap)
        if gac_space(args) != "gradient":
            numbers["regime"], numbers["parallel_scale"] = space_report(state)
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
