"""Checkpoints of a run: ``torch.save`` files of tensors and plain values, read with ``weights_only=True`` (a
received one cannot run code), their SHA-256 in a sidecar beside them (a damaged one is refused), and the check that
a resumed run continues the same numbers (the same code and args as the run that wrote the checkpoint)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from runtime.files import atomic_write_bytes, current_umask, file_sha256
from runtime.fingerprint import changed_files, source_hashes


def sidecar(path: Path) -> Path:
    """The file that holds ``path``'s SHA-256 (``NAME.sha256``)."""
    return path.with_name(path.name + ".sha256")


def save_checkpoint(path: Path | str, payload: dict) -> None:
    """``torch.save(payload)`` to a temp file renamed onto ``path``. The sidecar lists the new and the old SHA-256
    during the rename, so a kill at any point leaves a checkpoint that matches it."""
    import torch

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        new = file_sha256(Path(tmp))
        old = file_sha256(path) if path.exists() else ""
        atomic_write_bytes(sidecar(path), f"{new}\n{old}\n".encode())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    atomic_write_bytes(sidecar(path), f"{new}\n".encode())


def load_checkpoint(path: Path | str, device: str = "cpu", flag: str = "--out-dir") -> dict:
    """The payload of a checkpoint; one-line ValueError if it is missing, truncated, corrupt or unreadable (the
    message offers another ``flag`` as the way out)."""
    import torch

    path = Path(path)
    try:
        expected = sidecar(path).read_text().split()
        actual = file_sha256(path)
    except OSError as err:
        raise ValueError(f"checkpoint {err.filename} cannot be read ({err.strerror}); delete {path} and its "
                         f"{sidecar(path).name} to start over, or give another {flag}") from None
    if actual not in expected:
        raise ValueError(f"checkpoint {path} is corrupt or truncated (its SHA-256 is not the one in "
                         f"{sidecar(path).name}); delete both to start over, or give another {flag}")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # holds an object that is not plain data (it could run code), or another format
        raise ValueError(f"checkpoint {path} cannot be loaded safely ({type(err).__name__}: it holds more than "
                         "tensors and plain values, or comes from another version); delete it to start over") from None


def check_resume(path: Path, saved: dict, args: dict, code: tuple[str, ...], output_only: Iterable[str],
                 allow_code_change: bool = False) -> None:
    """Refuse (one-line ValueError) to resume from the checkpoint ``path`` whose payload ``saved`` holds the
    ``source_hashes`` of ``code`` and the ``args`` of its run, when the code changed since (unless
    ``allow_code_change``) or an arg differs that is not ``output_only`` (one that cannot change the numbers)."""
    changed = changed_files(saved.get("code", {}), source_hashes(code))
    if changed and not allow_code_change:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise ValueError(f"--resume: the code changed since {path} was written ({shown}); the resumed run would "
                         "not continue the same numbers. Pass --allow-code-change to resume anyway, or start over "
                         "with --overwrite")
    differing = [name for name in args if name not in output_only and saved["args"].get(name) != args[name]]
    if differing:
        raise ValueError("--resume with args that differ from the checkpoint's run: " + ", ".join(
            f"{name} (checkpoint {saved['args'].get(name)!r}, now {args[name]!r})" for name in differing))
