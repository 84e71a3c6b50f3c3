"""The trainer's command line: ``python -m sim.llm --method gac --staleness 8`` (``--help``: every option).

Every failure is one line on stderr: exit 2 bad input or a refused folder/resume, 3 a non-finite loss, 4 a failed
write (disk full, permissions), 130 Ctrl-C.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import gac
from runtime.cli import Refused, as_float, checked_registry
from runtime.files import atomic_write_bytes, check_output_dir, claim_out_dir, failed_write, out_dir_lock
from sim.llm.args import Args
from sim.stabilizers import BAPOConfig, BrakingConfig, KLTargetConfig, M2POConfig, TISConfig, VCPOConfig

METHOD_GROUPS = {"gac": ("--gac.", "--gac-space", "--gac_space"),
                 "tis": ("--tis.",), "m2po": ("--m2po.",), "bapo": ("--bapo.",), "braking": ("--braking.",),
                 "kl_target": ("--kl-target.", "--kl_target."), "vcpo": ("--vcpo.",)}
"""Flags of one method's parameters: refused with a --method without that part (read from argv: a default too)."""
CONFIGS = (gac.GACConfig, TISConfig, M2POConfig, BAPOConfig, BrakingConfig, KLTargetConfig, VCPOConfig)
"""The method configs: a ValueError of their checks is one line (``runtime.cli.checked_registry``), not tyro's box."""


def rerun(out_dir: Path | None) -> str:
    """How to go on after a stopped run: from its checkpoint if it has one, else from the start."""
    if out_dir is not None and (out_dir / "checkpoint.pt").exists():
        return f"rerun with --resume to continue from {out_dir / 'checkpoint.pt'}"
    return "rerun with --overwrite to start over (with --checkpoint-every N to be able to --resume)"


def main(argv: list[str] | None = None) -> int:
    missing = [name for name in ("tyro", "tqdm", "safetensors") if importlib.util.find_spec(name) is None]
    if missing:  # the research extra, not a dependency of the library
        print(f"error: python -m sim.llm needs the research extra ({', '.join(missing)} not installed): "
              "pip install -e '.[research]' (or pip install 'gac-lab[research]')", file=sys.stderr)
        return 2
    import tyro

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        registry = checked_registry(CONFIGS, as_float(float | gac.ThresholdRule))  # GAC's τ given as a float
        args = tyro.cli(Args, args=argv, prog="python -m sim.llm", registry=registry,
                        description="GRPO on a small Qwen3 model with stale rollouts (sim/llm/train.py).")
    except (ValueError, Refused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from sim.llm import train  # torch: parsed first, so --help needs none

    out_dir, result = None, None
    try:
        for method, prefixes in METHOD_GROUPS.items():
            given = [a.split("=")[0] for a in argv if a.startswith(prefixes)]
            if given and method not in args.axes.parts:
                raise ValueError(f"{given[0]} sets a parameter of method {method}, but --method is {args.method}: "
                                 f"drop it or add {method} to --method")
        args.validate()
        if args.staleness >= args.steps:  # the sweeps' smoke runs may be that short; here it is a mistake
            raise ValueError(f"--staleness {args.staleness} >= --steps {args.steps}: no step would use fresh data; "
                             "raise --steps or lower --staleness")
        out_dir = check_output_dir(args.out_dir, "--out-dir")
        with out_dir_lock(out_dir):
            claim_out_dir(out_dir, train.RUN_FILES, args.resume, args.overwrite)
            result = train.run_records(args, records_path=out_dir / "records.csv")  # streamed: a killed run keeps them
            atomic_write_bytes(out_dir / "summary.json", json.dumps(result["summary"], indent=1).encode())
    except (ValueError, Refused) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except train.NonFiniteError as err:
        print(f"error: {err} (nothing written to the checkpoint)", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("error: interrupted; " + ("nothing was written" if out_dir is None else
                                        f"{out_dir / 'records.csv'} holds the steps made so far; {rerun(out_dir)}"),
              file=sys.stderr)
        return 130
    except OSError as err:  # disk full, a folder made read-only during the run, ...
        print(f"error: {failed_write(err, out_dir)}, then {rerun(out_dir)}", file=sys.stderr)
        return 4
    done = result["summary"]
    failed = " (non-finite)" if done["nonfinite_at"] is not None else " (collapsed)" if done["collapsed"] else ""
    print(f"[train] {args.run_method} s={args.staleness}: held-out accuracy {done['start_accuracy']:.3f} -> "
          f"{done['final_accuracy']:.3f}{failed} on {done['eval_problems']} problems -> {out_dir}/records.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
