"""LLM GRPO speed: rollout tokens/s with the KV cache, RL steps/s, and GAC's overhead inside a real step.

`python -m benchmarks.llm_speed [--size small] [--steps 40] [--device cpu]`. Everything is timed from
outside the trainer: ``train`` over the steps, GAC's ``apply()`` through a timing wrapper, and the
rollout sampler on one step's batch. The overhead is a ratio measured in one run: (time of the RL
steps) / (the same minus the time spent in GAC's apply()).
`python -m benchmarks.llm_speed --sampler` instead compares the fast sampler with the HF-forward one
(tokens/s side by side) and both with this CPU's FLOP ceiling (a matmul timed in the same run).
`python -m benchmarks.llm_speed --parts` runs quick-profile RL steps (experiments/llm.py) and reports the
share of each part of a step, RL steps/s (records of the rounds checked equal to the bit), and the step's
distance from the FLOP ceiling.
`python -m benchmarks.llm_speed --batched 8` trains K = 1, 2, 4, 8 runs of the quick profile's shape batched in one
process (``sim.llm.batched``; K = 1 is how one run per process trains) for the small and the tiny model, each K in
its own fresh process, alternately, and prints run·steps per CPU-second, the ratio to K = 1 next to its target,
the model FLOPs per CPU-second over the matmul ceiling, and the peak memory per run.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import resource
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Annotated, Literal
from unittest import mock

import torch

from experiments.llm import sweep
from experiments.tuning import LLM_TUNING
from sim.cli import choice, parse
from sim.llm import batched, controls, probes, stacked
from sim.llm.model import build_model, parameter_count, sample, sample_reference
from sim.llm.task import AdditionTask
from sim.llm.train import Args, setup, train
from sim.record import same_records


def timed_gac() -> tuple[list[float], contextlib.AbstractContextManager]:
    """([seconds spent in GAC], a patch of the trainer's gradient-space GAC that adds each call's seconds to it)."""
    spent, apply = [0.0], controls.apply_gac

    def timed(*args, **kwargs):
        start = time.perf_counter()
        out = apply(*args, **kwargs)
        spent[0] += time.perf_counter() - start
        return out

    return spent, mock.patch.object(controls, "apply_gac", timed)


def rollout_tokens_per_s(state, repeats: int = 3) -> float:
    """Tokens/s of the sampler on batches of one RL step's shape (the run's policy, its own generator)."""
    args, generator = state.args, torch.Generator().manual_seed(1)
    operands = state.task.sample_operands(args.prompts_per_step, generator).repeat_interleave(args.group_size, 0)
    prompts = state.task.prompts(operands).to(args.device)[None]
    tokens, start = 0, time.perf_counter()
    for _ in range(repeats):
        _, _, mask = stacked.sample(state.layout, state.theta.detach(), prompts, state.task.answer_len, [generator],
                                    args.temperature, group=args.group_size)
        tokens += int(mask.sum())
    return tokens / (time.perf_counter() - start)


def measure(size: str, steps: int, device: str, staleness: int = 8, **overrides) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = Args(method="gac", staleness=staleness, steps=steps, size=size, device=device, progress=False,
                    eval_every=10_000, snr_every=10_000, out_dir=tmp, **overrides)
        state = setup(args, log=lambda *a: None)
        gac_s, patch = timed_gac()
        with patch:
            start = time.perf_counter()
            for _ in train(args, state):
                pass
            step_s = time.perf_counter() - start
        tokens_per_s = rollout_tokens_per_s(state)
    # eval_every and snr_every beyond the run: only step 0 evaluates and probes (included in step_s).
    return {"size": size, "device": device, "steps": steps, "samples_per_step": args.prompts_per_step *
            args.group_size, "rollout_tokens_per_s": tokens_per_s,
            "rl_steps_per_s": steps / step_s, "gac_overhead_ratio": step_s / (step_s - gac_s[0]),
            "gac_seconds_per_update": gac_s[0] / (steps * args.minibatches)}


def cpu_seconds(fn) -> float:
    """Process CPU time of one call: robust to other processes sharing the cores (one torch thread)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def matmul_flops_per_s(n: int = 512, reps: int = 20) -> float:
    """The CPU's float32 matmul rate (best of 5 rounds of ``reps`` n×n×n products), the FLOP ceiling."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    return 2 * n**3 * reps / min(cpu_seconds(lambda: [a @ b for _ in range(reps)]) for _ in range(5))


def forward_tokens(prompts: torch.Tensor, mask: torch.Tensor, shared_prefill: bool) -> int:
    """Tokens through the model in one sample call: the (distinct) prompts, then one per decode step."""
    prefill = torch.unique(prompts, dim=0).shape[0] if shared_prefill else prompts.shape[0]
    steps = int(mask.any(0).sum())  # the last sampled token is not fed back
    return prefill * prompts.shape[1] + prompts.shape[0] * (steps - 1)


def sampler_speed(size: str, batch: int = 128, group: int = 8, digits: int = 2, rounds: int = 7) -> dict:
    """Tokens/s of the HF-forward sampler (old) and the fast one (new), interleaved, best of ``rounds``.

    Prompts come as the trainer makes them: batch/group distinct prompts, each repeated ``group`` times.
    The ceiling is generated tokens / (2·params·forward tokens of the new sampler / matmul rate).
    """
    task, model = AdditionTask(digits=digits), build_model(size, seed=0).eval()
    operands = task.sample_operands(batch // group, torch.Generator().manual_seed(0))
    prompts = task.prompts(operands.repeat_interleave(group, 0))
    samplers = {"old": (sample_reference, False), "new": (sample, True)}
    best, work = {}, {}
    for name, (fn, shared) in samplers.items():
        _, _, mask = fn(model, prompts, task.answer_len, torch.Generator().manual_seed(0))  # warm-up
        work[name] = (int(mask.sum()), forward_tokens(prompts, mask, shared))
        best[name] = float("inf")
    for r in range(rounds):
        for name, (fn, _) in samplers.items():
            generator = torch.Generator().manual_seed(r)
            seconds = cpu_seconds(lambda fn=fn, g=generator: fn(model, prompts, task.answer_len, g))
            best[name] = min(best[name], seconds)
    flops_per_s, params = matmul_flops_per_s(), parameter_count(model)
    row = {"size": size, "params": params, "batch": batch, "group": group, "matmul_gflops": flops_per_s / 1e9}
    for name in samplers:
        generated, forwarded = work[name]
        row[f"{name}_tokens_per_s"] = generated / best[name]
        row[f"{name}_flop_fraction"] = 2 * params * forwarded / best[name] / flops_per_s
    row["new_over_old"] = row["new_tokens_per_s"] / row["old_tokens_per_s"]
    row["ceiling_tokens_per_s"] = work["new"][0] * flops_per_s / (2 * params * work["new"][1])
    row["new_fraction_of_ceiling"] = row["new_tokens_per_s"] / row["ceiling_tokens_per_s"]
    return row


PARTS = {"eval": ((batched, "heldout_accuracy"),), "snr_probe": ((probes, "snr_probe"),),
         "sampling": ((stacked, "sample"),), "logprob_forward": ((stacked, "token_logprobs"),),
         "cosine": ((batched, "as_float64"), (probes, "cosine64")), "gac_apply": ((controls, "apply_gac"),),
         "adamw": ((batched, "adamw_step"),)}
"""Parts of an RL step: the (module, function) names of the trainer's modules timed as each (a call inside another
part counts in the outer one, e.g. the SNR probe's forwards and backwards in snr_probe). ``backward`` is
Tensor.backward."""


@contextlib.contextmanager
def timed_parts(model_params: int):
    """Patch the parts' functions to add their process CPU seconds to the yielded dict (plus the FLOPs of
    the step's model passes: 2·params per token forward, twice that again for a backward's forward)."""
    spent, active = dict.fromkeys([*PARTS, "backward"], 0.0), []
    spent["model_flops"] = 0.0

    def timed(part, fn):
        def call(*args, **kwargs):
            if active:
                return fn(*args, **kwargs)
            active.append(part)
            start = time.process_time()
            try:
                out = fn(*args, **kwargs)
            finally:
                spent[part] += time.process_time() - start
                active.pop()
            if part == "logprob_forward":  # (layout, θ, prompts, responses): every prompt and response token
                tokens = args[2].numel() + args[3].numel()
                grad = args[1].requires_grad and torch.is_grad_enabled()
                spent["model_flops"] += 2 * model_params * tokens * (3 if grad else 1)
            if part == "sampling":  # (layout, θ, prompts (K, n, L), ...): each run's prompts
                spent["model_flops"] += 2 * model_params * sum(
                    forward_tokens(p, m, shared_prefill=True) for p, m in zip(args[2], out[2], strict=True))
            return out
        return call

    patches = [mock.patch.object(module, name, timed(part, getattr(module, name)))
               for part, names in PARTS.items() for module, name in names]
    patches.append(mock.patch.object(torch.Tensor, "backward", timed("backward", torch.Tensor.backward)))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield spent


def quick_args(method: str, steps: int) -> Args:
    """The quick profile's run of ``method`` at high staleness and the main step size, seed 0, ``steps`` steps."""
    runs = [r.args for r in sweep("quick") if r.args.method == method and r.args.seed == 0]
    main = [a for a in runs if a.staleness == 16 and a.lr == 3e-4 and a.ratio_to == "proximal"] or runs
    return replace(main[0], steps=steps)


