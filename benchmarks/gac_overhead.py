"""GAC's cost next to an AdamW step, on parameter lists shaped like a transformer's.

For 1M / 10M / 100M parameters: median time of ``GradientAlignmentControl.apply()`` (in the keep
and in the project regime) and of ``torch.optim.AdamW(foreach=True).step()`` on the same
parameters, measured alternately in one run; the ratio GAC / AdamW; the extra memory (the reference
buffer, fp32 and bf16). ``--sharded`` adds FSDP2 on 2 CPU processes: optimizer step time with and
without GAC, collectives per step, reference memory against the gradient shard. ``--spaces`` adds the
whole wrapped AdamW step in each GAC space (gradient, update, momentum) over the plain AdamW step, measured
alternately, and the bytes of state each keeps.
Each space's ratio is printed beside its memory-traffic floor (``traffic_floor``); ``--baseline DIR`` times another
copy of gac (an earlier commit's) alternately in the same run, for before/after numbers.
Run: ``python -m benchmarks.gac_overhead [--sizes 1 10 100] [--repeats 7] [--sharded] [--spaces 1 10]
[--baseline DIR] [--skip-apply]``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import gac
from sim.cli import parse


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


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(total_millions: float, repeats: int) -> dict:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape) * 0.02) for shape in transformer_shapes(total_millions)]
    grads = [torch.randn_like(p) for p in params]
    numel = sum(p.numel() for p in params)
    adamw = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    keep = gac.GradientAlignmentControl(params, gac.GACConfig(threshold=0.99))
    project = gac.GradientAlignmentControl(params, gac.GACConfig(threshold=0.0))
    half = gac.GradientAlignmentControl(params, gac.GACConfig(threshold=0.0, reference_dtype=torch.bfloat16))

    def set_grads():
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()

    def timed(step):
        # Setting .grad is outside the timed region; the same fresh gradient each call so the
        # project regime acts every time (cos = 1 with the previous, identical, gradient).
        set_grads()
        start = time.perf_counter()
        step()
        return time.perf_counter() - start

    for tracker in (keep, project, half, adamw):  # warm-up: allocate states and references
        timed(tracker.apply if tracker is not adamw else adamw.step)
    samples = {"adamw": [], "keep": [], "project": [], "project_bf16": []}
    for _ in range(repeats):  # alternate, so all see the same machine load
        samples["adamw"].append(timed(adamw.step))
        samples["keep"].append(timed(keep.apply))
        samples["project"].append(timed(project.apply))
        samples["project_bf16"].append(timed(half.apply))
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {"params_M": numel / 1e6, "tensors": len(params), **{f"{k}_ms": v * 1e3 for k, v in med.items()},
            "ratio_keep": med["keep"] / med["adamw"], "ratio_project": med["project"] / med["adamw"],
            "ratio_project_bf16": med["project_bf16"] / med["adamw"],
            "extra_MB_fp32": project.reference_bytes() / 2**20, "extra_MB_bf16": half.reference_bytes() / 2**20,
            "project_regime": project.last_report.regime}


# -- spaces: the whole wrapped step in gradient / update / momentum space ------------------------------

SPACES = ("gradient", "update", "momentum")

ADAMW_PASSES = 20
"""Passes over parameter-sized tensors (each tensor read or written once = 1) of ``torch.optim.AdamW(foreach=True)``'s
step as torch implements it (torch/optim/adam.py, ``_multi_tensor_adam``, decoupled weight decay): θ·(1 − lr·wd) 2,
lerp of exp_avg 3, exp_avg_sq·β2 2, addcmul into exp_avg_sq 3, sqrt into a new tensor 2, ÷ bias correction 2, + eps 2,
addcdiv into θ 4. (A fused AdamW needs 7: read θ, g, m, v; write θ, m, v.)"""

GAC_FLOOR_PASSES = {"gradient": 5, "update": 10, "momentum": 8}
"""Fewest passes each space adds to the step, GAC acting (project) with reference "prev": the decision needs the
sums before anything is written, so one reading pass and one writing pass at least. gradient: read g, d (⟨g,d⟩, ‖g‖²;
‖d‖² is last step's ‖g‖²), then read g, d and write g' over d, the two buffers swapping roles (.grad ← the buffer
holding g', d ← the one holding g: ``GACOptimizer.swap_grads``): 5 (6 when d ← g is a copy). update: copy θ into
θ_before (2); read θ_after, θ_before, d (Δ formed on the fly); read them again and write θ ← θ_after − α·d and d ← Δ
(5): 10. momentum: form m_t from exp_avg and g (3); read m_t, d (2); exp_avg −= α·d/β1 (3); d ← m_t by keeping m_t's
buffer (0): 8."""


def traffic_floor(space: str) -> float:
    """The lowest ratio (step with GAC) / (AdamW step) if both ran at memory bandwidth: (AdamW + GAC passes) / AdamW."""
    return (ADAMW_PASSES + GAC_FLOOR_PASSES[space]) / ADAMW_PASSES


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
    finally:
        sys.path.remove(path)
        for name in ours():
            del sys.modules[name]
        sys.modules.update(current)
    return baseline


def measure_spaces(total_millions: float, repeats: int, baseline=None) -> dict:
    """Median time of ``opt.step()`` for plain AdamW and AdamW wrapped in each space (project regime), alternately;
    with ``baseline`` (another gac module) its wrapped steps too, named "before:SPACE".

    Each variant has its own copy of the parameters (steps move them); every step gets the same fresh gradient,
    so consecutive gradients, proposed steps and first moments are aligned and GAC projects every time.
    """
    torch.manual_seed(0)
    shapes = transformer_shapes(total_millions)
    start = [torch.randn(shape) * 0.02 for shape in shapes]
    grads = [torch.randn_like(t) for t in start]
    libraries = {"": gac} | ({"before:": baseline} if baseline is not None else {})
    variants = {}
    for name in ("adamw", *(prefix + space for prefix in libraries for space in SPACES)):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        inner = torch.optim.AdamW(params, lr=1e-4, foreach=True)
        if name == "adamw":
            variants[name] = (params, inner)
            continue
        prefix, space = name.rsplit(":", 1) if ":" in name else ("", name)
        library = libraries[prefix + ":" if prefix else ""]
        variants[name] = (params, library.wrap(inner, library.GACConfig(threshold=0.0, space=space)))

    def timed(name):
        params, opt = variants[name]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        begin = time.perf_counter()
        opt.step()
        return time.perf_counter() - begin

    for name in variants:  # warm-up: optimizer state and references allocated, and a first moment to control
        timed(name), timed(name)
    samples = {name: [] for name in variants}
    for _ in range(repeats):
        for name in variants:
            samples[name].append(timed(name))
    med = {name: statistics.median(v) for name, v in samples.items()}
    param_bytes = sum(t.numel() * t.element_size() for t in start)
    result = {"params_M": sum(t.numel() for t in start) / 1e6, "adamw_ms": med["adamw"] * 1e3,
              "param_MB": param_bytes / 2**20, "variants": [n for n in variants if n != "adamw"]}
    for name in result["variants"]:
        opt = variants[name][1]
        assert opt.last_report.regime == "project", (name, opt.last_report)
        result[f"{name}_ms"] = med[name] * 1e3
        result[f"{name}_ratio"] = med[name] / med["adamw"]
        # kept between steps: the reference, plus (this code) the buffer update / momentum space reuse
        kept = opt.gac.reference_bytes() + (opt.gac.scratch_bytes() if hasattr(opt.gac, "scratch_bytes") else 0)
        result[f"{name}_kept_MB"] = kept / 2**20
    return result


def print_spaces(sizes: list[float], repeats: int, baseline=None) -> None:
    print("\nWrapped AdamW step in each GAC space / plain AdamW step (medians, alternated; project regime);")
    print(f"floor = (AdamW's {ADAMW_PASSES} passes + the space's fewest) / AdamW's: the ratio at memory bandwidth")
    print(f"{'params':>8} {'AdamW ms':>9}  {'variant':<18} {'ms':>8} {'x':>5} {'floor':>5} {'kept MB':>8}")
    for size in sizes:
        r = measure_spaces(size, repeats, baseline)
        for name in r["variants"]:
            space = name.rsplit(":", 1)[-1]
            print(f"{r['params_M']:>7.1f}M {r['adamw_ms']:>9.2f}  {name:<18} {r[name + '_ms']:>8.2f} "
                  f"{r[name + '_ratio']:>5.2f} {traffic_floor(space):>5.2f} {r[name + '_kept_MB']:>8.1f}", flush=True)
    print("(kept: memory held between steps, the reference and any reused buffer; GAC's added time = x − 1)")


# -- sharded case: FSDP2 on 2 CPU processes (gloo) ---------------------------------------------------

def _sharded_worker(rank: int, init_file: str, world: int, hidden: int, layers: int, repeats: int,
                    result_file: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

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

    plain_model, gac_model, half_model = build(), build(), build()
    plain = torch.optim.AdamW(plain_model.parameters(), lr=1e-4, foreach=True)
    with_gac = gac.wrap(torch.optim.AdamW(gac_model.parameters(), lr=1e-4, foreach=True), gac.GACConfig(threshold=0.0))
    with_half = gac.wrap(torch.optim.AdamW(half_model.parameters(), lr=1e-4, foreach=True),
                         gac.GACConfig(threshold=0.0, reference_dtype=torch.bfloat16))
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

    for model, opt in ((plain_model, plain), (gac_model, with_gac), (half_model, with_half)):
        step(model, opt)  # warm-up: optimizer state and references allocated
    times = {"plain": [], "gac": [], "gac_bf16": []}
    for _ in range(repeats):
        times["plain"].append(step(plain_model, plain))
        dist.all_reduce = counting_all_reduce
        times["gac"].append(step(gac_model, with_gac))
        dist.all_reduce = real_all_reduce
        times["gac_bf16"].append(step(half_model, with_half))
    grad_shard_bytes = sum(p.grad._local_tensor.numel() * p.grad._local_tensor.element_size()
                           for p in gac_model.parameters())
    result = {key: statistics.median(value) for key, value in times.items()}
    result.update(collectives_per_step=len(collectives) / repeats, collective_numel=collectives[:1],
                  grad_shard_MB=grad_shard_bytes / 2**20, ref_MB=with_gac.gac.reference_bytes() / 2**20,
                  ref_bf16_MB=with_half.gac.reference_bytes() / 2**20,
                  params_M=sum(p.numel() for p in gac_model.parameters()) / 1e6)
    if rank == 0:
        torch.save(result, result_file)
    dist.barrier()
    dist.destroy_process_group()


def sharded(hidden: int = 512, layers: int = 4, repeats: int = 7, world: int = 2) -> dict:
    """Optimizer step time with / without GAC under FSDP2 (gloo, ``world`` CPU processes), per rank."""
    import os
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        result_file = os.path.join(tmp, "result.pt")
        mp.spawn(_sharded_worker, args=(os.path.join(tmp, "init"), world, hidden, layers, repeats, result_file),
                 nprocs=world, join=True)
        return torch.load(result_file, weights_only=True)  # its own worker's file; explicit for torch < 2.6


UNSHARDED_TARGET = 1.2
"""Target of the unsharded ratio (GAC's ``apply()`` alone / the AdamW step on the same parameters)."""
SHARDED_TARGET = 1.2
"""Target of the sharded ratio (GAC-wrapped AdamW step / plain AdamW step under FSDP2)."""


def print_sharded(r: dict) -> None:
    print(f"\nFSDP2, 2 gloo processes, {r['params_M']:.1f}M params, optimizer step incl. GAC (median):")
    print(f"  AdamW step {r['plain'] * 1e3:.2f} ms | +GAC {r['gac'] * 1e3:.2f} ms (x{r['gac'] / r['plain']:.2f}) | "
          f"+GAC bf16 ref {r['gac_bf16'] * 1e3:.2f} ms (x{r['gac_bf16'] / r['plain']:.2f})")
    print(f"  ratio GAC / AdamW: {r['gac'] / r['plain']:.2f} (target <= {SHARDED_TARGET})")
    # The unsharded table's proj/Adam is GAC's own time over the AdamW step; the same measure here:
    print(f"  GAC's added time / AdamW step: {(r['gac'] - r['plain']) / r['plain']:.2f} "
          f"(comparable with the unsharded proj/Adam column)")
    print(f"  collectives per GAC step: {r['collectives_per_step']:.0f} "
          f"(all_reduce of {r['collective_numel']} numbers)")
    print(f"  extra memory per rank: reference {r['ref_MB']:.2f} MB (fp32), {r['ref_bf16_MB']:.2f} MB (bf16); "
          f"gradient shard {r['grad_shard_MB']:.2f} MB")


@dataclass
class OverheadArgs:
    """GAC's cost beside AdamW: apply() alone per size, the wrapped step per space, FSDP2 on 2 processes."""

    sizes: tuple[float, ...] = (1, 10, 100)
    """millions of parameters (the apply()-alone table)"""
    repeats: int = 7
    """timings per configuration (medians are printed)"""
    threads: int | None = None
    """torch threads (default: torch's choice)"""
    sharded: bool = False
    """also measure FSDP2 on 2 CPU processes"""
    spaces: tuple[float, ...] | None = None
    """also time the wrapped step in each GAC space at these sizes (millions)"""
    baseline: str | None = None
    """with --spaces: also time the gac package under this folder (e.g. an earlier commit's, from
    'git archive COMMIT gac | tar -x -C DIR'), alternately in the same run"""
    skip_apply: bool = False
    """skip the apply()-alone table (--sizes)"""

    def __post_init__(self):
        if self.repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {self.repeats}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {self.threads}")
        if any(size <= 0 for size in self.sizes + (self.spaces or ())):
            raise ValueError("--sizes and --spaces are millions of parameters: each must be > 0")
        if self.baseline is not None and not Path(self.baseline, "gac").is_dir():
            raise ValueError(f"--baseline {self.baseline}: no gac/ package under it")


def main(argv=None) -> None:
    # a bad value: one line naming it, exit 2, before any timing
    args = parse(OverheadArgs, argv, prog="python -m benchmarks.gac_overhead")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, medians of {args.repeats}")
    header = (f"{'params':>8} {'tensors':>7} {'AdamW ms':>9} {'keep ms':>8} {'proj ms':>8} {'bf16 ms':>8} "
              f"{'keep/Adam':>9} {'proj/Adam':>9} {'bf16/Adam':>9} {'ref MB':>7} {'bf16 MB':>7}")
    if not args.skip_apply:
        print(header)
    for size in [] if args.skip_apply else list(args.sizes):
        r = measure(size, args.repeats)
        assert r["project_regime"] == "project"
        print(f"{r['params_M']:>7.1f}M {r['tensors']:>7} {r['adamw_ms']:>9.2f} {r['keep_ms']:>8.2f} "
              f"{r['project_ms']:>8.2f} {r['project_bf16_ms']:>8.2f} {r['ratio_keep']:>9.2f} "
              f"{r['ratio_project']:>9.2f} {r['ratio_project_bf16']:>9.2f} {r['extra_MB_fp32']:>7.1f} "
              f"{r['extra_MB_bf16']:>7.1f}", flush=True)
    if not args.skip_apply:
        print("(x/Adam = GAC's apply() alone over the AdamW step, target proj/Adam <= "
              f"{UNSHARDED_TARGET}; the step with GAC is 1 + proj/Adam of the plain step)")
    if args.sharded:
        print_sharded(sharded(repeats=args.repeats))
    if args.spaces is not None:
        print_spaces(list(args.spaces), args.repeats, load_baseline(args.baseline) if args.baseline else None)


if __name__ == "__main__":
    main()
