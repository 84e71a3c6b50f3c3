"""LLM GRPO speed: rollout tokens/s with the KV cache, RL steps/s, and GAC's overhead inside a real step.

`python -m benchmarks.llm_speed [--size small] [--steps 40] [--device cpu]`. Everything is timed from
outside the trainer: ``train`` over the steps, GAC's ``apply()`` through a timing wrapper, and the
rollout sampler on one step's batch. The overhead is a ratio measured in one run: (time of the RL
steps) / (the same minus the time spent in GAC's apply()).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from sim.llm.model import sample
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(measure(args.size, args.steps, args.device, threads=args.threads), indent=1))


if __name__ == "__main__":
    main()