def run_steps(args: Args, parts: bool = False) -> tuple[float, list, dict]:
    """(process CPU seconds of the RL steps, their records, the parts' seconds if ``parts``) of one fresh run."""
    state = setup(args, log=lambda *a: None)
    with timed_parts(state.layout.size) if parts else contextlib.nullcontext({}) as spent:
        start = time.process_time()
        for _ in train(args, state):
            pass
        seconds = time.process_time() - start
    return seconds, state.runs[0].records, spent


def step_parts(method: str, steps: int, rounds: int) -> dict:
    """Shares of a quick-profile RL step's parts and RL steps/s (best of ``rounds``; records checked equal between
    rounds), and the step's model FLOPs over the matmul ceiling."""
    args = quick_args(method, steps)
    best, identical, reference = (math.inf, {}), True, None
    for _ in range(rounds):
        seconds, records, spent = run_steps(args, parts=True)
        reference = records if reference is None else reference
        identical = identical and same_records(reference, records)
        best = min(best, (seconds, spent), key=lambda pair: pair[0])
    seconds, spent = best
    rate, flops = matmul_flops_per_s(), spent.pop("model_flops")
    shares = {part: round(spent[part] / seconds, 3) for part in spent}
    return {"method": method, "staleness": args.staleness, "steps": steps, "size": args.size,
            "samples_per_step": args.prompts_per_step * args.group_size, "eval_every": args.eval_every,
            "snr_every": args.snr_every, "shares": {**shares, "other": round(1 - sum(shares.values()), 3)},
            "rl_steps_per_s": steps / seconds, "flop_fraction": flops / seconds / rate,
            "model_gflop_per_step": flops / steps / 1e9, "records_identical": identical, "matmul_gflops": rate / 1e9}


