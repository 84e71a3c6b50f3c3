"""GAC on sharded gradients: 2 processes (gloo, CPU) each hold half of the gradient.

Every rank must take the same decision as the unsharded computation, with one all_reduce per step.
"""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist

import gac
from tests.gac.helpers import count_all_reduce, spawn_gloo

WORLD = 2
STEPS = 8
DIM = 37  # odd, so the shards differ in size


def gradients(step: int) -> torch.Tensor:
    """The full (unsharded) gradient at a step: a drifting direction plus noise, so regimes vary."""
    gen = torch.Generator().manual_seed(step)
    base = torch.linspace(-1, 1, DIM)
    return base * (1.0 + 0.1 * step) + 0.6 * torch.randn(DIM, generator=gen)


def shard_bounds(rank: int) -> tuple[int, int]:
    cut = DIM // 2 + 1
    return (0, cut) if rank == 0 else (cut, DIM)


def worker(rank: int, init_file: str, cfg: gac.GACConfig, result_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    calls, restore_all_reduce = count_all_reduce()
    try:
        lo, hi = shard_bounds(rank)
        # Two parameter tensors per rank, as a model's shard would have.
        params = [torch.zeros(hi - lo - 3, requires_grad=True), torch.zeros(3, requires_grad=True)]
        tracker = gac.GradientAlignmentControl(params, cfg, process_group=dist.group.WORLD)
        out = []
        for step in range(STEPS):
            shard = gradients(step)[lo:hi]
            params[0].grad, params[1].grad = shard[:-3].clone(), shard[-3:].clone()
            report = tracker.apply()
            out.append((report.cosine, report.regime, report.parallel_scale, report.grad_norm_before,
                        torch.cat([params[0].grad, params[1].grad])))
        torch.save({"reports": out, "calls": calls}, os.path.join(result_dir, f"rank{rank}.pt"))
        restore_all_reduce()
        dist.all_reduce(torch.zeros(1))  # a last collective, outside the count, so teardown finds no rank behind
    finally:
        restore_all_reduce()
        dist.destroy_process_group()


@pytest.mark.parametrize("cfg", [gac.GACConfig(threshold=0.3, mode="project"),
                                 gac.GACConfig(threshold=0.3, mode="cap", reference="ema", skip_threshold=0.97)])
def test_sharded_decision_equals_single_process(cfg):
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), cfg, tmp), WORLD)
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]

    reference = torch.zeros(DIM, dtype=torch.float64)
    regimes = set()
    for step in range(STEPS):
        full = gradients(step).double()
        expected = gac.control(full, reference, cfg)
        reference = gac.update_reference(reference, full, cfg)
        regimes.add(int(expected.regime))
        for rank in range(WORLD):
            cosine, regime, scale, norm, shard = results[rank]["reports"][step]
            lo, hi = shard_bounds(rank)
            assert cosine == pytest.approx(expected.cosine.item(), abs=1e-6, nan_ok=True)
            assert regime == gac.regime_name(int(expected.regime), cfg.mode)
            assert scale == pytest.approx(expected.parallel_scale.item(), abs=1e-6)
            assert norm == pytest.approx(full.norm().item(), rel=1e-6)
            assert torch.allclose(shard.double(), expected.grad[lo:hi], atol=1e-6)
    assert len(regimes) >= 2  # the sequence exercises keep and act
    for rank in range(WORLD):
        # one all_reduce per step (2 flags and 4 sums per parameter tensor), and once the ranks' parameter counts
        assert results[rank]["calls"] == [3] + [2 + 4 * 2] * STEPS


def nonfinite_worker(rank: int, init_file: str, result_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        param = torch.zeros(4, requires_grad=True)
        tracker = gac.GradientAlignmentControl([param], gac.GACConfig(), process_group=dist.group.WORLD)
        param.grad = torch.ones(4)
        tracker.apply()
        param.grad = torch.ones(4)
        if rank == 1:
            param.grad[2] = float("nan")  # only rank 1 sees it
        try:
            tracker.apply()
            outcome = "no error"
        except gac.NonFiniteGradientError as error:
            outcome = str(error)
        torch.save(outcome, os.path.join(result_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_nonfinite_on_one_rank_stops_every_rank():
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(nonfinite_worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), tmp), WORLD)
        outcomes = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    assert all("non-finite gradient at step 1" in o for o in outcomes)


def presence_worker(rank: int, init_file: str, result_dir: str) -> None:
    """Two parameters, each sharded over both ranks. At step 1 parameter 0 gets a gradient on rank 1's shard only
    (rank 0's shard is all zeros: a genuine zero there), parameter 1 none at all (zeros on both ranks). Then a rank
    holding a different number of parameter tensors is refused in one line."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        params = [torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)]
        tracker = gac.GradientAlignmentControl(params, gac.GACConfig(threshold=0.0), process_group=dist.group.WORLD)
        full = presence_gradients()
        out = []
        for step in range(2):
            params[0].grad = full[step][0][3 * rank: 3 * rank + 3].clone()
            params[1].grad = full[step][1][2 * rank: 2 * rank + 2].clone()
            report = tracker.apply()
            out.append((report.cosine, report.regime, torch.cat([params[0].grad, params[1].grad])))
        extra = [torch.zeros(1, requires_grad=True)] if rank == 1 else []
        other = gac.GradientAlignmentControl(params + extra, gac.GACConfig(), process_group=dist.group.WORLD)
        for p in params + extra:
            p.grad = torch.ones_like(p)
        try:
            other.apply()
            refusal = "no error"
        except ValueError as error:
            refusal = str(error)
        torch.save({"out": out, "refusal": refusal}, os.path.join(result_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def presence_gradients() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    first = (torch.randn(6, generator=gen), torch.randn(4, generator=gen))
    second = torch.randn(6, generator=gen)
    second[:3] = 0.0  # rank 0's shard of parameter 0: zero, while rank 1's is not
    return [first, (second + 0.0, torch.zeros(4))]


def test_sharded_presence_is_decided_per_parameter_over_all_ranks():
    """Whether a parameter takes part is decided over all its shards: parameter 0 (zero on one shard) is counted and
    projected on both ranks, parameter 1 (zero everywhere) is neither, exactly as in one process."""
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(presence_worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), tmp), WORLD)
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    (a0, b0), (a1, b1) = presence_gradients()
    # One process: at step 1 only parameter 0 takes part, against its own step-0 gradient.
    cosine = float(a1 @ a0 / (a1.norm() * a0.norm()))
    projected = a1 - (a1 @ a0) / (a0 @ a0) * a0 if cosine > 0 else a1
    for rank, result in enumerate(results):
        got_cosine, regime, grads = result["out"][1]
        assert got_cosine == pytest.approx(cosine, abs=1e-6) and regime == ("project" if cosine > 0 else "keep")
        torch.testing.assert_close(grads[:3], projected[3 * rank: 3 * rank + 3], atol=1e-6, rtol=1e-6)
        assert torch.equal(grads[3:], torch.zeros(2))  # parameter 1 took no part: not moved
        assert "different numbers of parameter tensors" in result["refusal"] and "\n" not in result["refusal"]
    assert results[0]["out"][1][1] == "project"  # the case is exercised: rank 0's zero shard was projected
