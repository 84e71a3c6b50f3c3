"""GAC's cost next to an AdamW step, on parameter lists shaped like a transformer's.

For 1M / 10M / 100M parameters: median time of ``GradientAlignmentControl.apply()`` (in the keep
and in the project regime) and of ``torch.optim.AdamW(foreach=True).step()`` on the same
parameters, measured alternately in one run; the ratio GAC / AdamW; the extra memory (the reference
buffer, fp32 and bf16). Run: ``python -m benchmarks.gac_overhead [--sizes 1 10 100] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import gac


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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 10, 100], help="millions of parameters")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, medians of {args.repeats}")
    header = (f"{'params':>8} {'tensors':>7} {'AdamW ms':>9} {'keep ms':>8} {'proj ms':>8} {'bf16 ms':>8} "
              f"{'keep/Adam':>9} {'proj/Adam':>9} {'bf16/Adam':>9} {'ref MB':>7} {'bf16 MB':>7}")
    print(header)
    for size in args.sizes:
        r = measure(size, args.repeats)
        assert r["project_regime"] == "project"
        print(f"{r['params_M']:>7.1f}M {r['tensors']:>7} {r['adamw_ms']:>9.2f} {r['keep_ms']:>8.2f} "
              f"{r['project_ms']:>8.2f} {r['project_bf16_ms']:>8.2f} {r['ratio_keep']:>9.2f} "
              f"{r['ratio_project']:>9.2f} {r['ratio_project_bf16']:>9.2f} {r['extra_MB_fp32']:>7.1f} "
              f"{r['extra_MB_bf16']:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
