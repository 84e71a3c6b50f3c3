"""The minimal flat-tensor demonstration: stale gradients align and diverge; GAC keeps the run finite."""

import pytest
import torch

import gac
from sim.flat_demo import run_flat_demo


def test_stale_gradients_align_and_diverge_gac_stays_finite():
    sync = run_flat_demo(0)
    stale = run_flat_demo(8)
    controlled = run_flat_demo(8, gac.GACConfig(threshold=0.0))
    after_warmup = slice(50, 150)  # before the stale runs overflow
    assert sync.cos_prev[after_warmup].mean() < 0.2
    assert stale.cos_prev[after_warmup].mean() > 0.8
    assert not sync.diverged.any()
    assert stale.diverged.all()
    assert not controlled.diverged.any()
    assert torch.isfinite(controlled.loss).all()
    assert controlled.loss[-1].median() < 10 * sync.loss[-1].median()


def test_flat_demo_is_deterministic_and_validates_staleness():
    a, b = run_flat_demo(2, steps=40), run_flat_demo(2, steps=40)
    assert torch.equal(a.loss, b.loss)
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        run_flat_demo(-1)
