"""Sharded reductions for DDP / FSDP: one all_reduce per step for everything GAC must agree on.

When each rank holds a shard of the gradient (FSDP), the local sums ⟨g,d⟩, ‖g‖², ‖d‖² and whether it has a gradient,
per parameter tensor, and two non-finite flags are packed into one float64 vector and summed across ranks, so every
rank gets the unsharded sums and takes the same decision. Replicated gradients (DDP) need no collective.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
"""Tensor types that are their own local storage (checked by type first: a missed attribute lookup costs more)."""


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The rank-local storage of t: a DTensor's local shard (a view sharing its memory), else t."""
    if type(t) in PLAIN_TYPES:
        return t
    local = getattr(t, "_local_tensor", None)
    return local if local is not None else t


def infer_process_group(tensors: list[torch.Tensor]):
    """The group to sum over for DTensor gradients (FSDP2), or None for plain tensors."""
    for t in tensors:
        if type(t) in PLAIN_TYPES:
            continue
        mesh = getattr(t, "device_mesh", None)
        if mesh is None:
            continue
        if mesh.ndim != 1:
            raise ValueError("GAC: gradients live on a multi-dimensional device mesh; pass the "
                             "sharding process_group explicitly")
        return mesh.get_group()
    return None


def check_process_group(process_group):
    """``process_group`` itself, or a one-line ValueError when it cannot be used for the sums."""
    if process_group is None:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"GAC: process_group={process_group!r} was given but torch.distributed is not "
                         f"initialised; call dist.init_process_group first, or pass process_group=None")
    if not isinstance(process_group, dist.ProcessGroup):
        raise ValueError(f"GAC: process_group must be a torch.distributed.ProcessGroup, "
                         f"got {type(process_group).__name__}")
    return process_group


def all_reduce_stats(local: torch.Tensor, process_group) -> torch.Tensor:
    """Sum a small float64 vector of per-rank partial sums over ``process_group`` (one collective)."""
    if process_group is None or not dist.is_available() or not dist.is_initialized():
        return local
    dist.all_reduce(local, op=dist.ReduceOp.SUM, group=process_group)
    return local
