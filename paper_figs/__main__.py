"""`python -m paper_figs NAME|all --profile quick|full [--device D] [--jobs N] [--executor local|ray [--address A]]
[--style talk]`: regenerate figures.

The command line is the ``FigureArgs`` dataclass (paper_figs.driver), parsed by tyro (``--help`` lists every option).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace

import torch
import tyro

from experiments import cache, cluster
from experiments.llm import default_jobs, largest_size
from paper_figs.common import STYLES
from paper_figs.driver import DRY_RUN_DIR, FIGURES, LLM_FIGURES, TALK_DIR, FigureArgs, declare, make_figures, plan
from sim.record import check_output_dir, one_line_os_error


def _fail(message: str) -> None:
    print(f"python -m paper_figs: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _empty_out(argv: list[str]) -> bool:
    """Whether ``argv`` gives ``--out`` an empty value (``--out ""`` or ``--out=``)."""
    return any(a == "--out=" or (a == "--out" and i + 1 < len(argv) and argv[i + 1].strip() == "")
               for i, a in enumerate(argv))


def _bad_style(argv: list[str]) -> str | None:
    """The value given to ``--style`` when it is not one of STYLES (tyro's own refusal is a multi-line box)."""
    for i, a in enumerate(argv):
        value = a.partition("=")[2] if a.startswith("--style=") else (
            argv[i + 1] if a == "--style" and i + 1 < len(argv) else None)
        if value is not None and value not in STYLES:
            return value
    return None


def parse_args(argv=None) -> FigureArgs:
    """The parsed command line, with 'all' expanded and the device and the output folder checked, before any
    compute (SystemExit(2) with a one-line message on bad input)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if _empty_out(argv):  # tyro turns "" into Path("") == Path("."): refuse it before parsing
        _fail("--out is empty; give a folder (use . for the current one)")
    if (style := _bad_style(argv)) is not None:
        _fail(f"--style must be one of {', '.join(STYLES)}, got {style!r}")
    args = tyro.cli(FigureArgs, args=argv, prog="python -m paper_figs", description=__doc__.splitlines()[0])
    try:
        check_output_dir(args.out, "--out")
    except ValueError as err:
        _fail(str(err))
    names = tuple(FIGURES) if "all" in args.names else args.names
    if not names:
        _fail(f"give figure names or 'all': {', '.join(FIGURES)}")
    if args.jobs is not None and args.jobs < 1:
        _fail(f"--jobs must be a whole number of worker processes >= 1, got {args.jobs}")
    if args.address is not None and args.executor != "ray":
        _fail("--address names a Ray cluster: give it with --executor ray")
    if args.profile == "gpu":
        if any(name not in LLM_FIGURES for name in names):
            _fail(f"--profile gpu applies to the LLM figures only ({', '.join(LLM_FIGURES)})")
        if not args.dry_run and not args.device.startswith("cuda"):
            _fail("--profile gpu needs --device cuda (or --dry-run for a CPU smoke test)")
    # a dry run's figures are smoke tests and slides are not the paper's: each goes beside the real ones, never over
    out = args.out / DRY_RUN_DIR if args.dry_run else args.out
    args = replace(args, out=out / TALK_DIR if args.style == "talk" else out)
    if args.dry_run:
        return replace(args, names=names, device="cpu")
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            _fail(f"--device {args.device} requested but torch sees no CUDA device on this machine")
    elif args.device != "cpu":
        _fail(f"--device must be cpu or cuda[:N], got {args.device!r}")
    return replace(args, names=names)


def main(argv=None) -> int:
    args = parse_args(argv)
    declared = declare(args)
    if args.plan:
        plan(declared)
        return 0
    with contextlib.ExitStack() as stack:
        executor = None
        try:
            if args.executor == "ray":  # connected and checked before any work
                ray_cluster = stack.enter_context(cluster.connect(args.address, cache.CACHE_DIR))
                jobs, executor = args.jobs or ray_cluster.cpus, ray_cluster.executor
            else:
                jobs = default_jobs(largest_size([u for units in declared.values() for u in units]), args.jobs,
                                    args.device)
        except ValueError as err:
            _fail(str(err))
        return _run(args, jobs, declared, executor)


def _run(args, jobs: int, declared, executor) -> int:
    try:
        make_figures(args, jobs, declared=declared, executor=executor, progress=True)
    except KeyboardInterrupt:
        print(f"python -m paper_figs: interrupted; the figures finished so far are in {args.out} and every finished "
              "run is cached: rerun the same command to continue", file=sys.stderr)
        return 130
    except OSError as err:  # disk full, a folder made read-only during the run: the path and the next step
        print(f"python -m paper_figs: error: {one_line_os_error(err, args.out)}; the figures finished so far are in "
              f"{args.out} and every finished run is cached (or was warned about): fix that and rerun the same "
              "command", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
