"""GRPO on a small Qwen3 model with stale rollouts, one loop: ``python -m sim.llm --method gac --staleness 8``.

One RL step (``rl_step``): the policy of s_t steps ago (a ring of state dicts) samples G responses to each of P
prompts → rewards, group advantages → ``minibatches`` updates, each a gradient accumulated over micro-batches → step
control → braking → clip → ``gac.wrap(AdamW)`` → the record. A cosine is NaN where a norm is 0, and a zero vector
never becomes the next reference ("no gradient" is not "orthogonal"), the rule ``gac`` follows.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

import gac
from gac.cosine64 import as_float64, cosine64
from runtime.files import RecordStream
from runtime.fingerprint import code_fingerprint
from sim import stabilizers
from sim.advantages import group_advantages
from sim.llm import checkpoint, grpo
from sim.llm.args import Args
from sim.llm.model import Qwen3, load_model, sample, token_logprobs
from sim.llm.task import AdditionTask
from sim.llm.warmstart import heldout_accuracy, load_warm_start, warm_start
from sim.schema import NO_REGIME, columns, make_row
from sim.staleness import Staleness, VersionRing

COLLAPSE_FRACTION = 0.5
"""A run collapsed when its held-out accuracy falls below this fraction of the best of its evaluations so far (the
start included): the failure AdamW with clipping actually shows (a non-finite run is counted apart)."""


class NonFiniteError(FloatingPointError):
    """A non-finite loss or gradient; the message names the RL step."""


def collapse_step(accuracies: list[tuple[int, float]]) -> int | None:
    """The step of the first evaluation below COLLAPSE_FRACTION × the best one before it, or None."""
    best = -math.inf
    for step, accuracy in accuracies:
        if best > 0 and accuracy < COLLAPSE_FRACTION * best:
            return step
        best = max(best, accuracy)
    return None


def cosine(a: torch.Tensor, b: torch.Tensor | None) -> float:
    """cos(a, b) as gac computes it (``gac.cosine64``); NaN where either vector is 0 or there is no b."""
    if b is None or not (bool(a.detach().abs().max() > 0) and bool(b.detach().abs().max() > 0)):
        return math.nan
    return float(cosine64(as_float64(a.detach()), as_float64(b.detach())))


@dataclass
class Run:
    """Everything one run carries: its policy and optimizer, the stale policies, its randomness and records."""

    args: Args
    model: Qwen3
    optimizer: torch.optim.Optimizer
    task: AdditionTask
    heldout: torch.Tensor
    schedule: torch.Tensor
    ring: VersionRing
    generator: torch.Generator
    warm_info: dict
    behaviour: Qwen3 | None = None
    reference: Qwen3 | None = None
    records: list = field(default_factory=list)
    previous: dict = field(default_factory=dict)  # the last non-zero vector of each cosine's series
    step: int = 0
    nonfinite_at: int | None = None

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return list(self.model.parameters())

    def cosine_and_keep(self, series: str, vector: torch.Tensor) -> float:
        """cos(vector, the last non-zero vector of its series), which a non-zero ``vector`` then replaces."""
        value = cosine(vector, self.previous.get(series))
        if bool(vector.detach().abs().max() > 0):
            self.previous[series] = vector.detach().double()
        return value


def prepare_warm_start(args: Args, log=print) -> None:
    """Train and cache the warm start of ``args`` unless it is cached (parallel runs then only load it)."""
    if args.model is None:
        torch.set_num_threads(args.threads)
        warm_start(args.warm_start(), "cpu", log)


def setup(args: Args, log=print) -> Run:
    """Validate ``args``, build the run, and restore it from the checkpoint with ``--resume``."""
    args.validate()
    saved = checkpoint.checked_resume(args) if args.resume else None  # refuse before the models are built
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model, info = ((load_model(args.model), {"source": args.model}) if args.model is not None
                   else load_warm_start(args.warm_start(), "cpu", log))
    model = model.to(args.device)
    optimizer = inner = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    if args.axes.direction == "gac":
        optimizer = gac.wrap(inner, replace(args.gac, space=args.gac_space))
        if args.gac_space == "gradient":  # clip g' (GAC acts on the raw gradient): inside the wrapped step, in place,
            optimizer.swap_grads = False  # so .grad must not be the tensor GAC keeps as its reference
            inner.register_step_pre_hook(lambda *_: clip(model, args.max_grad_norm))
    task = AdditionTask(digits=args.digits)
    run = Run(args=args, model=model, optimizer=optimizer, task=task, heldout=task.heldout_set(args.eval_problems),
              schedule=Staleness(args.staleness, args.staleness_kind).sample(
                  args.steps, generator=torch.Generator().manual_seed(args.seed + 7)),
              ring=VersionRing(args.staleness + 1), generator=torch.Generator().manual_seed(args.seed),
              warm_info=info, behaviour=copy.deepcopy(model).requires_grad_(False) if args.staleness else None,
              reference=copy.deepcopy(model).requires_grad_(False) if args.kl_coef > 0 else None)
    if saved is not None:
        checkpoint.restore(run, saved)
        log(f"[train] resumed from {Path(args.out_dir) / 'checkpoint.pt'} at step {run.step}")
    return run


def clip(model: Qwen3, max_norm: float) -> None:
    if math.isfinite(max_norm):
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def autocast(args: Args):
    return torch.autocast("cuda", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()


# -- one RL step ---------------------------------------------------------------------------------------------------
def rl_step(run: Run, log=print) -> dict:
    """One RL step: sample from the stale policy, reward, advantage, (SNR probe), updates, record."""
    args, step = run.args, run.step
    accuracy = evaluate(run) if step % args.eval_every == 0 else math.nan
    version = max(0, step - int(run.schedule[step]))
    if run.behaviour is not None:  # the ring holds θ of the last s_max + 1 steps
        run.ring.push(step, {k: v.detach().clone() for k, v in run.model.state_dict().items()})
        run.behaviour.load_state_dict(run.ring.get(version))
    data = rollouts(run, run.behaviour if run.behaviour is not None else run.model)
    cos_halves = snr_probe(run, data) if step % args.snr_every == 0 else math.nan
    # Updates split the batch by prompt group, so consecutive updates share no samples.
    order = torch.randperm(args.prompts_per_step, generator=run.generator)
    updates, step_gradient = [], None
    for groups in order.chunk(args.minibatches):
        numbers, raw = update(run, data, grpo.group_samples(groups, args.group_size, args.device), f"step {step}")
        if numbers is None:
            run.records.append(make_row("llm", step=step, seed=args.seed, method=args.run_method,
                                        label=args.run_method, staleness=args.staleness, nonfinite=True))
            return run.records[-1]
        updates.append(numbers)
        step_gradient = raw if step_gradient is None else step_gradient + raw
    means = {}  # over the updates where the number is defined
    for key in ("grad_norm", "cos_prev", "cos_update", "cos_applied", "parallel_scale", "lr", "step_norm", "ess_ratio",
                "clip_frac", "clip_low", "clip_high"):
        values = [u[key] for u in updates if not math.isnan(u[key])]
        means[key] = sum(values) / len(values) if values else math.nan
    reward = float(data["reward"].mean())
    record = make_row(
        "llm", step=step, seed=args.seed, method=args.run_method, label=args.run_method, staleness=args.staleness,
        objective=reward, train_accuracy=reward, accuracy=accuracy, **means,  # the reward is exact match
        cos_prev_step=run.cosine_and_keep("step", step_gradient), cos_halves=cos_halves,
        snr_halves=cos_halves / (1 - cos_halves) if 0 < cos_halves < 1 else math.nan,
        regime=Counter(u["regime"] for u in updates).most_common(1)[0][0],
        kl_behaviour=updates[0]["kl_behaviour"], entropy=updates[0]["entropy"],
        response_length=float(data["mask"].sum(1).float().mean()), behaviour_version=version, ratio_to=args.ratio_to,
        objective_fn=args.axes.objective, direction_control=args.axes.direction, step_control=args.axes.step,
        tied_frac=data["tied_frac"], samples_drawn=data["samples_drawn"])
    run.records.append(record)
    run.step += 1
    return record


@torch.no_grad()
def rollouts(run: Run, policy: Qwen3) -> dict:
    """P groups of G samples from ``policy`` with their log-probs, rewards and advantages, as tensors of the batch."""
    args, task, group = run.args, run.task, run.args.group_size
    draws = []
    for _ in range(args.sample_attempts if args.drop_tied_groups else 1):
        operands = task.sample_operands(args.prompts_per_step, run.generator).repeat_interleave(group, 0)
        prompts = task.prompts(operands)
        with autocast(args):
            responses, logp, mask = sample(policy, prompts, task.answer_len, run.generator, args.temperature,
                                           group=group)
        reward = task.verify(operands, responses)
        tied = (reward.view(-1, group) == reward.view(-1, group)[:, :1]).all(1)
        draws.append({"prompts": prompts.to(args.device), "responses": responses, "behaviour_logp": logp,
                      "mask": mask, "reward": reward, "tied": tied})
        if sum(int((~d["tied"]).sum()) for d in draws) >= args.prompts_per_step:
            break
    tied = torch.cat([d["tied"] for d in draws])
    # Dynamic sampling keeps the untied groups first; short of P of them, tied ones fill the batch.
    order = torch.argsort(tied.to(torch.int8), stable=True) if args.drop_tied_groups else torch.arange(len(tied))
    chosen = order[:args.prompts_per_step]

    def batch(name: str) -> torch.Tensor:
        grouped = torch.cat([d[name].view(-1, group, *d[name].shape[1:]) for d in draws])
        return grouped[chosen.to(grouped.device)].flatten(0, 1)

    data = {name: batch(name) for name in ("prompts", "responses", "behaviour_logp", "mask", "reward")}
    data |= {"tied_frac": float(tied.float().mean()), "samples_drawn": len(tied) * group,
             "advantages": group_advantages(data["reward"].view(-1, group)).view(-1).to(args.device)}
    everything = micro_batches(run, torch.arange(len(data["prompts"]), device=args.device))
    if args.axes.objective == "tis" or args.ratio_to == "proximal" or args.axes.step == "vcpo":
        with autocast(args):
            data["prox_logp"] = torch.cat([token_logprobs(run.model, data["prompts"][c], data["responses"][c],
                                                          args.temperature)[0] for c in everything])
    if args.axes.step == "vcpo" and args.vcpo.vcpo_baseline:  # (R − b)/(std + ε), b the off-policy baseline
        weights, norms = [], []
        for c in everything:
            logp, _, logp_all = token_logprobs(run.model, data["prompts"][c], data["responses"][c], args.temperature,
                                               True)
            valid = data["mask"][c].float()
            weights.append((logp - data["behaviour_logp"][c]) * valid)
            norms.append(stabilizers.logit_score_sq(logp_all, logp, valid))
        weights = stabilizers.sequence_weights(torch.cat(weights), data["mask"].float()).view(-1, group)
        rewards = data["reward"].to(weights.device, weights.dtype).view(-1, group)
        baseline = stabilizers.vcpo_baseline(rewards, weights, torch.cat(norms).view(-1, group))
        data["advantages"] = group_advantages(rewards, baseline=baseline).view(-1).float()
    # The clip's denominator: π_b, or with ratio_to=proximal π_θ at the step's start (stale data used as if fresh).
    proximal = args.ratio_to == "proximal" and args.axes.objective == "none"
    data["old_logp"] = data["prox_logp"] if proximal else data["behaviour_logp"]
    return data


def micro_batches(run: Run, samples: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return samples.split(run.args.micro_batch or len(samples))


def accumulate_gradient(run: Run, data: dict, samples: torch.Tensor) -> dict:
    """Backward of the loss of ``samples`` by micro-batches weighted by their share of its tokens; its statistics."""
    args, valid = run.args, data["mask"][samples].float()
    tokens = valid.sum().clamp_min(1)
    totals, log_ratios = Counter(), []
    config = {"tis": args.tis, "m2po": args.m2po, "bapo": args.bapo}.get(args.axes.objective)
    params = {} if config is None else asdict(config)  # the objective's parameters, if it has any
    for chunk in micro_batches(run, samples):
        pick = {k: data[k][chunk] for k in ("prompts", "responses", "behaviour_logp", "mask", "advantages",
                                            "old_logp", "prox_logp") if k in data}
        with autocast(args):
            logp, entropy = token_logprobs(run.model, pick["prompts"], pick["responses"], args.temperature)
        mask = pick["mask"]
        share = mask.sum() / tokens
        loss, stats = grpo.policy_loss(args.axes.objective, logp, pick["old_logp"], pick["advantages"], mask,
                                       args.clip_eps, params, pick.get("prox_logp"))
        if args.kl_coef > 0:
            with torch.no_grad(), autocast(args):
                ref_logp, _ = token_logprobs(run.reference, pick["prompts"], pick["responses"], args.temperature)
            loss = loss + args.kl_coef * grpo.kl_k3(logp, ref_logp, mask)
        (loss * share).backward()
        totals.update(loss=float(loss.detach() * share), clip_frac=stats["clip_frac"] * float(share),
                      kl_behaviour=float(grpo.kl_k3(pick["behaviour_logp"], logp.detach(), mask)) * float(share),
                      entropy=float(grpo.masked_mean(entropy.detach(), mask.float()) * share))
        log_ratios.append(((logp.detach() - pick["behaviour_logp"]) * mask).double())
    weights = stabilizers.sequence_weights(torch.cat(log_ratios), valid.double())
    return {**totals, "clip_low": stats["clip_low"], "clip_high": stats["clip_high"],
            "ess_ratio": float(stabilizers.effective_sample_size(weights)[1])}


def update(run: Run, data: dict, samples: torch.Tensor, where: str) -> tuple[dict | None, torch.Tensor | None]:
    """One update on ``samples``: gradient → step size → braking → clip → (GAC-)AdamW; its numbers and raw
    gradient, or (None, None) when a non-finite loss or gradient stopped the run."""
    args, optimizer, params = run.args, run.optimizer, run.params
    optimizer.zero_grad(set_to_none=True)
    stats = accumulate_gradient(run, data, samples)
    raw = torch.cat([p.grad.reshape(-1) for p in params])
    if not (math.isfinite(stats["loss"]) and bool(torch.isfinite(raw).all())):
        if args.on_nonfinite == "raise":
            raise NonFiniteError(f"non-finite {'loss' if not math.isfinite(stats['loss']) else 'gradient'} at {where}")
        run.nonfinite_at = run.step
        return None, None
    lr = args.lr / (1 + int(run.schedule[run.step])) if args.axes.step == "lr_scale" else args.lr
    if args.axes.step == "kl_target":
        lr *= stabilizers.kl_target_factor(stats["kl_behaviour"], args.kl_target.kl_target, args.kl_target.kl_floor)
    if args.axes.step == "vcpo":
        lr *= stabilizers.vcpo_step_factor(stats["ess_ratio"], args.vcpo.vcpo_reference_ratio, args.vcpo.vcpo_power)
    for group in optimizer.param_groups:
        group["lr"] = lr
    scale, regime = 1.0, NO_REGIME
    if args.axes.direction == "braking":  # g ← (1 − α·cos(g, m)) g, m AdamW's first moment (none before step 1)
        moments = [optimizer.state[p].get("exp_avg") for p in params]
        if all(m is not None for m in moments):
            scale = float(stabilizers.braking_scale(cosine(raw, torch.cat([m.reshape(-1) for m in moments])),
                                                    args.braking.braking_alpha))
            torch._foreach_mul_([p.grad for p in params], scale)
    if not (args.axes.direction == "gac" and args.gac_space == "gradient"):
        clip(run.model, args.max_grad_norm)  # GAC in the gradient space clips g' inside its step (setup)
    before = torch.cat([p.detach().reshape(-1) for p in params])
    optimizer.step()
    moved = torch.cat([p.detach().reshape(-1) for p in params]) - before
    applied = torch.cat([p.grad.reshape(-1) for p in params]) if args.axes.direction != "none" else raw
    report = getattr(optimizer, "last_report", None)
    if report is not None:
        regime, scale = report.regime, report.parallel_scale
        if report.regime == "skip" and args.gac_space == "gradient":
            applied = torch.zeros_like(raw)
    return {"grad_norm": float(raw.norm()), "cos_prev": run.cosine_and_keep("raw", raw),
            "cos_applied": run.cosine_and_keep("applied", applied), "cos_update": run.cosine_and_keep("update", moved),
            "step_norm": float(moved.norm()), "regime": regime, "parallel_scale": scale, "lr": lr, **stats}, raw


def snr_probe(run: Run, data: dict) -> float:
    """cos of the raw gradients of the two halves of the step's groups at θ (E ≈ SNR/(1 + SNR) of a half); leaves no
    gradient behind and draws no random numbers."""
    halves, gradients = torch.arange(run.args.prompts_per_step).chunk(2), []
    if len(halves) < 2:
        return math.nan
    for half in halves:
        run.optimizer.zero_grad(set_to_none=True)
        accumulate_gradient(run, data, grpo.group_samples(half, run.args.group_size, run.args.device))
        gradients.append(torch.cat([p.grad.reshape(-1) for p in run.params]))
    run.optimizer.zero_grad(set_to_none=True)
    return cosine(*gradients)


def evaluate(run: Run) -> float:
    with autocast(run.args):
        return heldout_accuracy(run.model, run.task, run.heldout)


# -- the loop ------------------------------------------------------------------------------------------------------
def train(args: Args, run: Run | None = None, log=print) -> Iterator[dict]:
    """Yield the record of each RL step from ``run.step`` (a fresh ``setup(args)`` if not given) to args.steps; with
    ``checkpoint_every``, in the locked out_dir, saving checkpoints. A ``nonfinite`` record (``mark``) is the last."""
    run = setup(args, log) if run is None else run
    with checkpoint.out_dir_lock(args.out_dir) if args.checkpoint_every else contextlib.nullcontext():
        if args.checkpoint_every and run.step == 0:
            checkpoint.prepare_out_dir(args)
        from tqdm.auto import tqdm
        bar = tqdm(range(run.step, args.steps), disable=not args.progress, initial=run.step, total=args.steps,
                   desc=f"{args.run_method} s={args.staleness}", leave=False)
        for _ in bar:
            record = rl_step(run, log)
            yield record
            if record["nonfinite"]:
                break
            bar.set_postfix(reward=f"{record['objective']:.2f}", cos=f"{record['cos_prev']:.2f}")
            if args.checkpoint_every and run.step % args.checkpoint_every == 0 and run.step < args.steps:
                checkpoint.save_checkpoint(Path(args.out_dir) / "checkpoint.pt", checkpoint.checkpoint_payload(run))
        bar.close()


def summary(run: Run) -> dict:
    """Args, warm start, start and final held-out accuracy, where it failed, and the code's fingerprint."""
    final = evaluate(run) if run.nonfinite_at is None else math.nan
    accuracies = [(r["step"], r["accuracy"]) for r in run.records if not math.isnan(r["accuracy"])]
    start = accuracies[0][1] if accuracies and accuracies[0][0] == 0 else math.nan
    collapsed_at = collapse_step(accuracies + ([(run.step, final)] if run.nonfinite_at is None else []))
    return {"args": asdict(run.args), "method": run.args.run_method, "warm_start": run.warm_info,
            "start_accuracy": start, "final_accuracy": final, "eval_problems": len(run.heldout),
            "nonfinite_at": run.nonfinite_at, "collapsed_at": collapsed_at,
            "collapsed": collapsed_at is not None or run.nonfinite_at is not None,
            "code_fingerprint": code_fingerprint(checkpoint.CODE)}


def run_records(args: Args, log=print, records_path: Path | str | None = None) -> dict:
    """Train to the end: {"records", "summary"}; each record also goes to ``records_path`` as soon as it is made."""
    run = setup(args, log)
    stream = RecordStream(records_path, columns("llm"), list(run.records)) if records_path else None
    with stream or contextlib.nullcontext():
        for record in train(args, run, log):
            if stream is not None:
                stream.append(record)
    return {"records": run.records, "summary": summary(run)}
