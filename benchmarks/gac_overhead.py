"""GAC's cost next to the AdamW step people run: ``torch.optim.AdamW(fused=True)``.

The main table (``--sizes``, 10M parameters by default; 100M with ``--sizes 10 100``): the step of
``gac.wrap(AdamW(fused=True))`` in each GAC space (gradient, update, momentum), in the project and the keep regime,
over the fused AdamW step on the same transformer-shaped parameters, each contender measured alternately with the
baseline in one process (medians), at each thread count of ``--threads`` (1 and all by default) and on ``--device``
(cpu, or cuda where one exists); ``AdamW(foreach=True)``, the general path (``fused=False``) and the compiled step
(``compiled=True``, with the time its compile took in the warm-up) are shown beside. Each ratio is printed with its
memory-traffic floors (``FLOOR_PASSES``, ``PATH_PASSES``, ``COMPILED_PASSES``), the floor counting reads only at
the read pass measured where it runs (``READS_ADDED``, ``measure_read_pass``) and the 1-min load average.
``--sharded`` adds FSDP2 on 2 CPU processes; ``--baseline DIR`` times another copy of gac (an earlier commit's)
in the same rounds as this one's, for before/after numbers with their paired difference round by round.
Run: ``python -m benchmarks.gac_overhead [--sizes 10 100] [--threads 1 0] [--device cpu] [--repeats 9]
[--sharded] [--baseline DIR]``.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.cli import parse

if TYPE_CHECKING:
    import torch

# torch and gac are imported where the benchmark runs (--help answers without them)


def transformer_shapes(total_millions: float) -> list[tuple[int, ...]]:
    """Tensor shapes of a GPT-style stack (embedding, per layer qkv/out/mlp/norms) of about that size."""
    hidden = {1: 128, 10: 384, 100: 768}.get(int(total_millions), 256)
    per_layer = 12 * hidden * hidden
    vocab = 4096 if total_millions < 50 else 32000
    layers = max(1, round((total_millions * 1e6 - vocab * hidden) / per_layer))
    shapes: list[tuple[int, ...]] = [(vocab, hidden)]
    for _ in range(layers):
        shapes += [(hidden,), (3 * hidden, hidden), (hidden, hidden), (hidden,), (4 * hidden, hidden),
                   (hidden, 4 * hidden)]
    return shapes + [(hidden,)]


# -- the wrapped step: gac.wrap(AdamW(fused=True)) in each space and regime over AdamW(fused=True) -----------------

SPACES = ("gradient", "update", "momentum")

ADAMW_PASSES = 7
"""Passes over parameter-sized tensors (each tensor read or written once = 1) of a fused AdamW step: read θ, g, m, v;
write θ, m, v. (``AdamW(foreach=True)`` as torch implements it takes 20: one kernel per operation.)"""

FLOOR_PASSES = {("gradient", "project"): 4, ("gradient", "keep"): 2, ("update", "project"): 5,
                ("update", "keep"): 5, ("momentum", "project"): 5, ("momentum", "keep"): 4}
"""Fewest passes GAC adds to the fused AdamW step (reference "prev"), every pass folded into a kernel: the decision
needs ⟨v, d⟩ and ‖v‖² before anything is written (read v, d: 2; ‖d‖² is the stored d's, known). gradient project:
the sums (2), the projection folded into the AdamW pass (read d: 1) and d ← g (write: 1): 4. gradient keep: the sums
(2), the gradient tensor itself kept as d: 2. update: a two-pass kernel (pass 1 forms Δ from θ, g, m, v and takes
its sums with d; pass 2 steps and writes d ← Δ): 12 in all, 5 added, project or keep. momentum project: m_t formed
with its sums (read exp_avg, g, d; write m_t as the new d: 4), the shift m' = m_t − α·d folded into the AdamW pass
(read d: 1): 5; keep: 4."""

PATH_PASSES = {("gradient", "project"): 5, ("gradient", "keep"): 2, ("update", "project"): 10,
               ("update", "keep"): 8, ("momentum", "project"): 7, ("momentum", "keep"): 4}
"""Passes ``gac.fused`` adds (Adam/AdamW): what its ratio would be at memory bandwidth. gradient project: the sums
(read g, d: 2), g' = g − α·d written over d (read g, d; write: 3), the buffers swapping roles: 5. gradient keep: the
sums (2); the gradient tensor becomes d (0). update: θ_before ← θ (2), the sums of Δ = θ_after − θ_before formed
chunk by chunk (read θ_after, θ_before, d: 3), then θ ← θ_after − α·d and d ← Δ (read 3, write 2: 5): 10; keep: d ← Δ
(read 2, write 1: 3): 8. momentum: m_t formed chunk by chunk with its sums taken from cache (read exp_avg, g, d;
write m_t: 4), exp_avg −= α·d/β1 (read 2, write 1: 3), m_t's buffer kept as d (0): 7; keep: 4."""


COMPILED_PASSES = {("gradient", "project"): 4, ("gradient", "keep"): 2, ("update", "project"): 7,
                   ("update", "keep"): 7, ("momentum", "project"): 5, ("momentum", "keep"): 5}
"""Passes ``gac.compiled`` (``wrap(..., compiled=True)``) adds. gradient project: the sums (read g, d: 2), the step
reading d and writing g' over it (2): 4; keep: the fused path's 2. update: loop 1 reads θ, g, m, v, d (5); loop 2 is
the step reading d and writing d ← Δ (2): 7, project or keep. momentum: loop 1 reads g, m, d (3); loop 2 reads d and
writes d ← m_t (2): 5."""


READS_ADDED = {("gradient", "project"): 3, ("gradient", "keep"): 2, ("update", "project"): 6, ("update", "keep"): 5,
               ("momentum", "project"): 4, ("momentum", "keep"): 3}
"""Fewest parameter-sized reads GAC adds to fused AdamW's 4 (θ, g, m, v), writes not counted: where a core's writes
overlap its reads (the read estimate, ``read_floor``: each read at the speed of a pass reading one tensor, which a
kernel reading several at once can beat). gradient project: the sums read g and d (2), the step reads d (1):
3; keep: the sums (2). update: the first loop reads θ, g, m, v, d (5), the step reads d (1): 6; keep: d is
overwritten, not read: 5. momentum: m_t's sums read exp_avg, g, d (3), the step reads d (1): 4; keep: 3."""


def read_floor(reads: int, read_ms: float, adamw_ms: float) -> float:
    """1 + ``reads`` passes reading every parameter-sized tensor once, each ``read_ms``, over a fused AdamW step."""
    return 1 + reads * read_ms / adamw_ms


def measure_read_pass(start: list[torch.Tensor], grads: list[torch.Tensor], repeats: int) -> tuple[float, float]:
    """Medians (ms) of one pass reading every tensor of ``start`` (a sum per tensor) and of a fused AdamW step on a
    copy (``time_step``), measured alternately."""
    params, opt = build(None, start)
    device = start[0].device

    def read():
        begin = time.perf_counter()
        for t in start:
            t.sum()
        synchronize(device)
        return time.perf_counter() - begin

    for _ in range(3):
        read()
        time_step(params, opt, grads, device)
    reads, steps = [], []
    for _ in range(repeats):
        reads.append(read())
        steps.append(time_step(params, opt, grads, device)[0])
    return statistics.median(reads) * 1e3, statistics.median(steps) * 1e3


def floor_ratio(passes: int) -> float:
    """(fused AdamW's passes + ``passes``) / fused AdamW's: the ratio if both ran at memory bandwidth."""
    return (ADAMW_PASSES + passes) / ADAMW_PASSES


TARGETS = {("gradient", "project"): 1.8, ("gradient", "keep"): 1.35, ("update", "project"): 2.6,
           ("momentum", "project"): 2.2}
"""Targets of issue 49 at 10M parameters, one CPU thread (ratio to the fused AdamW step)."""


def load_baseline(path: str):
    """The ``gac`` package under ``path`` (e.g. ``git archive OLD gac | tar -x -C path``), imported beside the
    working tree's so that both are timed alternately in one process."""
    import importlib
    import sys

    def ours():
        return {name: module for name, module in sys.modules.items() if name == "gac" or name.startswith("gac.")}

    current = ours()
    for name in current:
        del sys.modules[name]
    sys.path.insert(0, path)
    try:
        baseline = importlib.import_module("gac")
        if not baseline.__file__.startswith(str(path)):
            raise ValueError(f"--baseline {path}: no gac package there")
        # A package that imports its names on first use (PEP 562) must load them now, while its own modules are
        # the ones named gac: later they would resolve to the working tree's.
        for name in (*getattr(baseline, "__all__", ()), *getattr(baseline, "_SUBMODULES", ())):
            getattr(baseline, name)
    finally:
        sys.path.remove(path)
        for name in ours():
            del sys.modules[name]
        sys.modules.update(current)
    return baseline


@dataclass(frozen=True)
class Contender:
    """One optimizer step timed against the fused AdamW step: plain AdamW (``space`` None) or AdamW wrapped in GAC."""

    name: str
    space: str | None = None
    regime: str = "project"
    foreach: bool = False
    fused_path: bool | None = None  # gac.wrap(..., fused=): None the default (fused for AdamW), False the general path
    compiled: bool = False  # gac.wrap(..., compiled=True): GAC inside a torch.compile'd AdamW step (gac.compiled)
    library: object = None  # another gac module (--baseline); None: this one


def contenders(baseline=None) -> list[list[Contender]]:
    """The rows, in groups timed together (``measure_alternately``): each of this gac's rows alone, or beside the same
    step of ``baseline`` (another gac module, ``--baseline``) for the project rows of the fused and compiled paths."""

    def with_twin(row: Contender) -> list[Contender]:
        if baseline is None:
            return [row]
        return [row, replace(row, name=f"before: {row.name}", library=baseline)]

    groups = [[Contender("AdamW foreach", foreach=True)]]
    for space in SPACES:
        groups += [with_twin(Contender(f"{space} project", space)), [Contender(f"{space} keep", space, "keep")],
                   [Contender(f"{space} project, general", space, fused_path=False)],
                   with_twin(Contender(f"{space} project, compiled", space, compiled=True))]
        if space == "gradient":  # the compiled path's sums before the fused AdamW step
            groups.append([Contender(f"{space} keep, compiled", space, "keep", compiled=True)])
    return groups


def build(contender: Contender | None, start: list[torch.Tensor]):
    """(params, optimizer) for a contender (None: the fused AdamW baseline), on a copy of ``start``."""
    import torch

    import gac

    params = [torch.nn.Parameter(t.clone()) for t in start]
    if contender is None or contender.space is None:
        foreach = contender is not None and contender.foreach
        return params, torch.optim.AdamW(params, lr=1e-4, fused=not foreach, foreach=foreach or None)
    library = contender.library or gac
    inner = torch.optim.AdamW(params, lr=1e-4, fused=True)
    cfg = library.GACConfig(threshold=0.0, space=contender.space)
    if contender.library is not None:
        return params, library.wrap(inner, cfg, compiled=contender.compiled)
    return params, library.wrap(inner, cfg, fused=contender.fused_path, compiled=contender.compiled)


def synchronize(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_step(params, opt, grads: list[torch.Tensor], device: torch.device, sign: float = 1.0) -> tuple[float, float]:
    """(wall, process CPU) seconds of one ``opt.step()``, each parameter given a fresh gradient ``sign``·g first (as
    after ``zero_grad()``; outside the timed region)."""
    for p, g in zip(params, grads, strict=True):
        p.grad = g.mul(sign)
    synchronize(device)
    begin, cpu = time.perf_counter(), time.process_time()
    opt.step()
    synchronize(device)
    return time.perf_counter() - begin, time.process_time() - cpu


def measure_alternately(group: list[Contender], start: list[torch.Tensor], grads: list[torch.Tensor],
                        repeats: int) -> list[dict]:
    """Median step times of the fused AdamW baseline and of each contender in ``group``, all in turn in every round,
    each on its own parameters; one result per contender (its ratio to the same AdamW samples).

    Each step gets a fresh gradient tensor (as after ``zero_grad()``; outside the timed region): the same gradient
    every step (consecutive gradients, steps and first moments aligned: GAC projects, τ = 0), or for the keep
    regime its sign flipped every step (consecutive vectors anti-aligned: cos ≈ −1 ≤ τ, kept). With two contenders
    (this gac and ``--baseline``'s) the second result also holds ``paired``: the median and quartiles over the rounds
    of (second − first) / fused AdamW, each round's three steps timed back to back, so a change of load between
    rounds moves all three."""
    device = start[0].device
    runs = {"adamw": build(None, start), **{c.name: build(c, start) for c in group}}
    regimes = {"adamw": "project", **{c.name: c.regime for c in group}}
    sign = dict.fromkeys(runs, 1.0)

    def timed(name):
        if regimes[name] == "keep":
            sign[name] = -sign[name]
        return time_step(*runs[name], grads, device, sign[name])

    warm_up = {name: [timed(name) for _ in range(3)] for name in runs}  # state, references, buffers, a compile
    samples = {name: [] for name in runs}
    for _ in range(repeats):
        for name in runs:
            samples[name].append(timed(name))
    wall = {name: [w for w, _ in v] for name, v in samples.items()}
    adamw_ms = statistics.median(wall["adamw"]) * 1e3
    adamw_cpu = statistics.median(used for _, used in samples["adamw"])
    results = []
    for contender in group:
        report = runs[contender.name][1].last_report if contender.space else None
        if report is not None:
            assert report.regime == contender.regime, (contender, report)
        if contender.compiled:  # all steps but the first; none where the step is the fused AdamW kernel (gradient keep)
            kept = contender.space == "gradient" and contender.regime == "keep"
            assert runs[contender.name][1]._compiled.steps_taken == (0 if kept else 2 + repeats)
        ms = statistics.median(wall[contender.name]) * 1e3
        cpu = statistics.median(used for _, used in samples[contender.name])
        results.append({"adamw_ms": adamw_ms, "ms": ms, "ratio": ms / adamw_ms, "cpu_ratio": cpu / adamw_cpu,
                        "first_s": max(warm_up[contender.name])})  # the slowest warm-up step: the compile
    if len(group) == 2:
        first, second = (wall[c.name] for c in group)
        paired = [(b - a) / base for a, b, base in zip(first, second, wall["adamw"], strict=True)]
        quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
        results[1]["paired"] = (statistics.median(paired), quartiles[0], quartiles[2])
    return results


def measure_steps(total_millions: float, repeats: int, device: torch.device, baseline=None):
    """(read_ms, adamw_ms) of ``measure_read_pass``, then rows (contender, result) of ``measure_alternately`` for
    each contender, on transformer-shaped parameters; a ``--baseline`` row right after the row it was timed with."""
    import torch

    torch.manual_seed(0)
    start = [(torch.randn(shape) * 0.02).to(device) for shape in transformer_shapes(total_millions)]
    grads = [torch.randn_like(t) for t in start]
    yield measure_read_pass(start, grads, repeats)
    for group in contenders(baseline):
        yield from zip(group, measure_alternately(group, start, grads, repeats), strict=True)


def print_steps(sizes: list[float], repeats: int, device: torch.device, baseline=None) -> None:
    print(f"\nStep of each contender / step of AdamW(fused=True), measured alternately (medians of {repeats});"
          f"\nfloor = (fused AdamW's {ADAMW_PASSES} passes + GAC's fewest) / {ADAMW_PASSES}, path = the same with "
          f"the passes gac.fused adds (gac.fused docstring);\nx cpu = the ratio of process CPU times (with one "
          f"thread on a shared machine, less noisy than wall time); load = 1-min load average before the size;\n"
          f"reads = an estimate counting only reads (READS_ADDED), each at the one-tensor read pass measured here "
          f"(not a strict floor: a kernel reading several tensors at once reads each faster)")
    print(f"{'params':>8} {'load':>5} {'contender':<28} {'fused ms':>9} {'ms':>8} {'x':>5} {'x cpu':>5} {'floor':>5} "
          f"{'path':>5} {'reads':>5} {'target':>6}")
    for size in sizes:
        params_m = sum(math.prod(s) for s in transformer_shapes(size)) / 1e6
        load = os.getloadavg()[0]
        rows = measure_steps(size, repeats, device, baseline)
        read_ms, adamw_ms = next(rows)
        print(f"{params_m:>7.1f}M {load:>5.1f} one pass reading every tensor: {read_ms:.2f} ms = "
              f"{read_ms / adamw_ms:.2f} of a fused AdamW step ({adamw_ms:.2f} ms), alternately", flush=True)
        for contender, r in rows:
            key = (contender.space, contender.regime)
            floor = f"{floor_ratio(FLOOR_PASSES[key]):>5.2f}" if contender.space else f"{'':>5}"
            reads = f"{read_floor(READS_ADDED[key], read_ms, adamw_ms):>5.2f}" if contender.space else f"{'':>5}"
            passes = COMPILED_PASSES if contender.compiled else PATH_PASSES
            path = (f"{floor_ratio(passes[key]):>5.2f}" if contender.space and contender.fused_path is None
                    and contender.library is None else f"{'':>5}")
            target = TARGETS.get(key) if contender.fused_path is None and contender.library is None else None
            print(f"{params_m:>7.1f}M {load:>5.1f} {contender.name:<28} {r['adamw_ms']:>9.2f} {r['ms']:>8.2f} "
                  f"{r['ratio']:>5.2f} {r['cpu_ratio']:>5.2f} {floor} {path} {reads} "
                  f"{'' if target is None else f'<= {target}':>6}", flush=True)
            if "paired" in r:
                median, low, high = r["paired"]
                print(f"{'':>14} (timed with the row above in each round: (before - now) / fused AdamW step, median "
                      f"{median:+.3f}, quartiles {low:+.3f} to {high:+.3f})")
            if contender.compiled:
                wall, used = r["first_s"]
                print(f"{'':>14} (its compile: the slowest warm-up step took {wall:.1f} s wall, {used:.1f} s CPU of "
                      f"this process; the C++ compiler's own time is not counted)")
    print(f"(load average after: {os.getloadavg()[0]:.1f}; targets are for 10M parameters on one CPU thread; "
          f"'general' = gac.wrap(..., fused=False), the path every other optimizer takes)")


# -- sharded case: FSDP2 on 2 CPU processes (gloo) ---------------------------------------------------

def _sharded_worker(rank: int, init_file: str, world: int, hidden: int, layers: int, repeats: int,
                    result_file: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import gac

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                                          torch.nn.Linear(4 * hidden, hidden)) for _ in range(layers)])
        for block in model:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    plain_model, gac_model, half_model, compiled_model = build(), build(), build(), build()
    plain = torch.optim.AdamW(plain_model.parameters(), lr=1e-4, fused=True)
    with_gac = gac.wrap(torch.optim.AdamW(gac_model.parameters(), lr=1e-4, fused=True), gac.GACConfig(threshold=0.0))
    with_half = gac.wrap(torch.optim.AdamW(half_model.parameters(), lr=1e-4, fused=True),
                         gac.GACConfig(threshold=0.0, reference_dtype=torch.bfloat16))
    with_compiled = gac.wrap(torch.optim.AdamW(compiled_model.parameters(), lr=1e-4, fused=True),
                             gac.GACConfig(threshold=0.0), compiled=True)
    x = torch.randn(32, hidden, generator=torch.Generator().manual_seed(rank))

    collectives = []
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(tensor, *args, **kwargs):
        collectives.append(tensor.numel())
        return real_all_reduce(tensor, *args, **kwargs)

    def step(model, opt):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        dist.barrier()
        start = time.perf_counter()
        opt.step()
        dist.barrier()
        return time.perf_counter() - start

    contenders = {"plain": (plain_model, plain), "gac": (gac_model, with_gac), "gac_bf16": (half_model, with_half),
                  "gac_compiled": (compiled_model, with_compiled)}
    for _ in range(2):  # warm-up: optimizer state and references allocated, the compiled step compiled
        for model, opt in contenders.values():
            step(model, opt)
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (model, opt) in contenders.items():
            if name == "gac":
                dist.all_reduce = counting_all_reduce
            times[name].append(step(model, opt))
            dist.all_reduce = real_all_reduce
    lone = []  # the latency GAC's one collective adds by itself: an all_reduce of as many float64 numbers
    numbers = torch.zeros(collectives[0] if collectives else 1, dtype=torch.float64)
    for _ in range(max(repeats, 5)):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(numbers)
        lone.append(time.perf_counter() - start)
    grad_shard_bytes = sum(p.grad._local_tensor.numel() * p.grad._local_tensor.element_size()
                           for p in gac_model.parameters())
    result = {key: statistics.median(value) for key, value in times.items()}
    result.update(collectives_per_step=len(collectives) / repeats, collective_numel=collectives[:1],
                  grad_shard_MB=grad_shard_bytes / 2**20, ref_MB=with_gac.gac.reference_bytes() / 2**20,
                  ref_bf16_MB=with_half.gac.reference_bytes() / 2**20,
                  params_M=sum(p.numel() for p in gac_model.parameters()) / 1e6,
                  compiled_steps=with_compiled._compiled.steps_taken, lone_all_reduce=statistics.median(lone))
    if rank == 0:
        torch.save(result, result_file)
    dist.barrier()
    dist.destroy_process_group()


