"""Fixtures of the LLM tests: a tiny Qwen3 checkpoint saved by the package itself, fast run arguments."""

from __future__ import annotations

import pytest
import torch

from sim.llm.train import Args
from sim.llm.warmstart import WarmStartConfig, train_warm_start

# One-digit addition and a 19k-parameter model: a 50-step warm start reaches about 30% held-out accuracy,
# so rewards (and gradients) are not all zero.
TINY_WARM = WarmStartConfig(size="tiny", digits=1, max_steps=100, target_accuracy=0.25, lr=1e-2, eval_every=25,
                            batch_size=64, eval_problems=64)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny_model")
    model, info = train_warm_start(TINY_WARM, log=lambda *a: None)
    assert info["heldout_accuracy"] >= 0.25
    model.save_pretrained(path)
    return path


@pytest.fixture
def tiny_args(tiny_checkpoint, tmp_path):
    torch.set_num_threads(1)

    def make(**overrides) -> Args:
        base = dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=4, prompts_per_step=8, group_size=8,
                    temperature=0.5, minibatches=2, eval_every=2, eval_problems=16, lr=3e-3, progress=False,
                    out_dir=str(tmp_path / "run"))
        base.update(overrides)
        return Args(**base)

    return make


@pytest.fixture
def adamw_hooks(monkeypatch):
    """Callbacks around the trainer's AdamW step, seen from outside it: ``pre(theta, grad, adam, lr)`` just before
    and ``post(theta, adam)`` just after each step (θ, the gradient AdamW receives and its state as (K, P) rows, the
    runs' step sizes). Returns ``register(pre=None, post=None)``."""
    from sim.llm import batched

    pre, post, real = [], [], batched.adamw_step

    def step(theta, grad, adam, lr, rows):
        for hook in pre:
            hook(theta, grad, adam, lr)
        real(theta, grad, adam, lr, rows)
        for hook in post:
            hook(theta, adam)

    monkeypatch.setattr(batched, "adamw_step", step)

    def register(pre_hook=None, post_hook=None):
        pre.extend([pre_hook] if pre_hook else [])
        post.extend([post_hook] if post_hook else [])

    return register
