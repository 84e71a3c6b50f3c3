"""Checkpoints of the GRPO trainer: save, load, the checks before ``--resume``, and the out-dir lock.

A checkpoint is a plain ``torch.save`` file (``torch.load`` reads it), written to a temp file and renamed into
place; its SHA-256 sits in a sidecar ``checkpoint.pt.sha256``, so a truncated or damaged file is refused in one
line. It records the source hashes of the code that wrote it, and a resume with other code is refused.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import asdict, fields
from pathlib import Path

import torch

from gac.state import GACState
from sim.fingerprint import changed_files, code_fingerprint, source_hashes
from sim.llm.args import Args
from sim.llm.rows import AdamWRows
from sim.llm.state import BatchState, PrevRows
from sim.record import atomic_write_bytes, current_umask, exclusive_lock

CODE = ("gac", "sim")
"""The source a trainer run executes: its checkpoints and summary record this code's fingerprint."""
OUTPUT_ONLY = ("progress", "resume", "out_dir", "checkpoint_every", "steps", "overwrite", "allow_code_change")
"""Args fields that cannot change a run's numbers: they may differ between a checkpoint and ``--resume``
(``steps`` only upwards, checked on its own). ``threads`` is not one: torch splits long sums (the cosines,
GAC's dot products) across threads, so their last bits, and GAC's trajectory, depend on it."""
RUN_FILES = ("records.csv", "summary.json", "checkpoint.pt", "checkpoint.pt.sha256")


def checkpoint_payload(state: BatchState) -> dict:
    """Everything a resume needs: θ, AdamW's and GAC's state, each run's ring, generator and records, the probes'
    previous vectors, and the code and args that wrote it."""
    gac_state = None if state.gac_state is None else tuple(state.gac_state)  # plain tuple: weights_only reads it
    return {"theta": state.theta.detach(), "adam": state.adam.state_dict(), "gac": gac_state,
            "space_gac": None if state.space_state is None else tuple(state.space_state),
            "step_grad_reference": state.step_grad_reference,
            "prev": {name: rows.state_dict() for name, rows in state.prev.items()},
            "runs": [{"ring": run.ring.state_dict(), "generator": run.generator.get_state(), "records": run.records,
                      "diverged_at": run.diverged_at} for run in state.runs],
            "step": state.step, "args": asdict(state.args),
            "code": source_hashes(CODE), "code_fingerprint": code_fingerprint(CODE)}


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_checkpoint(path: Path, payload: dict) -> None:
    """``torch.save(payload)`` to a temp file, renamed onto ``path``; its SHA-256 in the sidecar.

    The sidecar is written first and lists the new hash and the one it replaces, so a kill between the two
    renames leaves a checkpoint that still matches (the old one); the old hash is dropped afterwards.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        new = _sha256(Path(tmp))
        old = _sha256(path) if path.exists() else ""
        atomic_write_bytes(sidecar(path), f"{new}\n{old}\n".encode())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    atomic_write_bytes(sidecar(path), f"{new}\n".encode())


def load_checkpoint(path: Path, device: str = "cpu") -> dict:
    """The payload of a checkpoint; one-line ValueError if it is missing, truncated, corrupt or unreadable."""
    path = Path(path)
    try:
        expected = sidecar(path).read_text().split()
        actual = _sha256(path)
    except OSError as err:
        raise ValueError(f"checkpoint {err.filename} cannot be read ({err.strerror}); delete {path} and its "
                         f"{sidecar(path).name} to start over, or give another --out-dir") from None
    if actual not in expected:
        raise ValueError(f"checkpoint {path} is corrupt or truncated (its SHA-256 is not the one in "
                         f"{sidecar(path).name}); delete both to start over, or give another --out-dir")
    try:
        return torch.load(path, map_location=device, weights_only=False)
    except Exception as err:  # a file that passed the checksum but cannot be unpickled (other torch version)
        raise ValueError(f"checkpoint {path} cannot be loaded ({type(err).__name__}); delete it to start over"
                         ) from None


def checked_resume(args: Args) -> dict:
    """The checkpoint to resume from, after refusing other code, args that differ from its run's, or shrinking."""
    out_dir = Path(args.out_dir)
    checkpoint = load_checkpoint(out_dir / "checkpoint.pt", args.device)
    changed = changed_files(checkpoint.get("code", {}), source_hashes(CODE))
    if changed and not args.allow_code_change:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise ValueError(f"--resume: the code changed since {out_dir / 'checkpoint.pt'} was written ({shown}); "
                         "the resumed run would not continue the same numbers. Pass --allow-code-change to resume "
                         "anyway, or start over with --overwrite")
    saved, current = checkpoint["args"], asdict(args)
    differing = [f.name for f in fields(args) if f.name not in OUTPUT_ONLY and saved.get(f.name) != current[f.name]]
    if differing:
        raise ValueError("--resume with args that differ from the checkpoint's run: " + ", ".join(
            f"{name} (checkpoint {saved.get(name)!r}, now {current[name]!r})" for name in differing))
    written = existing_record_count(out_dir / "records.csv")
    if args.steps < max(checkpoint["step"], written):
        raise ValueError(f"--steps {args.steps} would shrink the outputs: the checkpoint is at step "
                         f"{checkpoint['step']} and records.csv has {written} records")
    return checkpoint


