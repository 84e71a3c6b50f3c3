"""Fixtures of the LLM tests: fast run arguments from the committed tiny warm start (``tiny_checkpoint``,
tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from sim.llm.train import Args


@pytest.fixture
def tiny_testbed(tiny_checkpoint, monkeypatch, torch_threads):
    """The testbed's profile "test" (``experiments.llm_figures``): its arms on the tiny checkpoint, 2 warm seeds × 1
    seed, 4 steps."""
    from experiments import profiles

    monkeypatch.setitem(profiles.TESTBED, "test", profiles.Testbed(
        warm_seeds=(1, 2), seeds=(0,), steps=4,
        base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, prompts_per_step=4, group_size=4,
                  eval_every=2, eval_problems=8, snr_every=2, temperature=2.0, lr=3e-3,
                  threads=torch_threads)))
    return profiles.TESTBED["test"]


@pytest.fixture
def tiny_args(tiny_checkpoint, tmp_path, torch_threads):
    torch.set_num_threads(torch_threads)

    def make(**overrides) -> Args:
        base = dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=4, prompts_per_step=8, group_size=8,
                    temperature=1.0, minibatches=2, eval_every=2, eval_problems=16, lr=3e-3, progress=False,
                    out_dir=str(tmp_path / "run"), threads=torch_threads)
        base.update(overrides)
        return Args(**base)

    return make
