"""Issue 35: configurations that used to fail silently are now controlled correctly or refused in one line."""

import pytest
import torch

import gac
from tests.gac.helpers import batches, loss_fn, tiny_model

OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
}


def one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


# -- 1. update space + skip_threshold must not lock training in -----------------------------------------
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("skip_threshold", [0.9, 0.99])
def test_update_space_skip_cannot_lock_in(optimizer, skip_threshold):
    """θ is restored on a skip but the optimizer's momentum advanced: against the skipped Δ as reference every
    later step was skipped (100 / 100). A skip now restarts the reference, so the next step is always applied."""
    model = tiny_model()
    opt = gac.wrap(OPTIMIZERS[optimizer](model.parameters()),
                   gac.GACConfig(threshold=0.0, skip_threshold=skip_threshold, space="update"))
    regimes = []
    for batch in batches(120):
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad()
        regimes.append(opt.last_report.regime)
        if regimes[-1] == "skip":
            assert all(r is None for r in opt.gac.reference)  # restarted, as at init
    assert "skip" in regimes  # the case is exercised
    after_skip = [b for a, b in zip(regimes[:-1], regimes[1:], strict=True) if a == "skip"]
    assert after_skip and "skip" not in after_skip
    assert regimes[60:].count("skip") <= 30


def test_update_space_nonfinite_step_is_not_applied():
    """A finite gradient whose proposed step overflows (fp16) is skipped under nonfinite="skip": θ stays as it was."""
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    opt = gac.wrap(torch.optim.SGD([param], lr=2.0), gac.GACConfig(space="update", nonfinite="skip"))
    param.grad = torch.full((3,), 60000.0, dtype=torch.float16)
    opt.step()
    assert opt.last_report.regime == "skip" and opt.last_report.nonfinite
    assert torch.equal(param.detach(), torch.ones(3, dtype=torch.float16))
