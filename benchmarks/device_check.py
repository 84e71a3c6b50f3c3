"""One GPU, one command: time the high-SNR study's steps on the device, then run as much of the study as fits.

``python -m benchmarks.device_check --out DIR`` (on a machine with CUDA; ``runs/warmstart`` carried from the CPU
checkout, since the device has no network and a warm start trains in minutes on the CPU too):

1. times 5 RL steps of each ``gpu`` configuration (sync, from its warm start): the small model at 512 untied groups ×
   8 = 4,096 samples per step in float32, and the 25M model (size ``gpu``) in bfloat16 at 256 × 8 = 2,048; writes
   ``DIR/device_timing.csv`` (device name, seconds per step, samples per second);
2. then, in ``experiments.llm_highsnr``'s order (warm start by warm start, fig3's arms), runs 200-step runs of the small
   configuration while the time left in ``--budget-s`` holds the next run at the timed rate, and writes their table
   and per-step records (``DIR/llm_highsnr_gpu_runs.csv``, ``..._steps.csv``), each row naming the device.

``--tiny`` shrinks everything to the tiny model for a CPU test (``--device cpu``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

from runtime.cli import folder, parse

TIMED_STEPS = 5
CONFIGS = {
    # name: Args overrides on top of experiments.llm_highsnr's configuration
    "small-4096": dict(size="small", prompts_per_step=512, micro_batch=1024, bf16=False),
    "gpu25m-bf16-2048": dict(size="gpu", prompts_per_step=256, micro_batch=512, bf16=True),
}


@dataclass
class Cli:
    """Time the high-SNR study on one GPU, then run as much of it as fits in the budget."""

    out: Annotated[Path, folder("--out")]
    """folder for device_timing.csv and llm_highsnr_gpu_runs.csv (+ _steps.csv)"""
    device: str = "cuda"
    """torch device (cuda, cuda:N; cpu only with --tiny)"""
    budget_s: float = 480.0
    """wall seconds for the whole command, timing included"""
    tiny: bool = False
    """the tiny model, 1-digit sums, a few samples: a CPU test of the command"""

    def __post_init__(self):
        if not self.budget_s > 0:
            raise ValueError(f"--budget-s must be > 0, got {self.budget_s}")
        if self.device == "cpu" and not self.tiny:
            raise ValueError("--device cpu is for --tiny only (on the CPU: python -m experiments.llm_highsnr)")
        if self.device != "cpu":
            import torch

            if self.device.split(":")[0] != "cuda" or not torch.cuda.is_available():
                raise ValueError(f"--device {self.device}: torch sees no such CUDA device here (torch "
                                 f"{torch.__version__}); on the CPU use --tiny --device cpu")


def shrink(args, tiny: bool):
    from experiments.llm import dry_run_args

    return replace(dry_run_args(args), prompts_per_step=4, micro_batch=8, bf16=False) if tiny else args


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"


def main(cli: Cli) -> dict:
    import pandas as pd

    from experiments import llm_highsnr
    from sim.llm.train import Args, run_records

    start = time.perf_counter()
    cli.out.mkdir(parents=True, exist_ok=True)
    name = device_name(cli.device)
    base = Args(**{**llm_highsnr.BASE, "lr": llm_highsnr.LR}, method="sync", warm_seed=1, device=cli.device,
                progress=False, on_nonfinite="mark")
    timing, rate = [], {}
    for config, overrides in CONFIGS.items():
        args = shrink(replace(base, **overrides, steps=TIMED_STEPS, eval_every=10**6, snr_every=10**6), cli.tiny)
        run_records(args, log=lambda *_: None)  # the warm start and the first-step compilation, untimed
        tick = time.perf_counter()
        run_records(args, log=lambda *_: None)
        seconds = (time.perf_counter() - tick) / TIMED_STEPS
        rate[config] = seconds
        timing.append({"device": name, "config": config, "size": args.size, "bf16": args.bf16,
                       "samples_per_step": args.prompts_per_step * args.group_size, "seconds_per_step": seconds,
                       "samples_per_s": args.prompts_per_step * args.group_size / seconds})
        print(f"[device] {name} {config}: {seconds:.3f} s/step", flush=True)
    pd.DataFrame(timing).to_csv(cli.out / "device_timing.csv", index=False)
    done, last = [], 0.0
    for run in llm_highsnr.runs("fig3"):
        args = shrink(replace(run.args, **CONFIGS["small-4096"], device=cli.device), cli.tiny)
        # the timed rate with a margin for evaluations and probes, or the last run's own time if longer
        expected = max(rate["small-4096"] * args.steps * 1.2, last)
        if time.perf_counter() - start + expected > cli.budget_s:
            break
        tick = time.perf_counter()
        done.append((run, run_records(args, log=lambda *_: None)))
        last = time.perf_counter() - tick
        arm = llm_highsnr.arm_name(args.method, args.gac_space, args.staleness, args.ratio_to, args.lr)
        print(f"[device] {arm} warm {args.warm_seed}: {done[-1][1]['summary']['final_accuracy']:.3f}", flush=True)
    if done:
        llm_highsnr.run_table(done).assign(device=name).to_csv(cli.out / "llm_highsnr_gpu_runs.csv", index=False)
        llm_highsnr.step_table(done).assign(device=name).to_csv(cli.out / "llm_highsnr_gpu_runs_steps.csv",
                                                                index=False)
    print(f"[device] {len(done)} runs in {time.perf_counter() - start:.0f} s -> {cli.out}")
    return {"timing": timing, "runs": len(done)}


if __name__ == "__main__":
    main(parse(Cli, None, prog="python -m benchmarks.device_check"))
