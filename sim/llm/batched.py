"""K GRPO runs of one shape trained in lockstep in one process: the trainer's step with a leading run dimension.

``setup_batch([args, ...])`` stacks the runs' policies into θ (K, P) (``stacked.py``); ``rl_step_batch`` does one
RL step of every run — sample, reward, advantage, (SNR probe), minibatch updates: loss → backward → GAC → clip →
AdamW — and returns one record per run. Each run keeps its own staleness ring, generator, step size, AdamW state,
clipping norm, GAC state and records; the loss is the sum of the runs' losses, so each run's gradient is its own
row of θ.grad. A single run is the K = 1 case (``sim.llm.train`` runs through it).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, fields, replace
from typing import TYPE_CHECKING

import torch

from gac.cosine64 import as_float64
from sim.advantages import group_advantages
from sim.llm import controls, grpo, probes, stacked
from sim.llm.checkpoint import trainer_fingerprint
from sim.llm.grpo import group_samples
from sim.llm.model import load_model
from sim.llm.rows import AdamWRows, adamw_step, clip_rows, gac_thresholds
from sim.llm.state import BatchState, NonFiniteError, RunState
from sim.llm.task import AdditionTask
from sim.llm.warmstart import load_warm_start
from sim.schema import NO_REGIME, make_row
from sim.stabilizers import effective_sample_size, sequence_weights
from sim.staleness import Staleness, VersionRing

if TYPE_CHECKING:
    from sim.llm.args import Args

PER_RUN = ("seed", "lr", "staleness", "staleness_kind", "method", "warm_seed", "warm_target", "warm_ceiling",
           "warm_sft_problems", "warm_max_steps", "warm_attempts", "model", "clip_eps", "kl_coef", "max_grad_norm",
           "tis", "m2po", "bapo", "braking", "kl_target", "vcpo", "out_dir", "progress")
"""Args fields that may differ between the runs of one batch (besides GAC's fixed threshold τ); every other field
(model size, task and batch shapes, steps, the method's axes and placement, device, threads) is the batch's."""


def batch_key(args: Args) -> tuple:
    """Runs with equal keys can share a batch: same shapes and the same kind of method (its numbers may differ)."""
    shared = tuple((f.name, repr(getattr(args, f.name))) for f in fields(args) if f.name not in PER_RUN + ("gac",))
    cfg = args.gac
    gac_shape = replace(cfg, threshold=0.0) if isinstance(cfg.threshold, float) else cfg
    return (*shared, ("axes", repr(args.axes)), ("gac", repr(gac_shape)))


def initial_policy(args: Args, device, log, cache: dict) -> tuple[torch.nn.Module, dict]:
    """The run's starting policy (its warm start, or ``--model``), loaded once per distinct source."""
    source = args.model if args.model is not None else args.warm_start()
    key = repr(source)
    if key not in cache:
        cache[key] = ((load_model(args.model).to(device), {"source": args.model}) if args.model is not None
                      else load_warm_start(source, str(device), log))
    return cache[key]


def setup_batch(runs_args: list[Args], log=print) -> BatchState:
    """The batch of ``runs_args`` (validated, same ``batch_key``), each run at step 0."""
    if not runs_args:
        raise ValueError("setup_batch needs at least one run")
    for args in runs_args:
        args.validate()
    keys = {batch_key(args) for args in runs_args}
    if len(keys) > 1:
        first = dict(batch_key(runs_args[0]))
        other = next(dict(k) for k in keys if dict(k) != first)
        differing = sorted(name for name in first if first[name] != other.get(name))
        raise ValueError(f"runs of one batch must share {', '.join(differing)} (only {', '.join(PER_RUN)} and "
                         "GAC's fixed threshold may differ)")
    args = runs_args[0]
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cache: dict = {}
    policies = [initial_policy(a, device, log, cache) for a in runs_args]
    layout = stacked.Layout(policies[0][0])
    theta = stacked.stack([model for model, _ in policies]).to(device)
    task = AdditionTask(digits=args.digits)
    runs = [RunState(args=a, schedule=Staleness(a.staleness, a.staleness_kind).sample(
                         a.steps, generator=torch.Generator().manual_seed(a.seed + 7)),
                     ring=VersionRing(a.staleness + 1), generator=torch.Generator().manual_seed(a.seed),
                     warm_info=info)
            for a, (_, info) in zip(runs_args, policies, strict=True)]
    return BatchState(runs=runs, layout=layout, task=task, heldout=task.heldout_set(args.eval_problems),
                      theta=theta.clone().requires_grad_(True), reference=theta.clone(),
                      adam=AdamWRows.zeros(theta))


# -- one RL step -----------------------------------------------------------------------------------------
@torch.no_grad()
def heldout_accuracy(batch: BatchState) -> list[float]:
    """Each run's greedy exact-match accuracy on the fixed held-out problems (one batched decode)."""
    runs = len(batch.runs)
    prompts = batch.task.prompts(batch.heldout)[None].expand(runs, -1, -1)
    responses, _, _ = stacked.sample(batch.layout, batch.theta.detach(), prompts, batch.task.answer_len, greedy=True)
    return [float(batch.task.verify(batch.heldout, responses[k].cpu())[0].mean()) for k in range(runs)]


def sample_batch(batch: BatchState) -> dict:
    """Each run's behaviour policy θ_{t−s_t} answers its P prompts G times each; rewards and group advantages."""
    args, step, device = batch.args, batch.step, batch.theta.device
    behaviour, operands = [], []
    for k, run in enumerate(batch.runs):
        run.ring.push(step, batch.theta[k].detach().clone())
        behaviour.append(run.ring.get(max(0, step - int(run.schedule[step]))))
        operands.append(batch.task.sample_operands(args.prompts_per_step, run.generator)
                        .repeat_interleave(args.group_size, 0))
    prompts = torch.stack([batch.task.prompts(o) for o in operands]).to(device)
    responses, behaviour_logp, mask = stacked.sample(
        batch.layout, torch.stack(behaviour), prompts, batch.task.answer_len, [r.generator for r in batch.runs],
        args.temperature, group=args.group_size)
    rewards = [batch.task.reward(o, r.cpu()) for o, r in zip(operands, responses, strict=True)]
    reward, correct = torch.stack([r[0] for r in rewards]), torch.stack([r[1] for r in rewards])
    advantages = group_advantages(reward.reshape(len(batch.runs), -1, args.group_size)).reshape(reward.shape)
    prox_logp = None
    if args.axes.objective == "tis" or args.ratio_to == "proximal":
        with torch.no_grad():
            prox_logp, _ = stacked.token_logprobs(batch.layout, batch.theta, prompts, responses, args.temperature)
    if args.axes.step == "vcpo" and any(run.args.vcpo.vcpo_baseline for run in batch.runs):
        advantages = controls.vcpo_advantages(batch, prompts, responses, behaviour_logp, mask, reward, advantages)
    # The clip's denominator: π_b (default) or, with ratio_to=proximal, π_θ at the step's start.
    proximal_clip = args.ratio_to == "proximal" and args.axes.objective == "none"
    return {"version": [max(0, step - int(r.schedule[step])) for r in batch.runs], "prompts": prompts,
            "responses": responses, "behaviour_logp": behaviour_logp, "mask": mask, "reward": reward,
            "correct": correct, "advantages": advantages.to(device), "prox_logp": prox_logp,
            "old_logp": prox_logp if proximal_clip else behaviour_logp}


def minibatch_losses(batch: BatchState, data: dict, idx: torch.Tensor) -> tuple[list, list]:
    """Each live run's token-level loss on its samples ``idx[k]`` (plus its KL penalty) and statistics; one
    batched forward for all runs, then the method's loss run by run (None for a stopped run)."""
    runs = torch.arange(len(batch.runs), device=idx.device)[:, None]

    def pick(name):
        return None if data[name] is None else data[name][runs, idx]

    prompts, responses, mask = pick("prompts"), pick("responses"), pick("mask")
    temperature, objective = batch.args.temperature, batch.args.axes.objective
    logp, entropy = stacked.token_logprobs(batch.layout, batch.theta, prompts, responses, temperature)
    old, behaviour, advantages, prox = pick("old_logp"), pick("behaviour_logp"), pick("advantages"), pick("prox_logp")
    ref_logp = None
    if any(run.args.kl_coef > 0 for run in batch.runs):
        with torch.no_grad():
            ref_logp, _ = stacked.token_logprobs(batch.layout, batch.reference, prompts, responses, temperature)
    losses, stats = [], []
    for k, run in enumerate(batch.runs):
        if run.diverged_at is not None:
            losses.append(None)
            stats.append(None)
            continue
        a = run.args
        loss, s = grpo.policy_loss(objective, logp[k], old[k], advantages[k], mask[k], a.clip_eps,
                                   a.method_params(), None if prox is None else prox[k])
        if a.kl_coef > 0:
            loss = loss + a.kl_coef * grpo.kl_k3(logp[k], ref_logp[k], mask[k])
        losses.append(loss)
        weights = sequence_weights((logp[k] - behaviour[k]).double(), mask[k].double())
        stats.append({**s, "kl_behaviour": grpo.behaviour_kl(logp[k], behaviour[k], mask[k]),
                      "entropy": float(grpo.masked_mean(entropy[k].detach(), mask[k].float())),
                      "ess_ratio": float(effective_sample_size(weights)[1])})
    return losses, stats


def backward(batch: BatchState, losses: list) -> torch.Tensor:
    """θ.grad (K, P) of the sum of the live runs' losses: row k is run k's own gradient (zero for stopped runs)."""
    batch.theta.grad = None
    live = [loss for loss in losses if loss is not None]
    if live:
        sum(live).backward()
    return batch.theta.grad if batch.theta.grad is not None else torch.zeros_like(batch.theta)


def stop_run(batch: BatchState, k: int, message: str, log) -> None:
    """A run's loss or gradient is not finite: raise (on_nonfinite=raise) or stop that run alone (mark)."""
    run = batch.runs[k]
    where = f"{message}" if len(batch.runs) == 1 else f"{message} (run {k}: {run.args.run_method} seed {run.args.seed})"
    if run.args.on_nonfinite == "raise":
        raise NonFiniteError(where)
    log(f"[train] {run.args.run_method} s={run.args.staleness} seed={run.args.seed}: {where}; run stopped")
    run.diverged_at = batch.step
    run.records.append(make_row("llm", step=batch.step, seed=run.args.seed, method=run.args.run_method,
                                label=run.args.run_method, staleness=run.args.staleness, diverged=True))


def optimizer_update(batch: BatchState, data: dict, idx: torch.Tensor, where: str,
                     log) -> tuple[list[dict | None], torch.Tensor]:
    """One update of every live run on its samples ``idx[k]``, each line one step of the algorithm: loss → step size
    → backward (a run whose loss or gradient is not finite stops here) → direction control on the raw gradient →
    clip → AdamW, with GAC in momentum or update space around it. Per run its update-level numbers (None for a
    stopped run), and the raw gradients (K, P)."""
    losses, stats = finite_losses(batch, data, idx, where, log)
    lr = controls.learning_rates(batch, stats)  # the step control (lr_scale, kl_target, vcpo), before the step
    grad = finite_gradient(batch, losses, where, log)
    if not batch.live:
        return [None] * len(batch.runs), grad
    raw = grad.clone()
    raw64 = as_float64(raw)
    regimes, scales = direction_control(batch, grad, raw, raw64)
    numbers = gradient_numbers(batch, raw, raw64, grad, regimes, scales)
    clip_rows(grad, batch.layout.sizes, [r.args.max_grad_norm for r in batch.runs])
    regimes, scales, delta, moved = controlled_step(batch, grad, lr, regimes, scales)
    numbers |= step_numbers(batch, delta, moved)
    return update_numbers(batch, stats, lr, regimes, scales, numbers), raw


def finite_losses(batch: BatchState, data: dict, idx: torch.Tensor, where: str, log) -> tuple[list, list]:
    """``minibatch_losses``, with each run whose loss is not finite stopped (``stop_run``), its loss and stats None."""
    losses, stats = minibatch_losses(batch, data, idx)
    for k in batch.live:
        if not torch.isfinite(losses[k]):
            stop_run(batch, k, f"non-finite loss at {where}: {losses[k].item()}", log)
            losses[k] = stats[k] = None
    return losses, stats


def finite_gradient(batch: BatchState, losses: list, where: str, log) -> torch.Tensor:
    """The gradient rows (K, P) of ``losses`` (``backward``); a run whose gradient is not finite is stopped and its
    row zeroed, so no NaN reaches a parameter or a reference."""
    grad = backward(batch, losses)
    finite = torch.isfinite(grad).all(1).tolist()
    for k in batch.live:
        if not finite[k]:
            stop_run(batch, k, f"non-finite gradient at {where}", log)
    return torch.where(torch.tensor(finite, device=grad.device)[:, None], grad, torch.zeros_like(grad))


def live_mask(batch: BatchState, runs: list[int]) -> torch.Tensor:
    """(K,) bool: which rows of the batch are in ``runs`` (the rows whose reference a ``PrevRows.set`` replaces)."""
    return torch.tensor([k in runs for k in range(len(batch.runs))], device=batch.theta.device)


def direction_control(batch: BatchState, grad: torch.Tensor, raw: torch.Tensor,
                      raw64) -> tuple[list[str], list[float]]:
    """The method's direction control on the gradient rows ``grad``, in place, before clipping: GAC in gradient space
    (``controls.apply_gac``) or Adaptive Braking (``controls.apply_braking``). Per run its regime and parallel scale
    (braking: its factor); NO_REGIME and 1.0 where nothing acts here (GAC in momentum or update space acts later)."""
    args, runs = batch.args, len(batch.runs)
    if args.axes.direction == "gac" and controls.gac_space(args) == "gradient":
        return controls.apply_gac(batch, grad, raw, args.gac, gac_thresholds([r.args.gac for r in batch.runs]))
    if args.axes.direction == "braking":
        return [NO_REGIME] * runs, controls.apply_braking(batch, grad, raw64)
    return [NO_REGIME] * runs, [1.0] * runs


def gradient_numbers(batch: BatchState, raw: torch.Tensor, raw64, grad: torch.Tensor, regimes: list[str],
                     scales: list[float]) -> dict[str, list]:
    """Each run's raw gradient norm, and the cosines of its raw and of its applied (direction-controlled) gradient with
    the previous update's, which they then replace as references (a stopped run keeps its own)."""
    changed = any(r != NO_REGIME for r in regimes) or any(s != 1.0 for s in scales)
    applied64 = as_float64(grad.clone()) if changed else raw64
    live = live_mask(batch, batch.live)
    numbers = {"grad_norm": raw.norm(dim=1).tolist(), "cos_prev": batch.prev["raw"].cosine(raw64),
               "cos_applied": batch.prev["applied"].cosine(applied64)}
    batch.prev["raw"].set(raw64, live)
    batch.prev["applied"].set(applied64, live)
    return numbers


def controlled_step(batch: BatchState, grad: torch.Tensor, lr: list[float], regimes: list[str],
                    scales: list[float]) -> tuple[list[str], list[float], torch.Tensor, list[int]]:
    """AdamW's step of every live run that GAC does not skip, with GAC in momentum space (on the moment AdamW is
    about to form from the clipped gradient, before the step) or in update space (on the proposed Δθ, after it).
    Returns the regimes and scales (those of the space's GAC where it acts), the applied step Δθ (K, P), and the
    runs that moved."""
    args = batch.args
    space, tau = controls.gac_space(args), gac_thresholds([r.args.gac for r in batch.runs])
    if space == "momentum":
        regimes, scales = controls.gac_on_momentum(batch, grad, args.gac, tau)
    stepping = [k for k in batch.live if regimes[k] != "skip"]  # a skipped update moves nothing
    before = batch.theta.detach().clone()
    adamw_step(batch.theta, grad, batch.adam, lr, stepping)
    if space == "update" and stepping:
        regimes, scales = controls.gac_on_update(batch, before, args.gac, tau)
    moved = [k for k in stepping if regimes[k] != "skip"]
    return regimes, scales, batch.theta.detach() - before, moved


def step_numbers(batch: BatchState, delta: torch.Tensor, moved: list[int]) -> dict[str, list]:
    """Each run's step norm ‖Δθ‖ and the cosine of its step with its previous one, which it then replaces as the
    reference; a run that did not move (skipped, stopped) gets NaN and 0 and keeps its reference."""
    delta64 = as_float64(delta)
    cos_update, norms = batch.prev["delta"].cosine(delta64), delta.norm(dim=1).tolist()
    batch.prev["delta"].set(delta64, live_mask(batch, moved))
    return {"cos_update": [cos_update[k] if k in moved else math.nan for k in range(len(batch.runs))],
            "step_norm": [norms[k] if k in moved else 0.0 for k in range(len(batch.runs))]}


def update_numbers(batch: BatchState, stats: list, lr: list[float], regimes: list[str], scales: list[float],
                   numbers: dict[str, list]) -> list[dict | None]:
    """Per live run the update's numbers (its loss statistics, gradient and step numbers, regime, step size); None
    for a stopped run."""
    out: list[dict | None] = []
    for k in range(len(batch.runs)):
        if k not in batch.live:
            out.append(None)
            continue
        s = stats[k]
        out.append({"grad_norm": numbers["grad_norm"][k], "cos_prev": numbers["cos_prev"][k],
                    "cos_applied": numbers["cos_applied"][k], "regime": regimes[k], "parallel_scale": scales[k],
                    "clip_frac": s["clip_frac"], "clip_low": s["clip_low"], "clip_high": s["clip_high"],
                    "kl_behaviour": s["kl_behaviour"], "entropy": s["entropy"], "ess_ratio": s["ess_ratio"],
                    "cos_update": numbers["cos_update"][k], "step_norm": numbers["step_norm"][k], "lr": lr[k]})
    return out


def mean_of(updates: list[dict], key: str) -> float:
    """Mean of an update-level number over the step's updates (NaN entries left out; NaN if none)."""
    values = [u[key] for u in updates if not math.isnan(u[key])]
    return sum(values) / len(values) if values else math.nan


def rl_step_batch(batch: BatchState, log=print) -> list[dict | None]:
    """One RL step of every live run: sample, reward, advantage, (SNR probe), minibatch updates, log. Returns each
    run's record (its ``diverged`` record if it stopped in this step; None for a run stopped before)."""
    args, step, runs = batch.args, batch.step, len(batch.runs)
    accuracy = heldout_accuracy(batch) if step % args.eval_every == 0 else [None] * runs
    data = sample_batch(batch)
    probing = step % args.snr_every == 0
    cos_halves = probes.snr_probe(batch, data, minibatch_losses, backward) if probing else [math.nan] * runs
    # Minibatches split by prompt group (each group whole in one update): consecutive updates then
    # see different prompts, so their gradients share no samples.
    order = torch.stack([group_samples(torch.randperm(args.prompts_per_step, generator=run.generator),
                                       args.group_size, batch.theta.device) for run in batch.runs])
    was_live = batch.live
    updates, step_grad = [], None
    for u, idx in enumerate(order.chunk(args.minibatches, dim=1)):
        numbers, raw = optimizer_update(batch, data, idx, f"step {step} (update {u})", log)
        updates.append(numbers)
        step_grad = raw if step_grad is None else step_grad + raw
    live = batch.live
    # One update: its raw gradient is the step's (same object, so its float64 copy serves both cosines).
    step64 = as_float64(step_grad, batch.prev["raw"].vector)
    cos_prev_step = batch.prev["step_grad"].cosine(step64)
    batch.prev["step_grad"].set(step64, torch.tensor([k in live for k in range(runs)], device=step_grad.device))
    batch.step_grad_reference = step_grad
    records: list[dict | None] = []
    for k, run in enumerate(batch.runs):
        if k not in live:
            records.append(run.records[-1] if k in was_live else None)
            continue
        a, mine = run.args, [u[k] for u in updates]
        record = make_row(
            "llm", step=step, seed=a.seed, method=a.run_method, label=a.run_method, staleness=a.staleness,
            objective=float(data["reward"][k].mean()), grad_norm=mean_of(mine, "grad_norm"),
            cos_prev=mean_of(mine, "cos_prev"), cos_prev_step=cos_prev_step[k],
            cos_update=mean_of(mine, "cos_update"), cos_halves=cos_halves[k],
            snr_halves=probes.snr_from_cosine(cos_halves[k]), cos_applied=mean_of(mine, "cos_applied"),
            regime=Counter(u["regime"] for u in mine).most_common(1)[0][0],
            parallel_scale=mean_of(mine, "parallel_scale"), lr=mean_of(mine, "lr"),
            step_norm=mean_of(mine, "step_norm"), kl_behaviour=mine[0]["kl_behaviour"],
            entropy=mine[0]["entropy"], ess_ratio=mean_of(mine, "ess_ratio"), accuracy=accuracy[k],
            train_accuracy=float(data["correct"][k].mean()),
            response_length=float(data["mask"][k].sum(1).float().mean()), clip_frac=mean_of(mine, "clip_frac"),
            clip_low=mean_of(mine, "clip_low"), clip_high=mean_of(mine, "clip_high"),
            behaviour_version=data["version"][k], ratio_to=a.ratio_to, objective_fn=a.axes.objective,
            direction_control=a.axes.direction, step_control=a.axes.step)
        run.records.append(record)
        records.append(record)
    batch.step += 1
    return records


def final_accuracy(batch: BatchState) -> list[float]:
    """Each run's held-out accuracy at its current θ."""
    return heldout_accuracy(batch)


def run_policy(batch: BatchState, k: int) -> torch.nn.Module:
    """Run k's current policy as an HF model (for saving, sampling or evaluating it alone)."""
    model, _ = initial_policy(batch.runs[k].args, batch.theta.device, lambda *a: None, {})
    return stacked.load_row(model, batch.theta[k].detach())


def train_batch(runs_args: list[Args], log=print) -> list[dict]:
    """Train the batch to the end; per run ``{"records": ..., "summary": ...}`` (as ``train.run_records``)."""
    batch = setup_batch(runs_args, log)
    for _ in range(batch.args.steps):
        if not batch.live:
            break
        rl_step_batch(batch, log)
    accuracy = final_accuracy(batch)
    return [{"records": run.records,
             "summary": {"args": asdict(run.args), "method": run.args.run_method, "warm_start": run.warm_info,
                         "final_accuracy": accuracy[k], "diverged_at": run.diverged_at,
                         "code_fingerprint": trainer_fingerprint()}}
            for k, run in enumerate(batch.runs)]
