"""`python -m paper_figs NAME|all --profile quick|full [--device cpu|cuda]`: regenerate figures.

The command line is the ``FigureArgs`` dataclass, parsed by tyro (``--help`` lists every option).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import torch
import tyro

from experiments.llm import default_jobs
from paper_figs.common import OUT_DIR
from paper_figs.plan import make_figure, make_figures
from sim.record import check_output_dir

# Figure name -> module under paper_figs/ (module name = figure name). Order = run order for "all".
FIGURES = ["fig1_cosine", "fig2_cosine_vs_staleness", "fig3_divergence", "fig4_stability_region", "fig5_llm_grpo",
           "fig6_ablation", "fig7_bound", "fig8_tuned", "fig9_early_warning", "fig10_verdict", "figs1_bandit_snr",
           "figs2_llm_signature"]
LLM_FIGURES = ("fig5_llm_grpo", "fig10_verdict", "figs2_llm_signature")
"""The figures with a ``gpu`` profile (the 25M model on one GPU)."""
FigureName = Literal[tuple([*FIGURES, "all"])]
DRY_RUN_DIR = "dry_run"
"""The sub-folder of --out that a --dry-run writes into."""


@dataclass(frozen=True)
class FigureArgs:
    """Regenerate the paper's figures (PNG, PDF and the CSV each figure plots)."""

    names: tyro.conf.Positional[tuple[FigureName, ...]]
    """figure names, or 'all' for every figure in order"""
    profile: Literal["quick", "full", "gpu"] = "quick"
    """run lengths and seeds: quick (minutes), full (paper scale, hours on CPU) or gpu (LLM figures, --device cuda)"""
    device: str = "cpu"
    """torch device for the runs (cpu or cuda[:N])"""
    out: Path = OUT_DIR
    """output folder"""
    force: bool = False
    """recompute runs even when cached results exist"""
    dry_run: bool = False
    """LLM figures: every run shrunk to the tiny model, 2 steps, one seed, on the CPU (checks a command starts
    and writes its CSV; a gpu profile then needs no CUDA device). Writes into OUT/dry_run/, never over real figures"""


def _fail(message: str) -> None:
    print(f"python -m paper_figs: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _empty_out(argv: list[str]) -> bool:
    """Whether ``argv`` gives ``--out`` an empty value (``--out ""`` or ``--out=``)."""
    return any(a == "--out=" or (a == "--out" and i + 1 < len(argv) and argv[i + 1].strip() == "")
               for i, a in enumerate(argv))


def parse_args(argv=None) -> FigureArgs:
    """The parsed command line, with 'all' expanded and the device and the output folder checked, before any
    compute (SystemExit(2) with a one-line message on bad input)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if _empty_out(argv):  # tyro turns "" into Path("") == Path("."): refuse it before parsing
        _fail("--out is empty; give a folder (use . for the current one)")
    args = tyro.cli(FigureArgs, args=argv, prog="python -m paper_figs", description=__doc__.splitlines()[0])
    try:
        check_output_dir(args.out, "--out")
    except ValueError as err:
        _fail(str(err))
    names = tuple(FIGURES) if "all" in args.names else args.names
    if not names:
        _fail(f"give figure names or 'all': {', '.join(FIGURES)}")
    if args.profile == "gpu":
        if any(name not in LLM_FIGURES for name in names):
            _fail(f"--profile gpu applies to the LLM figures only ({', '.join(LLM_FIGURES)})")
        if not args.dry_run and not args.device.startswith("cuda"):
            _fail("--profile gpu needs --device cuda (or --dry-run for a CPU smoke test)")
    if args.dry_run:  # its figures are smoke tests: they go beside the real ones, never over them
        return replace(args, names=names, device="cpu", out=args.out / DRY_RUN_DIR)
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            _fail(f"--device {args.device} requested but torch sees no CUDA device on this machine")
    elif args.device != "cpu":
        _fail(f"--device must be cpu or cuda[:N], got {args.device!r}")
    return replace(args, names=names)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        jobs = default_jobs(args.device)
    except ValueError as err:
        _fail(str(err))
    if args.force:  # read by experiments.cache: what was cached before now is recomputed, once
        os.environ["GAC_LAB_FORCE_BEFORE"] = repr(time.time())
    if args.dry_run:
        os.environ["GAC_LAB_DRY_RUN"] = "1"  # read by experiments.llm.dry_run_args
    try:
        make_all(args, jobs)
    except KeyboardInterrupt:
        print(f"python -m paper_figs: interrupted; the figures finished so far are in {args.out} and every finished "
              "run is cached: rerun the same command to continue", file=sys.stderr)
        return 130
    return 0


def make_all(args: FigureArgs, jobs: int) -> None:
    """Every figure of ``args``: the plan on ``jobs`` workers, or one figure after another."""
    if jobs > 1 and args.device == "cpu" and not args.dry_run:  # see paper_figs.plan
        make_figures(args.names, args, jobs, log=print)
        return
    for name in args.names:
        start = time.perf_counter()
        print(f"[paper_figs] {name} ({args.profile}) ...", flush=True)
        make_figure(name, args)
        print(f"[paper_figs] {name} done in {time.perf_counter() - start:.1f} s -> {args.out}/{name}.*",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
