"""`python -m paper_figs NAME|all --profile quick|full [--device cpu|cuda]`: regenerate figures."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

import torch

from paper_figs.common import OUT_DIR

# Figure name -> module under paper_figs/ (module name = figure name). Order = run order for "all".
FIGURES = ["fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region", "fig5_llm_grpo",
           "fig6_ablation", "fig7_bound", "figs1_bandit_snr"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m paper_figs", description=__doc__)
    parser.add_argument("names", nargs="+", help=f"figure names or 'all': {', '.join(FIGURES)}")
    parser.add_argument("--profile", choices=["quick", "full"], default="quick")
    parser.add_argument("--device", default="cpu", help="torch device for the runs (cpu or cuda)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder (default paper_figs/out)")
    parser.add_argument("--force", action="store_true", help="recompute runs even when cached results exist")
    args = parser.parse_args(argv)
    names = FIGURES if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)} or 'all'")
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            parser.error(f"--device {args.device} requested but torch sees no CUDA device on this machine")
    elif args.device != "cpu":
        parser.error(f"--device must be cpu or cuda[:N], got {args.device!r}")
    args.names = names
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.force:
        os.environ["GAC_LAB_FORCE"] = "1"  # read by paper_figs.cache.cached
    for name in args.names:
        start = time.perf_counter()
        print(f"[paper_figs] {name} ({args.profile}) ...", flush=True)
        importlib.import_module(f"paper_figs.{name}").main(args.profile, args.out, args.device)
        print(f"[paper_figs] {name} done in {time.perf_counter() - start:.1f} s -> {args.out}/{name}.*",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
