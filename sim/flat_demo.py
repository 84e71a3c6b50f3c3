"""A minimal flat-tensor demo of the stale-aligned effect: delayed SGD on a noisy quadratic, ± GAC.

f(x) = ½ Σ λ_i x_i², stale-gradient model g_t = Λ x_{t−s} + σ ξ_t, vectorized over seeds. This is
the smallest problem that shows the phenomenon; the full simulators live in ``sim.quadratic``.
Run: ``python -m sim.flat_demo``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import gac


@dataclass
class FlatDemoResult:
    loss: torch.Tensor  # (steps, seeds)
    cos_prev: torch.Tensor  # (steps, seeds): cosine of raw g_t with raw g_{t-1}
    diverged: torch.Tensor  # (seeds,) bool


def run_flat_demo(staleness: int, gac_cfg: gac.GACConfig | None = None, steps: int = 300, dim: int = 200,
                  seeds: int = 4, lr: float = 1.0, curvature_max: float = 0.5, noise: float = 0.1,
                  seed: int = 0) -> FlatDemoResult:
    """Delayed SGD x_{t+1} = x_t − η g'_t on a noisy quadratic; g' = GAC(g) when ``gac_cfg`` is given."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    gen = torch.Generator().manual_seed(seed)
    curvature = torch.logspace(-2, 0, dim, dtype=torch.float64) * curvature_max
    x = torch.ones(seeds, dim, dtype=torch.float64)
    history = [x.clone() for _ in range(staleness + 1)]  # ring of past iterates; first s steps use x_0
    prev_grad = torch.zeros_like(x)
    reference = torch.zeros_like(x)  # GAC's reference direction (previous raw gradient, or their EMA)
    losses, cosines = [], []
    diverged = torch.zeros(seeds, dtype=torch.bool)
    for step in range(steps):
        stale_x = history[step % (staleness + 1)]
        grad = curvature * stale_x + noise * torch.randn(x.shape, generator=gen, dtype=torch.float64)
        cosines.append(gac.alignment(grad, prev_grad))
        applied = grad
        if gac_cfg is not None:
            applied = gac.control(grad, reference, gac_cfg).grad
            reference = gac.update_reference(reference, grad, gac_cfg)
        prev_grad = grad
        x = x - lr * applied
        history[step % (staleness + 1)] = x.clone()
        loss = 0.5 * (curvature * x * x).sum(-1)
        diverged |= ~torch.isfinite(loss) | (loss > 1e6)
        losses.append(loss)
    return FlatDemoResult(torch.stack(losses), torch.stack(cosines), diverged)


def main() -> None:
    print("noisy quadratic, dim 200, eta*lambda_max = 0.5, 300 steps, 4 seeds")
    print(f"{'run':<22}{'mean cos_prev':>14}{'final loss':>14}{'diverged':>10}")
    for name, staleness, cfg in [("sync (s=0)", 0, None), ("async s=8", 8, None),
                                 ("async s=8 + GAC", 8, gac.GACConfig(threshold=0.0))]:
        res = run_flat_demo(staleness, cfg)
        final = res.loss[-1].median().item()
        print(f"{name:<22}{res.cos_prev[50:].nanmean().item():>14.3f}{final:>14.3g}"
              f"{int(res.diverged.sum()):>7}/{len(res.diverged)}")


if __name__ == "__main__":
    main()
