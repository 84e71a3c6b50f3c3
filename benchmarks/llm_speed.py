"""LLM GRPO speed: rollout tokens/s with the KV cache, RL steps/s, and GAC's overhead inside a real step.

`python -m benchmarks.llm_speed [--size small] [--steps 40] [--device cpu]`. Everything is timed from
outside the trainer: ``train`` over the steps, GAC's ``apply()`` through a timing wrapper, and the
rollout sampler on one step's batch. The overhead is a ratio measured in one run: (time of the RL
steps) / (the same minus the time spent in GAC's apply()).
`python -m benchmarks.llm_speed --sampler` instead compares the fast sampler with the HF-forward one
(tokens/s side by side) and both with this CPU's FLOP ceiling (a matmul timed in the same run).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from sim.llm.model import build_model, parameter_count, sample, sample_reference
from sim.llm.task import AdditionTask
from sim.llm.train import Args, setup, train


def timed_gac(state) -> list[float]:
    """Wrap the run's GAC controller so each apply() adds its seconds to the returned list's only entry."""
    spent, apply = [0.0], state.controller.apply

    def timed():
        start = time.perf_counter()
        report = apply()
        spent[0] += time.perf_counter() - start
        return report

    state.controller.apply = timed
    return spent


def rollout_tokens_per_s(state, repeats: int = 3) -> float:
    """Tokens/s of the sampler on batches of one RL step's shape (the behaviour policy, its own generator)."""
    args, generator = state.args, torch.Generator().manual_seed(1)
    operands = state.task.sample_operands(args.prompts_per_step, generator).repeat_interleave(args.group_size, 0)
    prompts = state.task.prompts(operands).to(args.device)
    tokens, start = 0, time.perf_counter()
    for _ in range(repeats):
        _, _, mask = sample(state.policy, prompts, state.task.answer_len, generator, args.temperature)
        tokens += int(mask.sum())
    return tokens / (time.perf_counter() - start)


def measure(size: str, steps: int, device: str, staleness: int = 8, **overrides) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = Args(method="gac", staleness=staleness, steps=steps, size=size, device=device, progress=False,
                    eval_every=10_000, snr_every=10_000, out_dir=tmp, **overrides)
        state = setup(args, log=lambda *a: None)
        gac_s = timed_gac(state)
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sampler", action="store_true", help="old vs new sampler at tiny, small, cpu instead")
    parser.add_argument("--group", type=int, default=8, help="--sampler: samples per distinct prompt")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.sampler:
        print(json.dumps([sampler_speed(size, group=args.group) for size in ("tiny", "small", "cpu")], indent=1))
        return
    print(json.dumps(measure(args.size, args.steps, args.device, threads=args.threads), indent=1))


if __name__ == "__main__":
    main()
