"""A skip must not freeze training in any space (issue 51, item 2).

A skipped step changes nothing the next step's vector is made from: in gradient space θ stays, so a deterministic
gradient repeats; in momentum space the stored first moment stays, so the next moment β1·m + (1 − β1)·g mostly
repeats the skipped one; in update space the optimizer's momentum advanced and proposes the skipped direction again.
Measured against the skipped vector, every later step would be skipped. A skip therefore restarts the reference (as
at init) in every space: the next step is measured against nothing (cosine NaN), kept and applied, so at most every
other step is skipped, whatever the gradients.
"""

from __future__ import annotations

import pytest
import torch

import gac

SPACES = ("gradient", "momentum", "update")
OPTIMIZERS = {
    "adamw": lambda params, lr: torch.optim.AdamW(params, lr=lr, weight_decay=0.0),
    "sgd_momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
}


def regimes_of_run(space: str, optimizer: str, gradient, steps: int, lr: float, skip_threshold: float = 0.5):
    """(regimes, final θ) of gac.wrap(optimizer) in ``space`` stepping on ``gradient(θ, step)``."""
    gen = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(40, generator=gen, dtype=torch.float64))
    opt = gac.wrap(OPTIMIZERS[optimizer]([param], lr),
                   gac.GACConfig(threshold=0.0, skip_threshold=skip_threshold, space=space))
    regimes = []
    for step in range(steps):
        param.grad = gradient(param.detach(), step)
        opt.step()
        regimes.append(opt.last_report.regime)
        if regimes[-1] == "skip":
            assert all(r is None for r in opt.gac.reference)  # restarted, as at init
    return regimes, param.detach()


def consecutive_skips(regimes: list[str]) -> int:
    return sum(a == b == "skip" for a, b in zip(regimes, regimes[1:], strict=False))


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("space", SPACES)
def test_no_space_skips_two_steps_in_a_row_on_independent_noise(space, optimizer):
    """Pure noise, no signal: momentum space used to skip 140 of 150 steps (AdamW) after its first skip."""
    gen = torch.Generator().manual_seed(1)
    noise = torch.randn(150, 40, generator=gen, dtype=torch.float64)
    regimes, _ = regimes_of_run(space, optimizer, lambda theta, step: noise[step].clone(), 150, lr=1e-2)
    assert consecutive_skips(regimes) == 0
    assert regimes.count("skip") <= 75
    if space == "momentum":  # consecutive moments share β1 of their mass: the case is exercised
        assert regimes.count("skip") >= 30


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("space", SPACES)
def test_training_with_skips_still_converges_on_a_well_posed_problem(space, optimizer):
    """A quadratic ½ Σ a_i θ_i² with a little noise: the signal dominates, so consecutive vectors are aligned and GAC
    skips; training still reaches the optimum's neighbourhood (gradient and momentum space used to freeze at the
    first skip: θ, or the stored moment, stayed, so the next vector repeated the skipped one)."""
    gen = torch.Generator().manual_seed(2)
    curvature = torch.linspace(0.5, 2.0, 40, dtype=torch.float64)
    noise = 0.01 * torch.randn(400, 40, generator=gen, dtype=torch.float64)
    regimes, theta = regimes_of_run(space, optimizer, lambda theta, step: curvature * theta + noise[step], 400,
                                    lr=0.05)
    start = torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert regimes.count("skip") >= 20  # the case is exercised
    assert consecutive_skips(regimes) == 0
    loss = lambda x: float(0.5 * (curvature * x * x).sum())  # noqa: E731
    assert loss(theta) < 1e-3 * loss(start)
