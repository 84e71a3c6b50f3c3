"""Small models and data shared by the gac tests."""

import math

import torch


def tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def batches(steps: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)) for _ in range(steps)]


def loss_fn(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def flat_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def spawn_gloo(worker, args_for, nprocs: int = 2, attempts: int = 2) -> None:
    """Start ``nprocs`` gloo test workers (``torch.multiprocessing``), retried once on a SIGABRT at teardown.

    The workers are forks of a fork server, started by the first call in a test process, which has imported
    ``tests.gac.worker_preload``: spawning them would import torch and the compiler afresh in every rank, most of a
    two-rank test's time; a fork of the test process itself is unsafe (it has threads).

    ``args_for(attempt)`` gives the worker's extra args (a fresh init file per attempt). On this
    machine's CPU torch a gloo worker occasionally aborts while the process group is destroyed
    ("terminate called without an active exception"); that exact failure is retried once, any other
    failure (an assertion, an exception, a second abort) fails the test.
    """
    import multiprocessing

    import torch.multiprocessing as mp

    multiprocessing.set_forkserver_preload(["tests.gac.worker_preload"])  # read when the server starts
    for attempt in range(attempts):
        try:
            mp.start_processes(worker, args=args_for(attempt), nprocs=nprocs, join=True, start_method="forkserver")
            return
        except mp.ProcessExitedException as error:
            if error.signal_name != "SIGABRT" or attempt == attempts - 1:
                raise


def count_all_reduce():
    """Patch ``torch.distributed.all_reduce`` to record each call's element count: (the list it fills, a function
    that puts the real one back)."""
    import torch.distributed as dist

    calls, real = [], dist.all_reduce

    def counting(tensor, *args, **kwargs):
        calls.append(tensor.numel())
        return real(tensor, *args, **kwargs)

    dist.all_reduce = counting

    def restore() -> None:
        dist.all_reduce = real

    return calls, restore


def same(a, b) -> bool:
    """a == b for numbers, strings and (nested) lists or tuples of them, with NaN equal to NaN: the cosine of a zero
    vector (the first step's reference is zero) is NaN on both sides of a comparison."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b