BATCH_TARGETS = {"small": 3.0, "tiny": 2.0}
"""Issue 24's targets: run·steps per CPU-second at the best K over one run per process (K = 1)."""


def batch_args(size: str, runs: int, steps: int) -> list:
    """``runs`` naive-async runs of the shape the quick figures train ``size`` at, differing in seed and step size
    as a tuning grid's would: small as the quick sweep (2-digit sums, 16 prompts × 8, eval and SNR probe at step 0),
    tiny as fig8's tuning grid (1-digit sums, 8 prompts × 8, s = 8)."""
    if size == "tiny":
        base = Args(**LLM_TUNING["quick"]["base"], method="naive", staleness=8, lr=3e-4)
        base = replace(base, steps=steps, eval_every=20, snr_every=10)
    else:
        base = replace(quick_args("naive", steps), size=size)
    base = replace(base, progress=False, threads=1)
    return [replace(base, seed=k, lr=base.lr * (1 + 0.25 * (k % 4))) for k in range(runs)]


def count_model_flops(layout_params: int, spent: dict):
    """Patch the stacked sampler and log-prob forward to add their model FLOPs to ``spent["flops"]``: 2·params per
    token forward, three times that for a forward whose backward follows (grad enabled)."""
    sample_fn, logprob_fn = stacked.sample, stacked.token_logprobs

    def sample(layout, theta, prompts, max_new_tokens, *args, group=1, **kwargs):
        out = sample_fn(layout, theta, prompts, max_new_tokens, *args, group=group, **kwargs)
        runs, n, length = prompts.shape
        decoded = int(out[2].any(0).any(0).sum())  # positions generated; the last one is not fed back
        spent["flops"] += 2 * layout_params * runs * (n // group * length + n * max(decoded - 1, 0))
        return out

    def token_logprobs(layout, theta, prompts, responses, *args, **kwargs):
        tokens = prompts.numel() + responses.numel()
        spent["flops"] += 2 * layout_params * tokens * (3 if theta.requires_grad and torch.is_grad_enabled() else 1)
        return logprob_fn(layout, theta, prompts, responses, *args, **kwargs)

    return mock.patch.multiple(stacked, sample=sample, token_logprobs=token_logprobs)


def measure_batch(size: str, runs: int, steps: int) -> dict:
    """In a fresh process: CPU seconds of ``steps`` RL steps of ``runs`` batched runs, their model FLOPs, and the
    process's peak resident memory (its growth from before setup, too)."""
    torch.set_num_threads(1)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    batch = batched.setup_batch(batch_args(size, runs, steps), log=lambda *a: None)
    spent = {"flops": 0.0}
    with count_model_flops(batch.layout.size, spent):
        start = time.process_time()
        for _ in range(steps):
            batched.rl_step_batch(batch, log=lambda *a: None)
        seconds = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"cpu_s": seconds, "flops": spent["flops"], "peak_rss_mib": peak / 1024,
            "rss_growth_mib": (peak - rss_before) / 1024}


