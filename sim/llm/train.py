"""GRPO on a small Qwen3 model with stale rollouts: `python -m sim.llm.train --method gac --staleness 8`.

One RL step t: the behaviour policy θ_{t−s_t} (from a ring of snapshots) samples G responses for
each of P prompts; rewards are exact-match correctness; advantages are group-normalised; the batch
is split into ``minibatches`` updates (one pass), each: token-level clipped loss → backward → GAC
(method ``gac``) → clip_grad_norm → AdamW step. Several updates per batch keep the clip active in the
synchronous baseline too (its later minibatches are off-policy by the earlier updates).

"Consecutive gradients" are those of consecutive optimizer updates (also across RL steps): the
record's ``cos_prev`` is the mean over the step's updates of cos(raw g_k, raw g_{k−1}), raw = after
backward, before GAC and clipping — the same pair the gac library compares.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import gac
from sim.llm import grpo
from sim.llm.cli import parse
from sim.llm.model import SIZES, load_model, sample, token_logprobs
from sim.llm.task import AdditionTask
from sim.llm.warmstart import WarmStartConfig, heldout_accuracy, load_warm_start
from sim.stabilizers import STALE_DATA, gac_config, get_stabilizer, method_params
from sim.staleness import KINDS, Staleness, VersionRing

RECORD_COLUMNS = ["sim", "step", "seed", "method", "staleness", "objective", "grad_norm", "cos_prev", "cos_applied",
                  "regime", "parallel_scale", "accuracy", "kl_behaviour", "entropy", "response_length", "lr",
                  "clip_frac", "diverged"]
EXTRA_COLUMNS = ["train_accuracy", "behaviour_version", "cos_prev_step", "ratio_to"]


@dataclass
class Args:
    method: str = "none"
    """method from sim/stabilizers.py (none = naive async, gac, tis, m2po, lr_scale) or sync (= none at s=0)"""
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
    gac_threshold: float = 0.0
    """GAC τ: project when cos(g, g_prev) > τ"""
    gac_mode: str = "project"
    """GAC mode: project or cap"""
    tis_cap: float = 2.0
    """TIS truncation C"""
    m2_threshold: float = 0.04
    """M2PO τ_M2: bound on the mean (log r)^2 of kept tokens"""
    eval_every: int = 20
    """held-out accuracy every this many steps"""
    eval_problems: int = 256
    """held-out problems per evaluation (a fixed set)"""
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
    device: str = "cpu"
    """torch device: cpu or cuda"""
    threads: int = 1
    """torch CPU threads (keep 1 when other processes share the cores)"""
    progress: bool = True
    """show a progress bar"""
    on_nonfinite: str = "raise"
    """non-finite loss/gradient: raise (error naming the step) or mark (record diverged=True, stop the run)"""

    def validate(self) -> None:
        """Raise ValueError (one line) for any bad setting, before work starts."""
        if self.method != "sync":
            get_stabilizer(self.method, STALE_DATA)
        if self.method == "sync" and self.staleness != 0:
            raise ValueError(f"method sync means staleness 0, got --staleness {self.staleness}; use --method none")
        Staleness(self.staleness, self.staleness_kind)
        if self.staleness_kind not in KINDS:
            raise ValueError(f"staleness_kind must be one of {KINDS}")
        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; choose from {', '.join(SIZES)}")
        if self.steps < 1 or self.prompts_per_step < 1 or self.eval_every < 1 or self.eval_problems < 1:
            raise ValueError("steps, prompts_per_step, eval_every and eval_problems must be >= 1")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (group-normalised advantages), got {self.group_size}")
        if self.minibatches < 1 or self.prompts_per_step % self.minibatches:
            raise ValueError(f"minibatches ({self.minibatches}) must divide prompts_per_step ({self.prompts_per_step})")
        for name in ("lr", "clip_eps", "temperature", "max_grad_norm", "tis_cap"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.kl_coef < 0 or self.m2_threshold <= 0 or self.checkpoint_every < 0 or self.threads < 1:
            raise ValueError("kl_coef >= 0, m2_threshold > 0, checkpoint_every >= 0, threads >= 1 required")
        self.gac_cfg()  # τ in [0, 1), mode known
        if self.ratio_to not in ("behaviour", "proximal"):
            raise ValueError(f"ratio_to must be behaviour or proximal, got {self.ratio_to!r}")
        if self.on_nonfinite not in ("raise", "mark"):
            raise ValueError(f"on_nonfinite must be raise or mark, got {self.on_nonfinite!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {self.device} but torch sees no CUDA device")
        if self.model is not None and not (Path(self.model) / "config.json").exists():
            raise ValueError(f"--model {self.model}: no config.json there (expected a save_pretrained directory)")
        if self.resume and not (Path(self.out_dir) / "checkpoint.pt").exists():
            raise ValueError(f"--resume but {self.out_dir}/checkpoint.pt does not exist")

    @property
    def registry_method(self) -> str:
        return "none" if self.method == "sync" else self.method

    @property
    def label(self) -> str:
        """The record's method name: sync for naive at s = 0, else the registry name."""
        return "sync" if self.registry_method == "none" and self.staleness == 0 else self.registry_method

    def gac_cfg(self) -> gac.GACConfig:
        return gac_config(threshold=self.gac_threshold, mode=self.gac_mode)

    def method_params(self) -> dict:
        return {"tis": {"tis_cap": self.tis_cap}, "m2po": {"m2_threshold": self.m2_threshold}}.get(
            self.registry_method, {})


