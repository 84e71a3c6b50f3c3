"""The trainer's command line: ``python -m sim.llm --method gac --staleness 8`` (``--help``: every option).

tyro over ``sim.llm.args.Args``; every failure is one line on stderr with a non-zero exit status: 2 bad input or
a refused folder/resume, 3 a non-finite loss, 4 a write that failed (disk full, permissions), 130 Ctrl-C.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import gac

try:
    from sim.llm.checkpoint import out_dir_lock, prepare_out_dir
    from sim.llm.train import Args, NonFiniteError, run_records
except ModuleNotFoundError as missing_module:  # the checkpoints need safetensors, from the research extra
    if __name__ != "__main__" or missing_module.name not in ("safetensors", "tqdm", "tyro"):
        raise
    print(f"error: python -m sim.llm needs the research extra ({missing_module.name} not installed): "
          "pip install -e '.[research]' (or pip install 'gac-lab[research]')", file=sys.stderr)
    sys.exit(2)
from sim.cli import Refused, checked_registry
from sim.record import atomic_write_bytes, check_output_dir, write_records
from sim.schema import columns
from sim.stabilizers import BAPOConfig, BrakingConfig, KLTargetConfig, M2POConfig, TISConfig, VCPOConfig

DESCRIPTION = "GRPO on a small Qwen3 model with stale rollouts (sim/llm/train.py)."


METHOD_CONFIGS = (gac.GACConfig, TISConfig, M2POConfig, BAPOConfig, BrakingConfig, KLTargetConfig, VCPOConfig)
"""The method groups' config dataclasses: each checks its own values when it is built."""


def _cli_registry():
    """tyro rules for the method groups.

    GAC's τ (``float | ThresholdRule``) is given as a float. A method config's ValueError (e.g. --gac.threshold
    1.5) is re-raised as ``sim.cli.Refused``, so ``main`` prints it on one line instead of tyro's error box.
    """
    import tyro

    registry = tyro.constructors.ConstructorRegistry()

    @registry.primitive_rule
    def _threshold(type_info):
        if type_info.type != (float | gac.ThresholdRule):
            return None
        return tyro.constructors.PrimitiveConstructorSpec(
            nargs=1, metavar="FLOAT", instance_from_str=lambda strings: float(strings[0]),
            is_instance=lambda value: isinstance(value, float), str_from_instance=lambda value: [str(value)])

    return checked_registry(METHOD_CONFIGS, registry)


METHOD_GROUPS = {"gac": ("--gac.", "--gac-space", "--gac_space"),
                 "tis": ("--tis.",), "m2po": ("--m2po.",), "bapo": ("--bapo.",), "braking": ("--braking.",),
                 "kl_target": ("--kl-target.", "--kl_target."), "vcpo": ("--vcpo.",)}
"""The flags that set one method's parameters: given with a --method without that part they would be ignored, so
refused."""


def check_method_flags(argv: list[str], args: Args) -> None:
    """One-line ValueError for a method's parameter flag (e.g. --gac.threshold) given with another --method.

    Read from the command line, not from the parsed fields: a flag given at its default value (``--bapo.rho-0 0.5``
    with sync) is refused too, and a parsed ``Args`` cannot tell it from a flag not given."""
    for method, prefixes in METHOD_GROUPS.items():
        given = [a.split("=")[0] for a in argv if a.startswith(prefixes)]
        if given and method not in args.axes.parts:
            raise ValueError(f"{given[0]} sets a parameter of method {method}, but --method is {args.method}: "
                             f"drop it or add {method} to --method")


RESEARCH_MODULES = ("tyro", "tqdm", "safetensors")
"""What the command line and the trainer import from the ``research`` extra (not a dependency of the library)."""


def missing_research_extra() -> str | None:
    """The one-line error when a module of the ``research`` extra is missing, else None."""
    import importlib

    missing = []
    for name in RESEARCH_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            missing.append(name)
    if not missing:
        return None
    return (f"python -m sim.llm needs the research extra ({', '.join(missing)} not installed): "
            "pip install -e '.[research]' (or pip install 'gac-lab[research]')")


def main(argv: list[str] | None = None) -> int:
    missing = missing_research_extra()
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    import tyro

    argv = sys.argv[1:] if argv is None else list(argv)
    out_dir, result = None, None
    try:
        args = tyro.cli(Args, args=argv, prog="python -m sim.llm", description=DESCRIPTION, registry=_cli_registry())
        check_method_flags(argv, args)
        args.validate()
        args.check_command_line()
        out_dir = check_output_dir(args.out_dir, "--out-dir")
        with out_dir_lock(out_dir):
            prepare_out_dir(args)
            result = run_records(args, records_path=out_dir / "records.csv")  # streamed: a killed run keeps them
            write_records(result["records"], out_dir / "records.csv", columns("llm"))
            atomic_write_bytes(out_dir / "summary.json", json.dumps(result["summary"], indent=1).encode())
    except (ValueError, Refused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except NonFiniteError as err:
        print(f"error: {err} (nothing written to the checkpoint)", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"error: interrupted; {interrupted_hint(out_dir)}", file=sys.stderr)
        return 130
    except OSError as err:  # disk full, a folder made read-only during the run, ...
        reason = err.strerror or (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"error: {err.filename or out_dir}: {reason}; {os_error_hint(err, out_dir)}", file=sys.stderr)
        return 4
    done = result["summary"]
    failed = " (non-finite)" if done["nonfinite_at"] is not None else " (collapsed)" if done["collapsed"] else ""
    print(f"[train] {args.run_method} s={args.staleness}: held-out accuracy {done['start_accuracy']:.3f} -> "
          f"{done['final_accuracy']:.3f}{failed} on {done['eval_problems']} problems -> {out_dir}/records.csv")
    return 0


def os_error_hint(err: OSError, out_dir: Path | None) -> str:
    """The next step after a failed read or write: free space or fix permissions, then rerun (or resume)."""
    has_checkpoint = out_dir is not None and (Path(out_dir) / "checkpoint.pt").exists()
    rerun = "rerun with --resume to continue from its checkpoint" if has_checkpoint else "rerun with --overwrite"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"free disk space, then {rerun}"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make the folder writable (or choose another --out-dir), then {rerun}"
    return f"fix that, then {rerun}"


def interrupted_hint(out_dir: Path | None) -> str:
    """What a Ctrl-C left behind and how to go on (records.csv holds the records of the steps made so far)."""
    if out_dir is None:
        return "nothing was written"
    kept = f"{Path(out_dir) / 'records.csv'} holds the steps made so far"
    if (Path(out_dir) / "checkpoint.pt").exists():
        return f"{kept}; rerun with --resume to continue from {Path(out_dir) / 'checkpoint.pt'}"
    return f"{kept}; rerun with --overwrite to start over (with --checkpoint-every N to be able to --resume)"


if __name__ == "__main__":
    sys.exit(main())
