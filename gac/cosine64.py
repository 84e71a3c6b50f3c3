"""Float64 cosines between vectors that are each compared twice (with the previous vector, then the next one).

``as_float64(x)`` converts a (batched, shape (..., P)) vector once: float64, divided by its power-of-two scale, with
its ‖·‖²; ``cosine64(a, b)`` then costs one dot product. The numbers are ``gac.alignment``'s on float64 inputs, bit
for bit (same scaling, same sums, same division), so a consumer that keeps last step's operand gets the library's
cosine without converting and squaring every vector twice. Used by the LLM trainer's probes and the toy grids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gac.control import AlignmentStats, cosine_from_stats, pow2_scale


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
    return Float64Vector(x, scaled, (scaled * scaled).sum(-1))


def cosine64(a: Float64Vector, b: Float64Vector) -> torch.Tensor:
    """cos(a, b) over the last dim in float64 (0 where a norm is 0): ``gac.alignment(a, b)`` for float64 a, b."""
    return cosine_from_stats(AlignmentStats((a.scaled * b.scaled).sum(-1), a.sq, b.sq))


__all__ = ["Float64Vector", "as_float64", "cosine64"]
