"""GRPO on a small Qwen3 model with stale rollouts: ``python -m sim.llm --method gac --staleness 8``.

Read top to bottom (the configuration, ``Args``, is sim/llm/args.py): the GRPO losses, then one RL step
(``rl_step``): the policy of s_t steps ago (a ring of state dicts) samples G responses to each of P prompts → rewards,
group advantages → ``minibatches`` updates, each a gradient accumulated over micro-batches → step control → braking →
clip → ``gac.wrap(AdamW)`` → the record. A cosine is NaN where a norm is 0, and a zero vector never becomes the next
reference ("no gradient" is not "orthogonal"), the rule ``gac`` follows.
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
from runtime import checkpoint
from runtime.files import RecordStream, claim_out_dir, out_dir_lock
from runtime.fingerprint import code_fingerprint, source_hashes
from sim import stabilizers
from sim.advantages import group_advantages
from sim.llm.args import Args
from sim.llm.model import Qwen3, load_model, sample, token_logprobs
from sim.llm.task import AdditionTask
from sim.llm.warmstart import heldout_accuracy, load_warm_start
from sim.schema import NO_REGIME, collapse_step, columns, make_row
from sim.staleness import Staleness, VersionRing

CODE = ("gac", "sim")
"""The source a run executes: its checkpoints and summary record this code's fingerprint."""
OUTPUT_ONLY = ("progress", "resume", "out_dir", "checkpoint_every", "steps", "overwrite", "allow_code_change")
"""Args fields that cannot change a run's numbers (``steps`` only upwards); ``threads`` can (long sums' last bits)."""
RUN_FILES = ("records.csv", "summary.json", "checkpoint.pt", "checkpoint.pt.sha256")


# -- the GRPO losses -----------------------------------------------------------------------------------------------
def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1)


def policy_loss(method: str, logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip_eps: float, params: dict,
                prox_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """The token-level loss of objective ``method`` (a sum over valid tokens divided by their count) on logp,
    behaviour_logp, mask (n, T) and advantages (n,), with its clip_frac and clip bounds (NaN for m2po). The clipped
    surrogate −min(r·A, clip(r, 1−ε, 1+ε)·A), r = π_θ/π_b; tis clips π_θ/π_prox (``prox_logp``: the policy at the
    step's start) and weighs by min(π_prox/π_b, C); bapo clips with the batch's adaptive bounds; m2po takes r·A
    unclipped on the tokens ``m2po_mask`` keeps. ``params``: the objective's config as a dict."""
    adv, valid = advantages[:, None], mask.float()
    if method == "m2po":
        log_ratio = logp - behaviour_logp
        surrogate = torch.exp(log_ratio) * adv * stabilizers.m2po_mask(log_ratio, mask, params["m2_threshold"]).float()
        clipped, c_low, c_high = torch.zeros_like(valid), math.nan, math.nan
    else:
        ratio = torch.exp(logp - (prox_logp if method == "tis" else behaviour_logp))
        c_low, c_high = (stabilizers.bapo_clip_bounds(ratio.detach(), adv, mask, stabilizers.BAPOConfig(**params))
                         if method == "bapo" else (1 - clip_eps, 1 + clip_eps))
        surrogate = torch.minimum(ratio * adv, ratio.clamp(c_low, c_high) * adv)
        if method == "tis":
            surrogate = surrogate * stabilizers.tis_weights(prox_logp - behaviour_logp, params["tis_cap"])
        clipped = ((ratio - ratio.clamp(c_low, c_high)) * adv).detach() > 0  # the min picked the clipped branch
    loss = -(surrogate * valid).sum() / valid.sum().clamp_min(1)  # a masked-out token counts as 0, as in M2PO
    return loss, {"clip_frac": float(masked_mean(clipped.float(), valid)), "clip_low": c_low, "clip_high": c_high}


# -- the run -------------------------------------------------------------------------------------------------------
class NonFiniteError(FloatingPointError):
    """A non-finite loss or gradient; the message names the RL step."""


def cosine(a: torch.Tensor, b: torch.Tensor | None) -> float:
    """cos(a, b) as gac computes it (``gac.alignment`` in float64); NaN where either vector is 0 or there is no b."""
    return math.nan if b is None else float(gac.alignment(a.detach().double(), b.detach().double()))


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

    def state_dict(self) -> dict:
        """Everything a resume needs (the optimizer's state holds GAC's reference too), and the code and args."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "ring": self.ring.state_dict(), "generator": self.generator.get_state(), "records": self.records,
                "previous": dict(self.previous), "nonfinite_at": self.nonfinite_at, "step": self.step,
                "args": asdict(self.args), "code": source_hashes(CODE), "code_fingerprint": code_fingerprint(CODE)}

    def load_state_dict(self, saved: dict) -> None:
        """Continue from a checkpoint's state (the same numbers as an uninterrupted run from here on)."""
        try:
            self.model.load_state_dict(saved["model"])
        except RuntimeError:
            raise ValueError("--resume: the checkpoint holds another model") from None
        self.optimizer.load_state_dict(saved["optimizer"])
        self.ring.load_state_dict(saved["ring"])
        self.generator.set_state(saved["generator"].cpu())  # map_location moved it; generators live on the CPU
        self.records, self.nonfinite_at, self.step = saved["records"], saved["nonfinite_at"], saved["step"]
        self.previous = dict(saved["previous"])


def setup(args: Args, log=print) -> Run:
    """Validate ``args``, build the run, and restore it from the checkpoint with ``--resume``."""
    args.validate()
    saved, path = None, Path(args.out_dir) / "checkpoint.pt"
    if args.resume:  # refuse before the models are built: other code, other args, or fewer steps
        saved = checkpoint.load_checkpoint(path, args.device)
        checkpoint.check_resume(path, saved, asdict(args), CODE, OUTPUT_ONLY, args.allow_code_change)
        records = Path(args.out_dir) / "records.csv"
        written = max(0, len(records.read_text().splitlines()) - 1) if records.exists() else 0
        if args.steps < max(saved["step"], written):
            raise ValueError(f"--steps {args.steps} would shrink the outputs: the checkpoint is at step "
                             f"{saved['step']} and records.csv has {written} records")
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model, info = ((load_model(args.model), {"source": args.model}) if args.model is not None
                   else load_warm_start(args.warm_start(), log))
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
              warm_info=info, behaviour=copy.deepcopy(model).requires_grad_(False) if args.staleness else None)
    if saved is not None:
        run.load_state_dict(saved)
        log(f"[train] resumed from {path} at step {run.step}")
    return run


