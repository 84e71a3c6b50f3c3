"""The trainer's checkpoints: ``torch.save`` files of tensors and plain values, read with ``weights_only=True`` (a
received one cannot run code), their SHA-256 beside them (a damaged one is refused), refused for ``--resume`` when
the code or the args changed; and the out-dir lock."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from runtime.files import atomic_write_bytes, current_umask, exclusive_lock
from runtime.fingerprint import changed_files, code_fingerprint, source_hashes

CODE = ("gac", "sim")
"""The source a trainer run executes: its checkpoints and summary record this code's fingerprint."""
OUTPUT_ONLY = ("progress", "resume", "out_dir", "checkpoint_every", "steps", "overwrite", "allow_code_change")
"""Args fields that cannot change a run's numbers (``steps`` only upwards); not ``threads``: long sums' last bits
depend on it."""
RUN_FILES = ("records.csv", "summary.json", "checkpoint.pt", "checkpoint.pt.sha256")

if TYPE_CHECKING:
    from sim.llm.train import Args, Run


def checkpoint_payload(run: Run) -> dict:
    """Everything a resume needs (the optimizer's state holds GAC's reference too), and the code and args."""
    return {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(), "ring": run.ring.state_dict(),
            "generator": run.generator.get_state(), "records": run.records, "previous": dict(run.previous),
            "nonfinite_at": run.nonfinite_at, "step": run.step, "args": asdict(run.args),
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
    """``torch.save(payload)`` to a temp file renamed onto ``path``. The sidecar lists the new and the old SHA-256
    during the rename, so a kill at any point leaves a checkpoint that matches it."""
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
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # holds an object that is not plain data (it could run code), or another format
        raise ValueError(f"checkpoint {path} cannot be loaded safely ({type(err).__name__}: it holds more than "
                         "tensors and plain values, or comes from another version); delete it to start over") from None


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
    records = out_dir / "records.csv"
    written = max(0, len(records.read_text().splitlines()) - 1) if records.exists() else 0
    if args.steps < max(checkpoint["step"], written):
        raise ValueError(f"--steps {args.steps} would shrink the outputs: the checkpoint is at step "
                         f"{checkpoint['step']} and records.csv has {written} records")
    return checkpoint


def restore(run: Run, checkpoint: dict) -> None:
    """Put a checkpoint's state into ``run`` (same numbers as an uninterrupted run from here on)."""
    try:
        run.model.load_state_dict(checkpoint["model"])
    except RuntimeError:
        raise ValueError("--resume: the checkpoint holds another model") from None
    run.optimizer.load_state_dict(checkpoint["optimizer"])
    run.ring.load_state_dict(checkpoint["ring"])
    run.generator.set_state(checkpoint["generator"].cpu())  # map_location moved it; generators live on the CPU
    run.records, run.nonfinite_at, run.step = checkpoint["records"], checkpoint["nonfinite_at"], checkpoint["step"]
    run.previous = dict(checkpoint["previous"])


def prepare_out_dir(args: Args) -> None:
    """Refuse a fresh run into a folder holding another run, or with ``--overwrite`` remove it (hold the lock)."""
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
