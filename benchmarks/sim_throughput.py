"""Vectorized noisy quadratic (sim.quadratic) vs a straightforward per-run numpy loop, same grid, one process.

Grid: methods {naive, lr_scale, gac (project, τ = 0)} × staleness {0, 1, 2, 4, 8, 16} × step sizes × seeds,
d = 100. The loop does the same arithmetic per run (history list, stale gradient, GAC projection with
the previous raw gradient, cosine, loss); the vectorized run does one tensor update per step for all runs.
Both include their own noise generation. Prints runs·steps per second for each and the speed-up, and one
vectorized step in units of one copy of the runs × d float64 tensor (``y.copy_(x)``, a STREAM-like
reference timed in the same process), each next to its target.
Run: ``python -m benchmarks.sim_throughput [--steps N] [--lrs K] [--seeds S] [--dim D]`` (from the repository
root, so that its ``sim`` is the one measured).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from runtime.cli import parse

if TYPE_CHECKING:
    from sim.quadratic import QuadraticProblem

# torch and the simulator are imported where the benchmark runs (--help answers without them)

STALENESS = (0, 1, 2, 4, 8, 16)
METHODS = ("naive", "lr_scale", "gac")
TARGET_SPEEDUP = 10.0  # vectorized vs the per-run numpy loop, at least
TARGET_COPY_PASSES = 10.0  # one vectorized step, in copies of the runs × d tensor, at most


def grid(lrs: list[float]) -> list:
    from sim.grid import setting

    return [setting(m, s, lr) for m in METHODS for s in STALENESS for lr in lrs]


def loop_numpy(problem: QuadraticProblem, settings, steps: int, seeds: int, seed: int = 0) -> np.ndarray:
    """One run at a time: the arithmetic of sim.quadratic for naive / lr_scale / gac(project, τ=0)."""
    lam = problem.curvatures().numpy()
    rng = np.random.default_rng(seed)
    finals = []
    for s in settings:
        for _ in range(seeds):
            x = np.full(problem.dim, problem.init_scale)
            history = [x.copy()] * (s.staleness + 1)  # ring of the last s+1 versions
            prev = np.zeros(problem.dim)
            lr = s.lr / (1 + s.staleness) if s.method == "lr_scale" else s.lr
            loss = 0.0
            for t in range(steps):
                stale = history[max(0, t - s.staleness) % (s.staleness + 1)]
                g = lam * stale + problem.noise * rng.standard_normal(problem.dim)
                g_norm, p_norm = np.linalg.norm(g), np.linalg.norm(prev)
                dot = float(g @ prev)
                cos = dot / (g_norm * p_norm) if g_norm > 0 and p_norm > 0 else 0.0
                applied = g - (dot / (p_norm * p_norm)) * prev if s.method == "gac" and cos > 0.0 else g
                prev = g
                x = x - lr * applied
                history[(t + 1) % (s.staleness + 1)] = x
                loss = 0.5 * float(lam @ (x * x))
                if not np.isfinite(loss) or loss > 1e6 * 0.5 * lam.sum():
                    break
            finals.append(loss)
    return np.array(finals)


def copy_seconds(rows: int, dim: int, repeats: int = 200) -> float:
    """Median time of one ``y.copy_(x)`` of a (rows, dim) float64 tensor (batches of 10 copies)."""
    import torch

    x = torch.randn(rows, dim, dtype=torch.float64)
    y = torch.empty_like(x)
    times = []
    for _ in range(repeats // 10):
        start = time.perf_counter()
        for _ in range(10):
            y.copy_(x)
        times.append((time.perf_counter() - start) / 10)
    return float(np.median(times))


@dataclass
class ThroughputArgs:
    """The vectorized toy grid against a per-run numpy loop, side by side in one run."""

    steps: int = 300
    """steps of each run"""
    lrs: int = 10
    """number of step sizes in the grid"""
    seeds: int = 8
    """seeds per step size"""
    dim: int = 100
    """dimension of the quadratic"""

    def __post_init__(self):
        for name in ("steps", "lrs", "seeds", "dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")


def main(argv=None) -> None:
    # a bad value: one line naming it, exit 2, before any timing
    args = parse(ThroughputArgs, argv, prog="python -m benchmarks.sim_throughput")
    import torch

    from sim.quadratic import QuadraticProblem, run_quadratic

    torch.set_num_threads(1)
    problem = QuadraticProblem(dim=args.dim, condition_number=100.0, noise=0.1)
    settings = grid(np.linspace(0.05, 0.3, args.lrs).tolist())
    runs = len(settings) * args.seeds
    copy_before = copy_seconds(runs, problem.dim)
    start = time.perf_counter()
    run_quadratic(problem, settings, args.steps, args.seeds, record_every=args.steps)
    vectorized = time.perf_counter() - start
    copy = 0.5 * (copy_before + copy_seconds(runs, problem.dim))  # before and after: load drifts
    start = time.perf_counter()
    loop_numpy(problem, settings, args.steps, args.seeds)
    looped = time.perf_counter() - start
    work = runs * args.steps
    print(f"grid: {runs} runs × {args.steps} steps, d = {problem.dim}, 1 thread")
    print(f"vectorized (sim.quadratic): {vectorized:7.2f} s  {work / vectorized:12.0f} run-steps/s")
    print(f"per-run numpy loop:         {looped:7.2f} s  {work / looped:12.0f} run-steps/s")
    print(f"speed-up vs numpy loop: {looped / vectorized:.1f}x (target >= {TARGET_SPEEDUP:.0f}x)")
    step = vectorized / args.steps
    print(f"one vectorized step: {step * 1e3:.2f} ms = {step / copy:.0f} copy passes of the {runs} x {problem.dim} "
          f"float64 tensor ({copy * 1e6:.0f} us each; target <= {TARGET_COPY_PASSES:.0f})")


if __name__ == "__main__":
    main()
