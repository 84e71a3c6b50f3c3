"""LLM GRPO speed: rollout tokens/s with the KV cache, RL steps/s, and GAC's overhead inside a real step.

`python -m benchmarks.llm_speed [--size small] [--steps 40] [--device cpu]`. The overhead is a ratio
measured in one run: (time of the RL steps) / (the same minus the time spent in GAC's apply()).
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch

from sim.llm.train import Args, run


def measure(size: str, steps: int, device: str, staleness: int = 8, **overrides) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = Args(method="gac", staleness=staleness, steps=steps, size=size, device=device, progress=False,
                    eval_every=10_000, out_dir=tmp, **overrides)
        timing = run(args, log=lambda *a: None)["summary"]["timing"]
    step_s, gac_s = timing["step_s"], timing["gac_s"]
    return {"size": size, "device": device, "steps": timing["steps"], "samples_per_step": args.prompts_per_step *
            args.group_size, "rollout_tokens_per_s": timing["tokens"] / timing["sample_s"],
            "rl_steps_per_s": timing["steps"] / step_s, "gac_overhead_ratio": step_s / (step_s - gac_s),
            "gac_seconds_per_update": gac_s / (timing["steps"] * args.minibatches)}


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
