"""Imported once by the gloo workers' fork server (``helpers.spawn_gloo``), so that each worker, a fork of it, starts
with what every rank would otherwise load itself: torch, FSDP2, torch.compile's compiler and its probe of the CPU's
vector instructions (it builds and loads a test library per instruction set, in subprocesses)."""

import torch  # noqa: F401
import torch._inductor.compile_fx  # noqa: F401
import torch.distributed.fsdp  # noqa: F401
from torch._inductor.cpu_vec_isa import pick_vec_isa

import gac  # noqa: F401

pick_vec_isa()
