"""Noisy quadratic in the stale-gradient model, vectorized over seeds and a grid of settings.

f(x) = ½ Σ_i λ_i x_i² with eigenvalues log-spaced over [λ_max/κ, λ_max]; the gradient at step t is
g_t = Λ x_{t−s_t} + σ ξ_t (parameter-server delay). All runs (settings × seeds) are one (R, d)
tensor and advance with one tensor update per step; the noise ξ of seed k at step t is the same for
every setting (common random numbers), so a setting run alone gives the same numbers as in a grid.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from tqdm import tqdm

from sim.grid import GridResult, GridUpdater, Recorder, Setting, check_models
from sim.stabilizers import STALE_GRADIENT
from sim.staleness import TensorVersionBuffer

DIVERGENCE_FACTOR = 1e6
"""A run is marked diverged when f(x) > DIVERGENCE_FACTOR · max(f(x_0), σ²·d/2) or is not finite; it is
then frozen. The σ²·d/2 floor (the loss a single noisy step from the optimum can reach) keeps a run
started at or near the optimum from counting its own noise floor as divergence."""


@dataclass(frozen=True)
class QuadraticProblem:
    """f(x) = ½ Σ λ_i x_i², λ log-spaced over [curvature_max / condition_number, curvature_max]; noise σ."""

    dim: int = 100
    """d, number of coordinates."""
    condition_number: float = 100.0
    """κ = λ_max / λ_min."""
    curvature_max: float = 1.0
    """λ_max (η·λ_max is the step size in units of the top curvature)."""
    noise: float = 1.0
    """σ of the isotropic Gaussian gradient noise."""
    init_scale: float = 1.0
    """x_0 = init_scale · (1, …, 1)."""

    def __post_init__(self) -> None:
        if self.dim < 1 or self.condition_number < 1 or self.curvature_max <= 0 or self.noise < 0:
            raise ValueError(f"bad QuadraticProblem {self}")

    def curvatures(self, dtype=torch.float64) -> torch.Tensor:
        low = math.log10(self.curvature_max / self.condition_number)
        return torch.logspace(low, math.log10(self.curvature_max), self.dim, dtype=dtype)

    def objective(self, x: torch.Tensor, curvatures: torch.Tensor | None = None) -> torch.Tensor:
        curvatures = self.curvatures(x.dtype) if curvatures is None else curvatures
        return 0.5 * (curvatures * x * x).sum(-1)


class NoiseStream:
    """Per-step random numbers of a seed family: (u per seed, ξ per seed) from one generator.

    The draws depend only on (seed, seeds, dim, step), never on the settings of the grid.
    """

    def __init__(self, seed: int, seeds: int, dim: int, dtype=torch.float64):
        self.generator = torch.Generator().manual_seed(int(seed))
        self.seeds, self.dim, self.dtype = seeds, dim, dtype

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = torch.rand(self.seeds, generator=self.generator, dtype=self.dtype)
        xi = torch.randn(self.seeds, self.dim, generator=self.generator, dtype=self.dtype)
        return uniform, xi


def run_quadratic(problem: QuadraticProblem, settings: list[Setting], steps: int, seeds: int = 4, seed: int = 0,
                  record_every: int = 1, warmup: int | None = None, tail: int | None = None,
                  progress: bool = False, device: str = "cpu") -> GridResult:
    """Run every setting × seed on ``problem`` for ``steps`` steps; one tensor update per step for all runs.

    ``warmup`` (default steps // 5) is where mean cosines start; ``tail`` (default steps // 10) is the
    window of the final objective. Returns a ``GridResult`` (sim name "quadratic").
    """
    if steps < 1 or seeds < 1:
        raise ValueError(f"steps and seeds must be >= 1, got {steps}, {seeds}")
    check_models(settings, STALE_GRADIENT)
    dtype = torch.float64
    curvatures = problem.curvatures(dtype).to(device)
    updater = GridUpdater(settings, seeds, problem.dim, dtype, device)
    rows = updater.rows
    x = torch.full((rows, problem.dim), problem.init_scale, dtype=dtype, device=device)
    buffer = TensorVersionBuffer(x, int(updater.max_staleness.max()) + 1)
    noise = NoiseStream(seed, seeds, problem.dim, dtype)
    initial = problem.objective(x[:1], curvatures)[0]
    limit = DIVERGENCE_FACTOR * max(float(initial), 0.5 * problem.noise**2 * problem.dim, 1e-12)
    diverged = torch.zeros(rows, dtype=torch.bool, device=device)
    recorder = Recorder(rows, steps, record_every, steps // 5 if warmup is None else warmup,
                        max(1, steps // 10) if tail is None else tail, dtype=dtype)
    for step in tqdm(range(steps), desc="quadratic", disable=not progress, leave=False):
        uniform, xi = noise.next()
        staleness = updater.staleness(uniform.to(device))
        stale_x = buffer.get((step - staleness).clamp_min(0))
        # Scale the (seeds, d) noise before spreading it over the rows: fewer elements, same numbers.
        grad = (curvatures * stale_x).add_((problem.noise * xi.to(device)).index_select(0, updater.seed_index))
        x_new, info = updater.update(x, grad, stale_x, staleness, ~diverged)
        objective = problem.objective(x_new, curvatures)
        diverged = diverged | ~torch.isfinite(objective) | (objective > limit)
        x = torch.where(diverged[:, None], x, x_new)  # a diverged run is frozen where it was, and marked
        buffer.push(step + 1, x)
        info.update(objective=objective, diverged=diverged)
        recorder.observe(step, info)
    return recorder.result("quadratic", settings, seeds, seed, {"problem": asdict(problem), "steps": steps})


__all__ = ["QuadraticProblem", "NoiseStream", "run_quadratic", "DIVERGENCE_FACTOR"]
