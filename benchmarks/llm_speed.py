"""LLM GRPO speed: RL steps per CPU-second of this checkout's trainer against another checkout's, side by side.

`python -m benchmarks.llm_speed --baseline DIR [--configs small-16x8 small-2048 tiny-8x8] [--rounds 2]`: each
configuration runs as ``sim.llm.train.run_records`` in a fresh process of each checkout (the two alternate, round
after round), from the same untrained model of its size (the answers' lengths then hit the task's cap in both), one
thread. Each child reports the CPU seconds of its run (``time.process_time``): imports are excluded, and so is the
one-time import of ``torch._dynamo`` that building a ``torch.optim`` optimizer costs a process (the pipeline pays it
once per worker). It prints, per configuration, each checkout's steps per CPU-second (median over rounds) and the
ratio this / baseline. DIR is any checkout of this package (``git worktree add /tmp/old <commit>``); without
``--baseline`` only this one is timed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runtime.cli import parse

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    # name: (model size, digits, prompts per step, group size, RL steps)
    "small-16x8": ("small", 2, 16, 8, 20),
    "small-2048": ("small", 2, 128, 16, 4),
    "tiny-8x8": ("tiny", 1, 8, 8, 40),
}
RUN = """
import json, sys, time, torch
torch.set_num_threads(1)
from sim.llm.train import Args, run_records
size, digits, prompts, group, steps, model = json.loads(sys.argv[1])
args = Args(size=size, model=model, digits=digits, prompts_per_step=prompts, group_size=group, steps=steps,
            minibatches=1, eval_every=10**6, snr_every=10**6, eval_problems=8, progress=False, method="naive",
            staleness=1, ratio_to="behaviour")
torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])  # torch.optim's one-time import of torch._dynamo
start = time.process_time()
run_records(args, log=lambda *a: None)
print(time.process_time() - start)
"""


@dataclass
class SpeedArgs:
    """Time the LLM trainer against another checkout's."""

    baseline: str | None = None
    """a checkout of this package to compare with (its sim/llm trainer runs the same configurations)"""
    configs: tuple[str, ...] = tuple(CONFIGS)
    """configurations to time: small-16x8 (the testbed's batch), small-2048 (2,048 samples a step), tiny-8x8
    (fig8's tiny grid)"""
    rounds: int = 2
    """alternating rounds (each configuration once per checkout per round)"""
    out: str | None = None
    """write the table as JSON here"""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"--rounds must be >= 1, got {self.rounds}")
        unknown = [c for c in self.configs if c not in CONFIGS]
        if unknown:
            raise ValueError(f"--configs: unknown {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
        if self.baseline is not None and not (Path(self.baseline) / "sim" / "llm" / "train.py").exists():
            raise ValueError(f"--baseline {self.baseline}: not a checkout of this package (no sim/llm/train.py)")


def cpu_seconds(checkout: Path, config: tuple, model: Path) -> float:
    """CPU seconds of one run of ``config`` by the trainer of ``checkout`` (setup, warm start loading and the RL
    steps; not the process's imports), in a fresh process."""
    done = subprocess.run([sys.executable, "-c", RUN, json.dumps([*config, str(model)])], cwd=checkout, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    args = parse(SpeedArgs, argv, "python -m benchmarks.llm_speed", __doc__.splitlines()[0])
    from sim.llm.model import build_model, save_model

    checkouts = {"this": ROOT} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
    table = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.configs:
            size, digits, prompts, group, steps = CONFIGS[name]
            model = Path(folder) / size
            if not model.exists():
                save_model(build_model(size, seed=0), model)
            seconds = {label: [] for label in checkouts}
            for _ in range(args.rounds):
                for label, checkout in checkouts.items():
                    seconds[label].append(cpu_seconds(checkout, CONFIGS[name], model))
            row = {"config": name, "steps": steps, "samples_per_step": prompts * group}
            for label in checkouts:
                row[f"{label}_steps_per_cpu_s"] = steps / statistics.median(seconds[label])
            if args.baseline:
                row["ratio"] = row["this_steps_per_cpu_s"] / row["baseline_steps_per_cpu_s"]
            table.append(row)
            print("  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