class NonFiniteError(FloatingPointError):
    """A non-finite loss or gradient; the message names the RL step."""


def flat_grad(params) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in params])


def cosine(a: torch.Tensor, b: torch.Tensor | None) -> float:
    return float("nan") if b is None else float(gac.alignment(a.double(), b.double()))


def snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def run(args: Args, hooks: dict | None = None, log=print) -> dict:
    """Train; returns {"records": [...], "summary": {...}}. ``hooks`` (tests): after_update(step, k, raw, applied)
    and after_step(step) callbacks."""
    args.validate()
    hooks = hooks or {}
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    method, params_m = args.registry_method, method_params(args.registry_method, **args.method_params())
    task = AdditionTask(digits=args.digits)
    heldout = task.heldout_set(args.eval_problems)
    out_dir = Path(args.out_dir)

    # Policy θ, reference (the starting point), behaviour (loaded from snapshots as needed).
    if args.model is not None:
        policy, reference, behaviour = (load_model(args.model).to(device) for _ in range(3))
        warm_info = {"source": args.model}
    else:
        ws = WarmStartConfig(size=args.size, digits=args.digits, seed=args.warm_seed, target_accuracy=args.warm_target)
        policy, warm_info = load_warm_start(ws, args.device, log)
        reference, _ = load_warm_start(ws, args.device, log)
        behaviour, _ = load_warm_start(ws, args.device, log)
    for m in (reference, behaviour):
        m.eval().requires_grad_(False)
    policy.train()
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    controller = gac.GradientAlignmentControl(params, args.gac_cfg()) if method == "gac" else None
    schedule = Staleness(args.staleness, args.staleness_kind).sample(
        args.steps, generator=torch.Generator().manual_seed(args.seed + 7))
    ring = VersionRing(args.staleness + 1)
    generator = torch.Generator().manual_seed(args.seed)
    records, prev_raw, prev_step_grad, start = [], None, None, 0
    timing = {"step_s": 0.0, "gac_s": 0.0, "sample_s": 0.0, "tokens": 0, "steps": 0}

    if args.resume:
        ckpt = torch.load(out_dir / "checkpoint.pt", map_location=device, weights_only=False)
        policy.load_state_dict(ckpt["policy"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if controller is not None:
            controller.load_state_dict(ckpt["gac"])
        ring.load_state_dict(ckpt["ring"])
        generator.set_state(ckpt["generator"].cpu())  # map_location moved it; the generator lives on the CPU
        records, prev_raw, start = ckpt["records"], ckpt["prev_raw"], ckpt["step"]
        prev_step_grad = ckpt["prev_step_grad"]
        log(f"[train] resumed from {out_dir / 'checkpoint.pt'} at step {start}")

    from tqdm.auto import tqdm
    bar = tqdm(range(start, args.steps), disable=not args.progress, desc=f"{args.label} s={args.staleness}",
               initial=start, total=args.steps, leave=False)
    diverged_at = None
    for step in bar:
        t0 = time.perf_counter()
        accuracy = heldout_accuracy(policy, task, heldout) if step % args.eval_every == 0 else None
        t_eval = time.perf_counter() - t0

        # 1. Sample: the behaviour policy θ_{t−s_t} answers P prompts G times each.
        ring.push(step, snapshot(policy))
        version = max(0, step - int(schedule[step]))
        behaviour.load_state_dict(ring.get(version))
        t_sample = time.perf_counter()
        operands = task.sample_operands(args.prompts_per_step, generator).repeat_interleave(args.group_size, 0)
        prompts = task.prompts(operands).to(device)
        responses, behaviour_logp, mask = sample(behaviour, prompts, task.answer_len, generator, args.temperature)
        timing["sample_s"] += time.perf_counter() - t_sample
        timing["tokens"] += int(mask.sum())

        # 2. Reward and group-normalised advantage.
        reward, correct, _ = task.reward(operands, responses.cpu())
        advantages = grpo.group_advantages(reward, args.group_size).to(device)
        prox_logp = None
        if method == "tis" or args.ratio_to == "proximal":
            with torch.no_grad():
                prox_logp, _ = token_logprobs(policy, prompts, responses, args.temperature)
        # The clip's denominator: π_b (default) or, with ratio_to=proximal, π_θ at the step's start.
        old_logp = prox_logp if args.ratio_to == "proximal" and method not in ("tis", "m2po") else behaviour_logp

        # 3. Minibatch updates: loss → backward → GAC → clip → step.
        lr = args.lr / (1 + int(schedule[step])) if method == "lr_scale" else args.lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        # Minibatches split by prompt group (each group whole in one update): consecutive updates then
        # see different prompts, so their gradients share no samples.
        groups = torch.randperm(args.prompts_per_step, generator=generator)
        order = (groups[:, None] * args.group_size + torch.arange(args.group_size)).reshape(-1).to(device)
        updates, step_grad = [], None
        try:
            for k, idx in enumerate(order.chunk(args.minibatches)):
                logp, entropy = token_logprobs(policy, prompts[idx], responses[idx], args.temperature)
                loss, stats = grpo.policy_loss(method, logp, old_logp[idx], advantages[idx], mask[idx],
                                               args.clip_eps, params_m, None if prox_logp is None else prox_logp[idx])
                if args.kl_coef > 0:
                    with torch.no_grad():
                        ref_logp, _ = token_logprobs(reference, prompts[idx], responses[idx], args.temperature)
                    loss = loss + args.kl_coef * grpo.kl_k3(logp, ref_logp, mask[idx])
                if not torch.isfinite(loss):
                    raise NonFiniteError(f"non-finite loss at step {step} (update {k}): {loss.item()}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                raw = flat_grad(params)
                if not torch.isfinite(raw).all():
                    raise NonFiniteError(f"non-finite gradient at step {step} (update {k})")
                regime, scale = "keep", 1.0
                if controller is not None:
                    t_gac = time.perf_counter()
                    report = controller.apply()  # the library edits .grad in place
                    timing["gac_s"] += time.perf_counter() - t_gac
                    regime, scale = report.regime, report.parallel_scale
                applied = flat_grad(params) if controller is not None else raw
                updates.append({"grad_norm": float(raw.norm()), "cos_prev": cosine(raw, prev_raw),
                                "cos_applied": cosine(applied, prev_raw), "regime": regime, "parallel_scale": scale,
                                "clip_frac": stats["clip_frac"],
                                "kl_behaviour": grpo.behaviour_kl(logp, behaviour_logp[idx], mask[idx]),
                                "entropy": float(grpo.masked_mean(entropy.detach(), mask[idx].float()))})
                if "after_update" in hooks:
                    hooks["after_update"](step, k, raw, applied)
                prev_raw = raw
                step_grad = raw.clone() if step_grad is None else step_grad.add_(raw)
                torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                if regime != "skip":
                    optimizer.step()
        except NonFiniteError as err:
            if args.on_nonfinite == "raise":
                raise
            log(f"[train] {args.label} s={args.staleness} seed={args.seed}: {err}; run stopped")
            records.append({"sim": "llm", "step": step, "seed": args.seed, "method": args.label,
                            "staleness": args.staleness, "diverged": True})
            diverged_at = step
            break
        timing["step_s"] += time.perf_counter() - t0 - t_eval
        timing["steps"] += 1

        # 4. Log: one record per RL step (update-level numbers averaged over the step's updates).
        def mean(key, updates=updates):
            values = [u[key] for u in updates if not math.isnan(u[key])]
            return sum(values) / len(values) if values else None

        records.append({
            "sim": "llm", "step": step, "seed": args.seed, "method": args.label, "staleness": args.staleness,
            "objective": float(reward.mean()), "grad_norm": mean("grad_norm"), "cos_prev": mean("cos_prev"),
            "cos_applied": mean("cos_applied"),
            "regime": Counter(u["regime"] for u in updates).most_common(1)[0][0],
            "parallel_scale": mean("parallel_scale"), "accuracy": accuracy,
            "kl_behaviour": updates[0]["kl_behaviour"], "entropy": updates[0]["entropy"],
            "response_length": float(mask.sum(1).float().mean()), "lr": lr, "clip_frac": mean("clip_frac"),
            "diverged": False, "train_accuracy": float(correct.mean()), "behaviour_version": version,
            # The rollout-level view: cosine of the summed raw gradients of consecutive RL steps.
            "cos_prev_step": None if prev_step_grad is None else cosine(step_grad, prev_step_grad),
            "ratio_to": args.ratio_to,
        })
        prev_step_grad = step_grad
        bar.set_postfix(reward=f"{records[-1]['objective']:.2f}", cos=f"{records[-1]['cos_prev'] or 0:.2f}")
        if "after_step" in hooks:
            hooks["after_step"](step)
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0 and step + 1 < args.steps:
            save_checkpoint(out_dir, {"policy": policy.state_dict(), "optimizer": optimizer.state_dict(),
                                      "gac": None if controller is None else controller.state_dict(),
                                      "ring": ring.state_dict(), "generator": generator.get_state(),
                                      "records": records, "prev_raw": prev_raw, "prev_step_grad": prev_step_grad,
                                      "step": step + 1,
                                      "args": asdict(args)})
    bar.close()
    final_accuracy = heldout_accuracy(policy, task, heldout)
    summary = {"args": asdict(args), "label": args.label, "warm_start": warm_info, "final_accuracy": final_accuracy,
               "diverged_at": diverged_at, "timing": timing}
    return {"records": records, "summary": summary}


def save_checkpoint(out_dir: Path, state: dict) -> None:
    """Write checkpoint.pt atomically (temp file, then rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "checkpoint.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, out_dir / "checkpoint.pt")


def main(argv=None) -> int:
    from sim.record import write_records as write_csv

    try:
        args, _ = parse(Args, argv, prog="python -m sim.llm.train", description=__doc__.splitlines()[0])
        args.validate()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        result = run(args)
    except NonFiniteError as err:
        print(f"error: {err} (nothing written to the checkpoint)", file=sys.stderr)
        return 3
    out_dir = Path(args.out_dir)
    write_csv(result["records"], out_dir / "records.csv", RECORD_COLUMNS + EXTRA_COLUMNS)
    (out_dir / "summary.json").write_text(json.dumps(result["summary"], indent=1))
    print(f"[train] {args.label} s={args.staleness}: final held-out accuracy {result['summary']['final_accuracy']:.3f}"
          f" -> {out_dir}/records.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