def sharded(hidden: int = 512, layers: int = 4, repeats: int = 7, world: int = 2) -> dict:
    """Optimizer step time with / without GAC under FSDP2 (gloo, ``world`` CPU processes), per rank."""
    import os
    import tempfile

    import torch
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        result_file = os.path.join(tmp, "result.pt")
        mp.spawn(_sharded_worker, args=(os.path.join(tmp, "init"), world, hidden, layers, repeats, result_file),
                 nprocs=world, join=True)
        return torch.load(result_file, weights_only=True)  # its own worker's file; explicit for torch < 2.6


SHARDED_TARGET = 0.3
"""Target of GAC's added time under FSDP2 (GAC-wrapped fused AdamW step − plain step) / plain step."""


def print_sharded(r: dict) -> None:
    print(f"\nFSDP2, 2 gloo processes, {r['params_M']:.1f}M params, AdamW(fused=True) step incl. GAC (median):")
    print(f"  AdamW step {r['plain'] * 1e3:.2f} ms | +GAC {r['gac'] * 1e3:.2f} ms (x{r['gac'] / r['plain']:.2f}) | "
          f"+GAC bf16 ref {r['gac_bf16'] * 1e3:.2f} ms (x{r['gac_bf16'] / r['plain']:.2f})")
    print(f"  +GAC compiled=True {r['gac_compiled'] * 1e3:.2f} ms (x{r['gac_compiled'] / r['plain']:.2f}; "
          f"{r['compiled_steps']} compiled steps)")
    print(f"  GAC's added time / AdamW step: {(r['gac'] - r['plain']) / r['plain']:.2f}, compiled "
          f"{(r['gac_compiled'] - r['plain']) / r['plain']:.2f} (target <= {SHARDED_TARGET})")
    print(f"  collectives per GAC step: {r['collectives_per_step']:.0f} "
          f"(all_reduce of {r['collective_numel']} numbers); that all_reduce alone: "
          f"{r['lone_all_reduce'] * 1e3:.2f} ms = {r['lone_all_reduce'] / r['plain']:.2f} of the AdamW step")
    print(f"  extra memory per rank: reference {r['ref_MB']:.2f} MB (fp32), {r['ref_bf16_MB']:.2f} MB (bf16); "
          f"gradient shard {r['grad_shard_MB']:.2f} MB")


