"""One float64 cosine: gac.cosine64 equals gac.alignment bit for bit; the trainer's probes and the toy grid use it."""

from __future__ import annotations

import math

import pytest
import torch

from gac import alignment
from gac.cosine64 import as_float64, cosine64
from sim.grid import GridUpdater, setting
from sim.llm import probes


def vector_pairs(dtype=torch.float32):
    """Pairs of vectors at ordinary, huge, tiny, subnormal and zero scales, aligned, anti-aligned and random."""
    gen = torch.Generator().manual_seed(7)
    scales = [1.0, 1e-3, 3e4, 1e-30, 1e30, 2.0**-140, 0.0] if dtype == torch.float32 else [1.0, 2.0**-1070, 1e-300,
                                                                                            1e300, 1e307, 0.0]
    for scale in scales:
        for size in (1, 5, 4097):
            a = torch.randn(size, generator=gen, dtype=dtype) * scale
            b = torch.randn(size, generator=gen, dtype=dtype) * scale
            yield a, b
            yield a, 3 * a - b * 1e-3
            yield a, -a


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cosine64_has_the_bits_of_gac_alignment_on_float64_inputs(dtype):
    for a, b in vector_pairs(dtype):
        got = cosine64(as_float64(a), as_float64(b))
        assert got.dtype == torch.float64
        assert torch.equal(got, alignment(a.double(), b.double())), (a.abs().max(), b.abs().max())
        assert got.to(alignment(a, b).dtype) == alignment(a, b)  # and alignment's own dtype, rounded once


def test_trainer_probe_grid_and_alignment_agree_bit_for_bit():
    """The same vectors through the trainer's probe, the toy grid's cos_prev and gac.alignment: one set of bits."""
    pairs = [(a.double(), b.double()) for a, b in vector_pairs(torch.float32) if a.numel() == 5]
    previous, current = torch.stack([b for _, b in pairs]), torch.stack([a for a, _ in pairs])
    updater = GridUpdater([setting("none", 0, 0.1)], seeds=len(pairs), dim=5)
    updater.update(torch.zeros_like(previous), previous, torch.zeros_like(previous), torch.zeros(len(pairs)),
                   torch.ones(len(pairs), dtype=torch.bool))
    _, info = updater.update(torch.zeros_like(current), current, torch.zeros_like(current), torch.zeros(len(pairs)),
                             torch.ones(len(pairs), dtype=torch.bool))
    expected = alignment(current, previous)
    assert torch.equal(info["cos_prev"], expected)
    trainer = [probes.cosine(as_float64(a), as_float64(b)) for a, b in pairs]
    assert trainer == expected.tolist()
    assert math.isnan(probes.cosine(as_float64(current[0]), None))


def test_a_known_operand_is_reused_only_for_the_same_tensor():
    a = torch.randn(6)
    known = as_float64(a)
    assert as_float64(a, known) is known
    assert as_float64(a.clone(), known) is not known


def test_the_power_of_two_scaling_matters_for_float64_extremes():
    """Mutation: without the scaling, ‖x‖² of 1e200-sized float64 vectors overflows (the cosine would be NaN/0)."""
    a = torch.tensor([1e200, 2e200], dtype=torch.float64)
    b = torch.tensor([2e200, 1e200], dtype=torch.float64)
    assert cosine64(as_float64(a), as_float64(b)) == pytest.approx(0.8, abs=1e-15)
    unscaled_sq = (a * a).sum()
    assert math.isinf(unscaled_sq)