def _child(queue, *args) -> None:
    queue.put(measure_batch(*args))


def in_fresh_process(*args) -> dict:
    """``measure_batch(*args)`` in a spawned process (its peak memory is its own)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, *args))
    process.start()
    result = queue.get()
    process.join()
    return result


def batched_speed(size: str, max_runs: int, steps: int, rounds: int) -> list[dict]:
    """Run·steps per CPU-second of K = 1, 2, 4, … ≤ ``max_runs`` batched runs, alternately, best of ``rounds``."""
    from sim.llm.train import prepare_warm_start

    prepare_warm_start(batch_args(size, 1, steps)[0], log=lambda *a: None)  # cached before the timed processes
    ks = [k for k in (1, 2, 4, 8, 16, 32) if k <= max_runs]
    best: dict[int, dict] = {}
    for _ in range(rounds):
        for k in ks:
            result = in_fresh_process(size, k, steps)
            if k not in best or result["cpu_s"] < best[k]["cpu_s"]:
                best[k] = result
    rate = matmul_flops_per_s()
    one = steps / best[1]["cpu_s"]
    rows = []
    for k in ks:
        result = best[k]
        speed = k * steps / result["cpu_s"]
        rows.append({"size": size, "runs": k, "steps": steps, "run_steps_per_cpu_s": round(speed, 3),
                     "over_one_run_per_process": round(speed / one, 3), "target": BATCH_TARGETS.get(size),
                     "flop_fraction": round(result["flops"] / result["cpu_s"] / rate, 3),
                     "peak_rss_mib_per_run": round(result["peak_rss_mib"] / k, 1),
                     "rss_growth_mib_per_run": round(result["rss_growth_mib"] / k, 1)})
    return rows


@dataclass
class SpeedArgs:
    """The trainer's speed: one run's steps, its parts, the sampler, or K batched runs per CPU-second."""

    size: Annotated[Literal["tiny", "small", "cpu", "gpu"], choice("--size", ("tiny", "small", "cpu", "gpu"))] = "small"
    """model size of the one-run measurement"""
    steps: int = 40
    """RL steps (--batched: 6 unless given)"""
    device: str = "cpu"
    """torch device"""
    threads: int = 1
    """torch threads"""
    sampler: bool = False
    """old vs new sampler at tiny, small, cpu instead"""
    group: int = 8
    """--sampler: samples per distinct prompt"""
    parts: bool = False
    """quick-profile step parts, cosine before/after"""
    methods: tuple[str, ...] = ("naive", "gac")
    """--parts: methods of the sweep"""
    rounds: int = 3
    """--parts, --batched: alternations (best of)"""
    batched: int = 0
    """runs·steps per CPU-second of 1, 2, 4, ... K batched runs (small and tiny); 0: off"""
    sizes: tuple[Literal["tiny", "small", "cpu", "gpu"], ...] = ("small", "tiny")
    """--batched: model sizes"""

    def __post_init__(self):
        for name in ("steps", "threads", "group", "rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.batched < 0:
            raise ValueError(f"--batched must be >= 0 (0: off), got {self.batched}")


def main(argv=None) -> None:
    # a bad value: one line naming it, exit 2, before any timing
    args = parse(SpeedArgs, argv, prog="python -m benchmarks.llm_speed")
    torch.set_num_threads(args.threads)
    if args.batched:
        steps = args.steps if args.steps != 40 else 6
        rows = [row for size in args.sizes for row in batched_speed(size, args.batched, steps, args.rounds)]
        print(json.dumps(rows, indent=1))
        for size in args.sizes:
            mine = [r for r in rows if r["size"] == size]
            top = max(mine, key=lambda r: r["over_one_run_per_process"])
            print(f"{size}: best K = {top['runs']}: {top['over_one_run_per_process']:.2f}x run-steps per CPU-second "
                  f"over one run per process (target >= {BATCH_TARGETS.get(size, float('nan')):.0f}x: "
                  f"{'met' if top['over_one_run_per_process'] >= BATCH_TARGETS.get(size, math.inf) else 'not met'})")
        return
    if args.parts:
        print(json.dumps([step_parts(m, args.steps, args.rounds) for m in args.methods], indent=1))
        return
    if args.sampler:
        print(json.dumps([sampler_speed(size, group=args.group) for size in ("tiny", "small", "cpu")], indent=1))
        return
    print(json.dumps(measure(args.size, args.steps, args.device, threads=args.threads), indent=1))


if __name__ == "__main__":
    main()