@dataclass
class OverheadArgs:
    """GAC's cost beside the fused AdamW step: the wrapped step per space and regime, FSDP2."""

    sizes: tuple[float, ...] = (10,)
    """millions of parameters of the wrapped-step table (100 too: --sizes 10 100; about 5 GB and minutes on CPU)"""
    threads: tuple[int, ...] = (1, 0)
    """torch threads, each in turn (0: all cores, os.cpu_count())"""
    device: str = "cpu"
    """where the tensors live: cpu, or cuda (cuda:N)"""
    repeats: int = 9
    """timings per contender (medians are printed)"""
    sharded: bool = False
    """also measure FSDP2 on 2 CPU processes"""
    baseline: str | None = None
    """also time the gac package under this folder (e.g. an earlier commit's, from 'git archive COMMIT gac | tar -x
    -C DIR') in each space, alternately with the fused AdamW step"""

    def __post_init__(self):
        import torch

        if self.repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {self.repeats}")
        if not self.threads or any(t < 0 for t in self.threads):
            raise ValueError(f"--threads must be >= 0 each (0: all cores), got {self.threads}")
        if any(size <= 0 for size in self.sizes):
            raise ValueError("--sizes are millions of parameters: each must be > 0")
        if self.baseline is not None and not Path(self.baseline, "gac").is_dir():
            raise ValueError(f"--baseline {self.baseline}: no gac/ package under it")
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise ValueError(f"--device must be cpu or cuda[:N], got {self.device!r}") from None
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda[:N], got {self.device!r}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {self.device}: torch sees no CUDA device here")


def main(argv=None) -> None:
    # a bad value: one line naming it, exit 2, before any timing
    args = parse(OverheadArgs, argv, prog="python -m benchmarks.gac_overhead")
    import torch

    device = torch.device(args.device)
    all_threads = os.cpu_count() or torch.get_num_threads()
    baseline = load_baseline(args.baseline) if args.baseline else None
    for threads in args.threads:
        torch.set_num_threads(threads or all_threads)
        print(f"\n== torch {torch.__version__}, {args.device}, {torch.get_num_threads()} threads, "
              f"load average {os.getloadavg()[0]:.1f}")
        if args.sizes:
            print_steps(list(args.sizes), args.repeats, device, baseline)
    if args.sharded:
        print_sharded(sharded(repeats=args.repeats))


if __name__ == "__main__":
    main()
