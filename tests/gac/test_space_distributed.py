"""gac.wrap in update and momentum space on sharded parameters: 2 processes (gloo, CPU) each hold part of θ.

AdamW and SGD act elementwise, so each rank's optimizer on its shard is the full optimizer restricted to it;
with the partial sums reduced in one all_reduce per step, every rank must reproduce the single-process run.
"""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist

import gac
from tests.gac.helpers import count_all_reduce, spawn_gloo
from tests.gac.test_space import DIM, STEPS, gradient, make_optimizer, problem, run_wrapped

WORLD = 2
CUT = 7  # rank 0 holds θ[:7] (as two tensors), rank 1 θ[7:]


def worker(rank: int, init_file: str, space: str, optimizer: str, cfg: gac.GACConfig, result_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    calls, restore_all_reduce = count_all_reduce()
    try:
        lo, hi = (0, CUT) if rank == 0 else (CUT, DIM)
        shard = problem()[3][lo:hi]
        params = [torch.nn.Parameter(shard[:3].clone()), torch.nn.Parameter(shard[3:].clone())]
        opt = gac.wrap(make_optimizer(optimizer, params), gac.GACConfig(**{**cfg.__dict__, "space": space}),
                       process_group=dist.group.WORLD)
        regimes = []
        for step in range(STEPS):
            g = gradient(torch.cat([p.detach() for p in params]), step, lo, hi)  # diagonal: shard-local
            params[0].grad, params[1].grad = g[:3].clone(), g[3:].clone()
            opt.step()
            regimes.append(opt.last_report.regime)
        torch.save({"theta": torch.cat([p.detach() for p in params]), "regimes": regimes, "calls": calls},
                   os.path.join(result_dir, f"rank{rank}.pt"))
        restore_all_reduce()
        dist.all_reduce(torch.zeros(1))  # a last collective, outside the count, so teardown finds no rank behind
    finally:
        restore_all_reduce()
        dist.destroy_process_group()


@pytest.mark.parametrize("space, optimizer", [("update", "adamw"), ("momentum", "adamw"), ("momentum", "sgd")])
def test_sharded_spaces_equal_the_single_process_run(space, optimizer):
    cfg = gac.GACConfig(threshold=0.3, mode="cap", reference="ema", ema_decay=0.5)
    expected, expected_regimes = run_wrapped(space, optimizer, cfg)
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), space, optimizer, cfg, tmp), WORLD)
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    assert "cap" in expected_regimes
    for rank, (lo, hi) in enumerate([(0, CUT), (CUT, DIM)]):
        assert results[rank]["regimes"] == expected_regimes
        torch.testing.assert_close(results[rank]["theta"], expected[lo:hi], rtol=1e-10, atol=1e-12)
        # one all_reduce per step (2 flags and 4 sums per parameter tensor), and once the ranks' parameter counts
        assert results[rank]["calls"] == [3] + [2 + 4 * 2] * STEPS
