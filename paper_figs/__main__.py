"""Regenerate figures: `python -m paper_figs NAME|all --profile quick|full [--device D] [--jobs N] [--executor
local|ray [--address A]]`.

The command line is the ``FigureArgs`` dataclass (paper_figs.driver), parsed by tyro (``--help`` lists every option;
``runtime.cli``: a bad value is one line, exit status 2, before any work).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import replace

from paper_figs.args import DRY_RUN_DIR, FIGURES, FigureArgs
from runtime.cli import check_device, fail, parse
from runtime.files import check_output_dir, one_line_os_error
from runtime.paths import force_recompute

# torch, the simulators and the run graph are imported where a command runs them (--help answers without them)


def declare(args: FigureArgs) -> dict:
    """``paper_figs.driver.declare``: each figure's units."""
    from paper_figs.driver import declare as declare_units

    return declare_units(args)


def make_figures(*args, **options):
    """``paper_figs.driver.make_figures``: compute the units and draw the figures."""
    from paper_figs.driver import make_figures as draw

    return draw(*args, **options)

PROG = "python -m paper_figs"


def _fail(message: str) -> None:
    fail(PROG, message)


def parse_args(argv=None) -> FigureArgs:
    """The parsed command line (``FigureArgs``, its values checked as it is built), with 'all' expanded and the
    device and the output folder checked, before any compute (SystemExit(2) with a one-line message on bad input)."""
    args = parse(FigureArgs, argv, prog=PROG, description=__doc__.splitlines()[0])
    try:
        check_output_dir(args.out, "--out")
    except ValueError as err:
        _fail(str(err))
    names = tuple(FIGURES) if "all" in args.names else args.names
    if force_recompute():  # GAC_LAB_FORCE=1, as documented (runtime.paths): the same as --force
        args = replace(args, force=True)
    # a dry run's figures are smoke tests: they go beside the real ones, never over them
    args = replace(args, out=args.out / DRY_RUN_DIR if args.dry_run else args.out)
    if args.dry_run:
        return replace(args, names=names, device="cpu")
    try:
        check_device(args.device)
    except ValueError as err:
        _fail(str(err))
    return replace(args, names=names)


def main(argv=None) -> int:
    args = parse_args(argv)
    from runtime import cache, cluster
    from runtime.graph import default_jobs

    declared = declare(args)
    with contextlib.ExitStack() as stack:
        executor = None
        try:
            if args.executor == "ray":  # connected and checked before any work
                ray_cluster = stack.enter_context(cluster.connect(args.address, cache.CACHE_DIR))
                jobs, executor = args.jobs or ray_cluster.cpus, ray_cluster.executor
            else:
                jobs = default_jobs(args.jobs, args.device)
        except ValueError as err:
            _fail(str(err))
        return _run(args, jobs, declared, executor)


def _run(args, jobs: int, declared, executor) -> int:
    from sim.llm.warmstart import WarmStartRejected

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
    except WarmStartRejected as err:  # no attempt brought the warm start into its accuracy range
        print(f"python -m paper_figs: error: {err}; the figures finished so far are in {args.out} and every finished "
              "run is cached; warm starts land differently on different CPUs (RESULTS.md, 'The LLM testbed')",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