def clip(model: Qwen3, max_norm: float) -> None:
    if math.isfinite(max_norm):
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def autocast(args: Args):
    return torch.autocast("cuda", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()


def group_samples(groups: torch.Tensor, group_size: int, device) -> torch.Tensor:
    """Sample indices of whole prompt groups (each group's G samples are contiguous)."""
    return (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1).to(device)


# -- one RL step ---------------------------------------------------------------------------------------------------
def rl_step(run: Run) -> dict:
    """One RL step: sample from the stale policy, reward, advantage, (SNR probe), updates, record."""
    args, step = run.args, run.step
    with autocast(args):  # held-out accuracy of θ before this step's updates
        accuracy = heldout_accuracy(run.model, run.task, run.heldout) if step % args.eval_every == 0 else math.nan
    version = max(0, step - int(run.schedule[step]))
    if run.behaviour is not None:  # the ring holds θ of the last s_max + 1 steps
        run.ring.push(step, {k: v.detach().clone() for k, v in run.model.state_dict().items()})
        run.behaviour.load_state_dict(run.ring.get(version))
    data = rollouts(run, run.behaviour if run.behaviour is not None else run.model)
    cos_halves = snr_probe(run, data) if step % args.snr_every == 0 else math.nan
    names = dict(step=step, seed=args.seed, method=args.run_method, label=args.run_method, staleness=args.staleness)
    # Updates split the batch by prompt group, so consecutive updates share no samples.
    order = torch.randperm(args.prompts_per_step, generator=run.generator)
    updates, step_gradient = [], None
    for groups in order.chunk(args.minibatches):
        numbers, raw = update(run, data, group_samples(groups, args.group_size, args.device))
        if numbers is None:
            run.records.append(make_row("llm", **names, nonfinite=True))
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
        "llm", **names, objective=reward, train_accuracy=reward, accuracy=accuracy, **means,  # exact-match reward
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
    """P groups of G samples from ``policy`` with their log-probs, rewards and advantages, as tensors of the batch.
    With ``drop_tied_groups``, P more prompts are drawn until P groups have unequal rewards (or the attempts end)."""
    args, task, group = run.args, run.task, run.args.group_size
    draws, untied = [], 0
    for _ in range(args.sample_attempts if args.drop_tied_groups else 1):
        operands = task.sample_operands(args.prompts_per_step, run.generator).repeat_interleave(group, 0)
        prompts = task.prompts(operands)
        with autocast(args):
            responses, logp, mask = sample(policy, prompts, task.answer_len, run.generator, args.temperature,
                                           group=group)
        reward = task.verify(operands, responses)
        draws.append({"prompts": prompts.to(args.device), "responses": responses, "behaviour_logp": logp,
                      "mask": mask, "reward": reward})
        untied += int((reward.view(-1, group) != reward.view(-1, group)[:, :1]).any(1).sum())
        if untied >= args.prompts_per_step:
            break
    data = {name: torch.cat([draw[name] for draw in draws]) for name in draws[0]}
    tied = (data["reward"].view(-1, group) == data["reward"].view(-1, group)[:, :1]).all(1)
    # Dynamic sampling keeps the untied groups first; short of P of them, tied ones fill the batch.
    order = torch.argsort(tied.to(torch.int8), stable=True) if args.drop_tied_groups else torch.arange(len(tied))
    chosen = group_samples(order[:args.prompts_per_step], group, "cpu")
    data = {name: tensor[chosen.to(tensor.device)] for name, tensor in data.items()}
    data |= {"tied_frac": float(tied.float().mean()), "samples_drawn": len(tied) * group,
             "advantages": group_advantages(data["reward"].view(-1, group)).view(-1).to(args.device)}
    vcpo_baseline = args.axes.step == "vcpo" and args.vcpo.vcpo_baseline
    if args.axes.objective == "tis" or args.ratio_to == "proximal" or args.axes.step == "vcpo":
        prox_logp, score_sq = [], []  # π_θ at the step's start (and VCPO's score norms in logit space)
        samples = torch.arange(len(data["prompts"]), device=args.device)
        for c in samples.split(args.micro_batch or len(samples)):
            with autocast(args):
                logp, _, logp_all = token_logprobs(run.model, data["prompts"][c], data["responses"][c],
                                                   args.temperature, True)
            prox_logp.append(logp)
            if vcpo_baseline:
                score_sq.append(stabilizers.logit_score_sq(logp_all, logp, data["mask"][c].float()))
        data["prox_logp"] = torch.cat(prox_logp)
    if vcpo_baseline:  # (R − b)/(std + ε), b the off-policy baseline
        valid = data["mask"].float()
        weights = stabilizers.sequence_weights((data["prox_logp"] - data["behaviour_logp"]) * valid, valid)
        rewards = data["reward"].to(weights.device, weights.dtype).view(-1, group)
        baseline = stabilizers.vcpo_baseline(rewards, weights.view(-1, group), torch.cat(score_sq).view(-1, group))
        data["advantages"] = group_advantages(rewards, baseline=baseline).view(-1).float()
    # The clip's denominator: π_b, or with ratio_to=proximal π_θ at the step's start (stale data used as if fresh).
    proximal = args.ratio_to == "proximal" and args.axes.objective == "none"
    data["old_logp"] = data["prox_logp"] if proximal else data["behaviour_logp"]
    return data


def accumulate_gradient(run: Run, data: dict, samples: torch.Tensor) -> dict:
    """Backward of the loss of ``samples`` by micro-batches weighted by their share of its tokens; its statistics."""
    args, valid = run.args, data["mask"][samples].float()
    tokens = valid.sum().clamp_min(1)
    totals, log_ratios = Counter(), []
    config = {"tis": args.tis, "m2po": args.m2po, "bapo": args.bapo}.get(args.axes.objective)
    params = {} if config is None else asdict(config)  # the objective's parameters, if it has any
    for chunk in samples.split(args.micro_batch or len(samples)):
        pick = {k: data[k][chunk] for k in ("prompts", "responses", "behaviour_logp", "mask", "advantages",
                                            "old_logp", "prox_logp") if k in data}
        with autocast(args):
            logp, entropy = token_logprobs(run.model, pick["prompts"], pick["responses"], args.temperature)
        mask = pick["mask"]
        share = mask.sum() / tokens
        loss, stats = policy_loss(args.axes.objective, logp, pick["old_logp"], pick["advantages"], mask,
                                  args.clip_eps, params, pick.get("prox_logp"))
        (loss * share).backward()
        log_ratio = logp.detach() - pick["behaviour_logp"]
        k3 = torch.exp(log_ratio) - 1 - log_ratio  # k3 estimate of KL(π_b ‖ π_θ) on π_b's tokens: ρ − 1 − log ρ
        totals.update(loss=float(loss.detach() * share), clip_frac=stats["clip_frac"] * float(share),
                      kl_behaviour=float(masked_mean(k3, mask.float())) * float(share),
                      entropy=float(masked_mean(entropy.detach(), mask.float()) * share))
        log_ratios.append((log_ratio * mask).double())
    weights = stabilizers.sequence_weights(torch.cat(log_ratios), valid.double())
    return {**totals, "clip_low": stats["clip_low"], "clip_high": stats["clip_high"],
            "ess_ratio": float(stabilizers.effective_sample_size(weights)[1])}


def update(run: Run, data: dict, samples: torch.Tensor) -> tuple[dict | None, torch.Tensor | None]:
    """One update on ``samples``: gradient → step size → braking → clip → (GAC-)AdamW; its numbers and raw
    gradient, or (None, None) when a non-finite loss or gradient stopped the run."""
    args, optimizer, params = run.args, run.optimizer, run.params
    optimizer.zero_grad(set_to_none=True)
    stats = accumulate_gradient(run, data, samples)
    raw = torch.cat([p.grad.reshape(-1) for p in params])
    if not (math.isfinite(stats["loss"]) and bool(torch.isfinite(raw).all())):
        if args.on_nonfinite == "raise":
            what = "loss" if not math.isfinite(stats["loss"]) else "gradient"
            raise NonFiniteError(f"non-finite {what} at step {run.step}")
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
        accumulate_gradient(run, data, group_samples(half, run.args.group_size, run.args.device))
        gradients.append(torch.cat([p.grad.reshape(-1) for p in run.params]))
    run.optimizer.zero_grad(set_to_none=True)
    return cosine(*gradients)


# -- the loop ------------------------------------------------------------------------------------------------------
def train(args: Args, run: Run | None = None, log=print) -> Iterator[dict]:
    """Yield the record of each RL step from ``run.step`` (a fresh ``setup(args)`` if not given) to args.steps; with
    ``checkpoint_every``, in the locked out_dir, saving checkpoints. A ``nonfinite`` record (``mark``) is the last."""
    run = setup(args, log) if run is None else run
    with out_dir_lock(args.out_dir) if args.checkpoint_every else contextlib.nullcontext():
        if args.checkpoint_every:
            claim_out_dir(args.out_dir, RUN_FILES, args.resume, args.overwrite)
        from tqdm.auto import tqdm
        bar = tqdm(range(run.step, args.steps), disable=not args.progress, initial=run.step, total=args.steps,
                   desc=f"{args.run_method} s={args.staleness}", leave=False)
        for _ in bar:
            record = rl_step(run)
            yield record
            if record["nonfinite"]:
                break
            if args.stop_at_collapse and not math.isnan(record["accuracy"]) and collapse_step(
                    [(r["step"], r["accuracy"]) for r in run.records if not math.isnan(r["accuracy"])]) is not None:
                break
            bar.set_postfix(reward=f"{record['objective']:.2f}", cos=f"{record['cos_prev']:.2f}")
            if args.checkpoint_every and run.step % args.checkpoint_every == 0 and run.step < args.steps:
                checkpoint.save_checkpoint(Path(args.out_dir) / "checkpoint.pt", run.state_dict())
        bar.close()


def summary(run: Run) -> dict:
    """Args, warm start, start and final held-out accuracy, where it failed, and the code's fingerprint."""
    with autocast(run.args):
        final = heldout_accuracy(run.model, run.task, run.heldout) if run.nonfinite_at is None else math.nan
    accuracies = [(r["step"], r["accuracy"]) for r in run.records if not math.isnan(r["accuracy"])]
    start = accuracies[0][1] if accuracies and accuracies[0][0] == 0 else math.nan
    collapsed_at = collapse_step(accuracies + ([(run.step, final)] if run.nonfinite_at is None else []))
    return {"args": asdict(run.args), "method": run.args.run_method, "warm_start": run.warm_info,
            "start_accuracy": start, "final_accuracy": final, "eval_problems": len(run.heldout),
            "nonfinite_at": run.nonfinite_at, "collapsed_at": collapsed_at,
            "collapsed": collapsed_at is not None or run.nonfinite_at is not None,
            "code_fingerprint": code_fingerprint(CODE)}


def run_records(args: Args, log=print, records_path: Path | str | None = None) -> dict:
    """Train to the end: {"records", "summary"}; each record also goes to ``records_path`` as soon as it is made."""
    run = setup(args, log)
    stream = RecordStream(records_path, columns("llm"), list(run.records)) if records_path else None
    with stream or contextlib.nullcontext():
        for record in train(args, run, log):
            if stream is not None:
                stream.append(record)
    return {"records": run.records, "summary": summary(run)}