def existing_record_count(path: Path) -> int:
    """Rows in an existing records.csv (0 if there is none)."""
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def restore(state: BatchState, checkpoint: dict) -> None:
    """Put a checkpoint's state into ``state`` (same numbers as an uninterrupted run from here on)."""
    if len(checkpoint["runs"]) != len(state.runs) or checkpoint["theta"].shape != state.theta.shape:
        raise ValueError("--resume: the checkpoint holds another model or number of runs")
    with torch.no_grad():
        state.theta.copy_(checkpoint["theta"])
    state.adam = AdamWRows.from_state_dict(checkpoint["adam"])
    saved_gac = checkpoint["gac"]  # a plain tuple, so that torch.load's weights_only default reads the file
    state.gac_state = None if saved_gac is None else GACState(*saved_gac)
    saved_space = checkpoint["space_gac"]
    state.space_state = None if saved_space is None else GACState(*saved_space)
    state.step_grad_reference = checkpoint["step_grad_reference"]
    state.prev = {name: PrevRows.from_state_dict(rows) for name, rows in checkpoint["prev"].items()}
    for run, saved in zip(state.runs, checkpoint["runs"], strict=True):
        run.ring.load_state_dict(saved["ring"])
        run.generator.set_state(saved["generator"].cpu())  # map_location moved it; generators live on the CPU
        run.records, run.diverged_at = saved["records"], saved["diverged_at"]
    state.step = checkpoint["step"]


def prepare_out_dir(args: Args) -> None:
    """Refuse a fresh run into a folder that holds another run's outputs, unless ``--resume`` or ``--overwrite``;
    with ``--overwrite`` remove them first, so the folder never mixes two runs. Call while holding the lock."""
    if args.resume:
        return
    out_dir = Path(args.out_dir)
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    if found and not args.overwrite:
        raise ValueError(f"--out-dir {out_dir} already holds a run ({', '.join(found)}); pass --resume to continue "
                         "it, --overwrite to replace it, or choose another --out-dir")
    for name in found:
        (out_dir / name).unlink()


def out_dir_lock(out_dir: Path | str):
    """The out dir's lock (``out_dir/.lock``): one run per folder; the same process may enter again."""
    return exclusive_lock(Path(out_dir) / ".lock", f"--out-dir {out_dir}")


def trainer_fingerprint() -> str:
    """The fingerprint of the code a trainer run executes (recorded in summary.json)."""
    return code_fingerprint(CODE)

