"""Training with GAC under FSDP2 (fully_shard) and DDP on 2 CPU processes (gloo).

Each rank sees half of every batch; the mean-loss gradient is then the full-batch gradient, so the
trajectory must equal a single-process run on the same data, and every rank must report the same
cosine and regime.
"""

import gc
import os
import tempfile

import pytest
import torch
import torch.distributed as dist

import gac
from tests.gac.helpers import batches, loss_fn, same, spawn_gloo, tiny_model

WORLD, STEPS = 2, 6
CFG = gac.GACConfig(threshold=0.05, mode="cap")


def train(model, data, rank=None, wrap_model=None):
    """AdamW + GAC; returns per-step (cosine, regime) and the final full parameters."""
    if wrap_model is not None:
        model = wrap_model(model)
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), CFG)
    reports = []
    for x, y in data:
        if rank is not None:  # this rank's half of the batch
            half = len(x) // WORLD
            x, y = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
        opt.zero_grad()
        loss_fn(model, (x, y)).backward()
        opt.step()
        reports.append((opt.last_report.cosine, opt.last_report.regime))
    params = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in model.parameters()]
    return reports, [p.detach().clone() for p in params]


def fsdp2(model):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def ddp(model):
    return torch.nn.parallel.DistributedDataParallel(model)


def worker(rank, init_file, kind, result_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        reports, params = train(tiny_model(), batches(STEPS), rank, fsdp2 if kind == "fsdp2" else ddp)
        torch.save((reports, params), os.path.join(result_dir, f"rank{rank}.pt"))
        dist.barrier()  # both ranks done with every collective before teardown
    finally:
        # Free the DDP/FSDP module (and its communication state) before the process group goes: an
        # abrupt teardown with live gloo work aborted a worker once ("terminate called without an
        # active exception").
        gc.collect()
        dist.destroy_process_group()


@pytest.mark.parametrize("kind", ["fsdp2", "ddp"])
def test_sharded_training_matches_single_process(kind):
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), kind, tmp), WORLD)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    single_reports, single_params = train(tiny_model(), batches(STEPS))
    assert any(regime != "keep" for _, regime in single_reports)
    for reports, params in ranks:
        assert [r for _, r in reports] == [r for _, r in single_reports]
        assert [c for c, _ in reports] == pytest.approx([c for c, _ in single_reports], abs=1e-5, nan_ok=True)
        for p, q in zip(params, single_params, strict=True):
            assert torch.allclose(p, q, atol=1e-5)
    # Every rank took the same decision with the same cosine, bit for bit.
    assert same(ranks[0][0], ranks[1][0])
