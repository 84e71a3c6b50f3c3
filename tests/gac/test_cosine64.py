"""One float64 cosine: gac.cosine64 equals gac.alignment bit for bit; the tracker, the trainer's probes and the toy
grid give the same bits on the same vectors."""

from __future__ import annotations

import math

import pytest
import torch

import gac
from gac import alignment
from gac.cosine64 import as_float64, cosine64
from gac.tracker import CHUNK_NUMEL
from sim.grid import GridUpdater, setting
from sim.llm.train import cosine as trainer_cosine
from tests.gac.helpers import same


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
        bits = {"rtol": 0, "atol": 0, "equal_nan": True}  # equal bits; NaN (a zero vector) on both sides
        torch.testing.assert_close(got, alignment(a.double(), b.double()), **bits)
        torch.testing.assert_close(got.to(alignment(a, b).dtype), alignment(a, b), **bits)  # alignment's dtype


def test_trainer_probe_grid_and_alignment_agree_bit_for_bit():
    """The same vectors through the trainer's probe, the toy grid's cos_prev and gac.alignment: one set of bits."""
    pairs = [(a.double(), b.double()) for a, b in vector_pairs(torch.float32) if a.numel() == 5]
    previous, current = torch.stack([b for _, b in pairs]), torch.stack([a for a, _ in pairs])
    updater = GridUpdater([setting("naive", 0, 0.1)], seeds=len(pairs), dim=5)
    updater.update(torch.zeros_like(previous), previous, torch.zeros_like(previous), torch.zeros(len(pairs)),
                   torch.ones(len(pairs), dtype=torch.bool))
    _, info = updater.update(torch.zeros_like(current), current, torch.zeros_like(current), torch.zeros(len(pairs)),
                             torch.ones(len(pairs), dtype=torch.bool))
    expected = alignment(current, previous)
    torch.testing.assert_close(info["cos_prev"], expected, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(expected).sum() == 3  # the zero pairs: NaN everywhere, not 0
    trainer = [trainer_cosine(a, b) for a, b in pairs]
    assert same(trainer, expected.tolist())
    assert math.isnan(trainer_cosine(current[0], None))


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


def tracker_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos(a, b) as gac.GradientAlignmentControl reports it: the reference is b (last step's gradient), the gradient a,
    both the .grad of one parameter."""
    param = torch.nn.Parameter(torch.zeros_like(a))
    tracker = gac.GradientAlignmentControl([param], gac.GACConfig(threshold=0.5))
    for grad in (b, a):
        param.grad = grad.clone()
        report = tracker.apply()
    return report.cosine


def test_tracker_trainer_and_grid_cosines_agree_bit_for_bit():
    """The same float32 vectors (ordinary, huge, tiny, subnormal, zero scales; aligned, anti-aligned, random) through
    the tracker's report, the trainer's probe and the toy grid's cos_prev: one set of bits. The tracker works on the
    float32 tensor itself, the probe and the grid on the float64 vector (a float32 product is exact in float64)."""
    pairs = [(a, b) for a, b in vector_pairs(torch.float32) if a.numel() == 5]
    trainer = [trainer_cosine(a, b) for a, b in pairs]
    previous, current = torch.stack([b for _, b in pairs]).double(), torch.stack([a for a, _ in pairs]).double()
    updater = GridUpdater([setting("naive", 0, 0.1)], seeds=len(pairs), dim=5)
    for grad in (previous, current):
        _, info = updater.update(torch.zeros_like(grad), grad, torch.zeros_like(grad), torch.zeros(len(pairs)),
                                 torch.ones(len(pairs), dtype=torch.bool))
    assert same([tracker_cosine(a, b) for a, b in pairs], trainer) and same(trainer, info["cos_prev"].tolist())
    assert len(set(trainer)) > 5  # distinct cosines, not one value


def test_tracker_and_trainer_agree_on_one_tensor_of_one_chunk():
    """Longer vectors (one tensor, one chunk of the tracker): the tracker's cosine is the trainer probe's, bit for
    bit; at 3·CHUNK_NUMEL the chunked float64 sums agree to float64 rounding."""
    for a, b in vector_pairs(torch.float32):
        assert same(tracker_cosine(a, b), trainer_cosine(a, b)), (a.numel(), a.abs().max())
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(2, 3 * CHUNK_NUMEL, generator=gen)
    assert tracker_cosine(a, b + 0.5 * a) == pytest.approx(trainer_cosine(a, b + 0.5 * a),
                                                           rel=1e-14)
