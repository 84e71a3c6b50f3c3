"""torch.compile of a wrapped optimizer's step is refused in one line (issue 51, item 5); the uncompiled step and a
compiled model are unaffected."""

from __future__ import annotations

import pytest
import torch

import gac


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_a_compiled_step_is_refused_in_one_line_before_it_changes_anything(space):
    param = torch.nn.Parameter(torch.ones(4))
    opt = gac.wrap(torch.optim.AdamW([param], lr=0.1), gac.GACConfig(threshold=0.0, space=space))
    param.grad = torch.tensor([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="torch.compile of a gac.wrap optimizer's step is not supported") as info:
        torch.compile(opt.step)()
    assert "\n" not in str(info.value)
    assert torch.equal(param.detach(), torch.ones(4)) and opt.gac.step == 0 and not opt.state.get(param)
    opt.step()  # the same optimizer, uncompiled, steps as usual
    assert opt.gac.step == 1 and not torch.equal(param.detach(), torch.ones(4))
