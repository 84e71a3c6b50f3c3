"""A wrapped optimizer copies like a plain one (issue 51, item 3): ``copy.deepcopy``, ``pickle`` and ``torch.save``
of a ``gac.wrap`` optimizer keep GAC's state, and the copy steps exactly as the original does from there on."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

import gac
from tests.gac.helpers import batches, loss_fn, same, tiny_model

CONFIGS = {
    "gradient": gac.GACConfig(threshold=gac.EMAThreshold(warmup=1, margin=0.0), mode="cap", skip_threshold=0.95),
    "update": gac.GACConfig(threshold=0.1, space="update", reference="ema", skip_threshold=0.9),
    "momentum": gac.GACConfig(threshold=0.1, space="momentum"),
}


def torch_save_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)  # the test's own object, not a received file


COPIES = {"deepcopy": copy.deepcopy, "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
          "torch.save": torch_save_load}


def train(model, opt, steps):
    reports = []
    for batch in steps:
        opt.zero_grad()
        loss_fn(model, batch).backward()
        opt.step()
        reports.append((opt.last_report.cosine, opt.last_report.regime, opt.last_report.grad_norm_after))
    return reports


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("space", list(CONFIGS))
def test_a_copied_wrapped_optimizer_steps_as_the_original(space, how):
    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), CONFIGS[space])
    data = batches(10)
    train(model, opt, data[:5])
    copied = COPIES[how]({"model": model, "opt": opt})  # the usual way: model and optimizer together
    other_model, other_opt = copied["model"], copied["opt"]
    assert other_opt.gac.step == 5 and other_opt.optimizer is not opt.optimizer
    assert all(a is b for a, b in zip(other_opt.gac.params, other_model.parameters(), strict=True))
    assert other_opt.state is other_opt.optimizer.state and other_opt.param_groups is other_opt.optimizer.param_groups
    reports = train(model, opt, data[5:])
    other_reports = train(other_model, other_opt, data[5:])
    assert same(reports, other_reports)
    assert any(r[1] != "keep" for r in reports)  # GAC acted after the copy: its state mattered
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other_model.parameters(), strict=True))
    assert same(opt.gac.state_dict()["step"], other_opt.gac.state_dict()["step"])
    with pytest.raises(ValueError, match="already wrapped"):
        gac.wrap(other_opt.optimizer)


def test_the_copy_is_independent_of_the_original():
    model = tiny_model()
    opt = gac.wrap(torch.optim.SGD(model.parameters(), lr=0.1), gac.GACConfig(threshold=0.0))
    train(model, opt, batches(2))
    other = copy.deepcopy(opt)
    reference = [r.clone() for r in other.gac.reference]
    train(model, opt, batches(2, seed=5))
    assert all(torch.equal(a, b) for a, b in zip(other.gac.reference, reference, strict=True))


def test_a_wrapped_optimizer_with_a_process_group_is_refused_at_copy_time(tmp_path):
    """A process group cannot be copied: one line when the copy is made, not an error at the copy's first step."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        model = tiny_model()
        opt = gac.wrap(torch.optim.SGD(model.parameters(), lr=0.1), gac.GACConfig(), process_group=dist.group.WORLD)
        for how in COPIES.values():
            with pytest.raises(TypeError, match="cannot be copied or pickled") as info:
                how(opt)
            assert "\n" not in str(info.value)
    finally:
        dist.destroy_process_group()
