"""The float64 cosine numerics of gac: ``dot64`` (products and sum in float64) and cosines built on it.

``as_float64(x)`` converts a (batched, shape (..., P)) vector once: float64, divided by its power-of-two scale, with
its ‖·‖²; ``cosine64(a, b)`` then costs one dot product. The numbers are ``gac.alignment``'s on float64 inputs, bit
for bit (same scaling, same sums, same division), so a consumer that keeps last step's operand gets the library's
cosine without converting and squaring every vector twice. Used by the LLM trainer's probes and the toy grids; the
tracker sums ``dot64`` over its tensors' chunks (one chunk of one tensor: the same bits as ``cosine64``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gac.control import AlignmentStats, cosine_from_stats, pow2_scale


def dot64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ a·b over the last dim, products and sum in float64 (a product of two float32 numbers is exact in float64)."""
    return (a.to(torch.float64) * b.to(torch.float64)).sum(-1)


@dataclass(frozen=True)
class Float64Vector:
    """A vector as ``gac.alignment`` sees it: ``source`` in float64 divided by ``pow2_scale(source)``, and ‖·‖².

    Division by a power of two is exact, so every sum and quotient differs from the unscaled one by exact powers
    of two (none of which survive into the cosine); the scaling only keeps huge or tiny inputs finite.
    """

    source: torch.Tensor
    scaled: torch.Tensor
    sq: torch.Tensor


def as_float64(x: torch.Tensor, known: Float64Vector | None = None) -> Float64Vector:
    """``x`` as a Float64Vector; ``known`` is returned instead when it was made from the tensor ``x`` itself."""
    if known is not None and known.source is x:
        return known
    scaled = x.detach().to(torch.float64) / pow2_scale(x)
    return Float64Vector(x, scaled, dot64(scaled, scaled))


def cosine64(a: Float64Vector, b: Float64Vector) -> torch.Tensor:
    """cos(a, b) over the last dim in float64 (0 where a norm is 0): ``gac.alignment(a, b)`` for float64 a, b."""
    return cosine_from_stats(AlignmentStats(dot64(a.scaled, b.scaled), a.sq, b.sq))


__all__ = ["Float64Vector", "as_float64", "cosine64", "dot64"]
