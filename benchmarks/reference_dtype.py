"""The cosine error of a bfloat16 reference (``GACConfig(reference_dtype=torch.bfloat16)``) against a float32 one.

Two trackers see the same float32 gradients g_t = √ρ·u + √(1−ρ)·ξ_t (a fixed direction u and fresh noise ξ_t,
entries of unit variance, so consecutive gradients have cosine ≈ ρ), one keeping its reference in float32 and one in
bfloat16, both in the keep regime (τ = 0.999: nothing is edited, so both see the same g). Printed per reference
("prev", "ema" with β = 0.9 and 0.99) and ρ: the largest and the median |cos_bf16 − cos_fp32| over the steps after
the first. bfloat16 keeps 8 significant bits (relative rounding ≤ 2^-9 per entry); for "prev" the rounding errors are
independent across entries and mostly cancel in the cosine; an EMA reference is rounded at every update.
Run: ``python -m benchmarks.reference_dtype [--numel 1000000] [--steps 50]``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from runtime.cli import parse

# torch and gac are imported where the benchmark runs (--help answers without them)
REFERENCES = {"prev": dict(threshold=0.999), "ema 0.9": dict(threshold=0.999, reference="ema", ema_decay=0.9),
              "ema 0.99": dict(threshold=0.999, reference="ema", ema_decay=0.99)}
LEVELS = (0.05, 0.5, 0.9)
"""ρ: the consecutive cosine of the gradients (low-SNR training sits near the first)."""


def cosine_errors(reference: dict, rho: float, numel: int, steps: int, seed: int = 0) -> list[float]:
    """|cos_bf16 − cos_fp32| at each step after the first, for gradients of consecutive cosine ≈ ``rho``, under the
    ``GACConfig`` arguments ``reference``."""
    import torch

    import gac

    gen = torch.Generator().manual_seed(seed)
    direction = torch.randn(numel, generator=gen)
    trackers = {dtype: gac.GradientAlignmentControl([torch.nn.Parameter(torch.zeros(numel))],
                                                    gac.GACConfig(**reference, reference_dtype=dtype))
                for dtype in (torch.float32, torch.bfloat16)}
    errors = []
    for step in range(steps):
        g = rho**0.5 * direction + (1 - rho) ** 0.5 * torch.randn(numel, generator=gen)
        cosines = {dtype: tracker.apply([g]).cosine for dtype, tracker in trackers.items()}
        if step > 0:
            errors.append(abs(cosines[torch.bfloat16] - cosines[torch.float32]))
    return errors


@dataclass
class ReferenceDtypeArgs:
    """The cosine error a bfloat16 GAC reference costs against a float32 one."""

    numel: int = 1_000_000
    """entries of the gradient"""
    steps: int = 50
    """steps per configuration"""

    def __post_init__(self):
        if self.numel < 1:
            raise ValueError(f"--numel must be >= 1, got {self.numel}")
        if self.steps < 2:
            raise ValueError(f"--steps must be >= 2, got {self.steps}")


def main(argv=None) -> None:
    args = parse(ReferenceDtypeArgs, argv, prog="python -m benchmarks.reference_dtype")
    print(f"|cos(bf16 reference) − cos(fp32 reference)|, {args.numel:,} entries, {args.steps} steps")
    print(f"{'reference':<10} {'rho':>5} {'max':>9} {'median':>9}")
    for name, reference in REFERENCES.items():
        for rho in LEVELS:
            errors = cosine_errors(reference, rho, args.numel, args.steps)
            print(f"{name:<10} {rho:>5.2f} {max(errors):>9.2e} {statistics.median(errors):>9.2e}", flush=True)


if __name__ == "__main__":
    main()
