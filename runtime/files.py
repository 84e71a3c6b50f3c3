"""File safety: atomic writes, locks, figure sets published together, output checks made before any work (a run's
output folder: its lock, and no fresh run over another), and the readers and writers of record rows (the per-step
rows of ``sim.schema``, or any table of dicts).

CSV and JSON lines. Writers are atomic (temp file, then rename) and CSV/JSONL need nothing beyond the
stdlib, so the LLM run and the figures use the same ones. Whether committed data would be overwritten is asked of git
(``git ls-files``; no library does this); where git or the repository is absent, nothing is tracked.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path


def columns_of(rows: Sequence[dict]) -> list[str]:
    """Every key of ``rows`` in first-seen order (for rows of one simulator: its ``sim.schema.columns``)."""
    return list(dict.fromkeys(key for row in rows for key in row))


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same folder and a rename.

    The file gets the mode a plain ``open`` would give it (0666 minus the umask), not the temp file's 0600.
    A failed write (disk full: a ``write`` error carries no file name) raises an OSError whose ``filename`` is
    ``path``, so every caller can name it in its one-line error.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _naming(err, path) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _naming(err, path) from None
        raise
    return path


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` with ``path`` as its file name (OSError picks the subclass of the errno), unless it names one."""
    return err if err.filename is not None else OSError(err.errno, err.strerror or str(err), str(path))


def one_line_os_error(err: OSError, fallback: Path | str | None = None) -> str:
    """``PATH: reason`` for a failed read or write (disk full, permissions): the path first, one line."""
    reason = err.strerror or (str(err).strip().splitlines() or [type(err).__name__])[0]
    return f"{err.filename or fallback}: {reason}"


def failed_write(err: OSError, fallback: Path | str | None = None, flag: str = "--out-dir") -> str:
    """``one_line_os_error`` and the next step: free disk space, make the folder writable (or choose another
    ``flag``), or, for another error, fix that."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free disk space"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = f"make the folder writable (or choose another {flag})"
    else:
        fix = "fix that"
    return f"{one_line_os_error(err, fallback)}; {fix}"


def check_output_dir(path: Path | str, flag: str) -> Path:
    """``path`` as a Path once it is, or can be created as, a folder this process can write in; else a one-line
    ValueError naming ``flag``. Run before any compute; creates nothing (a probe file is made and removed).

    Writability is probed by creating a file, not read from the mode bits, which root ignores.
    """
    if str(path).strip() == "":
        raise ValueError(f"{flag} is empty; give a folder (use . for the current one)")
    path = Path(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == path else f"is under {existing}, which is a file"
        raise ValueError(f"{flag} {path} {where}, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-probe.")
    except OSError as err:
        raise ValueError(f"{flag} {path} is not writable: no file can be created in {existing} ({err.strerror})"
                         ) from None
    os.close(fd)
    os.unlink(probe)
    return path


_held_locks: dict[Path, int] = {}  # lock files this process holds -> nesting depth (main → train re-enter)


@contextlib.contextmanager
def exclusive_lock(path: Path | str, what: str, wait: bool = False) -> Iterator[Path]:
    """Hold ``path`` (a lock file) exclusively for the block; the file names the holder; removed on release.

    ``fcntl.flock`` takes the lock atomically and the kernel drops it when the holder exits, however it dies, so
    there is no pid to check and no check-then-write race. (Not ``filelock``: its lock file cannot carry the
    holder's pid and command, which the error shows.) ``wait=False``: a held lock raises a one-line ValueError
    naming the holder and ``what`` (e.g. "--out-dir runs/a"); ``wait=True``: block until the holder is done.
    The same process may enter again (nested blocks share one lock).
    """
    path = Path(path).resolve()
    if path in _held_locks:
        _held_locks[path] += 1
        try:
            yield path
        finally:
            _held_locks[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _locked_fd(path, what, wait)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {' '.join([os.path.basename(sys.executable), *sys.argv])}\n".encode(), 0)
        _held_locks[path] = 1
        try:
            yield path
        finally:
            del _held_locks[path]
            path.unlink(missing_ok=True)  # before the unlock: a waiter then finds a removed file and retries
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _locked_fd(path: Path, what: str, wait: bool) -> int:
    """A descriptor of ``path`` holding its flock, after checking that ``path`` still names the locked file (a
    holder removes the file on release, so a descriptor opened before that locks a file nobody else sees)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ValueError(f"{what} is in use by {holder} (lock {path}); wait for it to finish, or, if no such "
                             f"process is running (a network filesystem can keep a dead holder's lock), delete "
                             f"{path}") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


OUT_LOCK = ".lock"
"""The lock file of an output folder (``exclusive_lock``): one writer of a figure set or a run at a time."""


def out_dir_lock(out_dir: Path | str, flag: str = "--out-dir"):
    """The output folder's lock (``out_dir/OUT_LOCK``): one run per folder; the same process may enter again."""
    return exclusive_lock(Path(out_dir) / OUT_LOCK, f"{flag} {out_dir}")


def claim_out_dir(out_dir: Path | str, run_files: Iterable[str], resume: bool, overwrite: bool) -> None:
    """Refuse a fresh run (not ``resume``) into a folder holding another run's ``run_files``, or with ``overwrite``
    remove them; call it holding ``out_dir_lock``."""
    if resume:
        return
    out_dir = Path(out_dir)
    found = [name for name in run_files if (out_dir / name).exists()]
    if found and not overwrite:
        raise ValueError(f"--out-dir {out_dir} already holds a run ({', '.join(found)}); pass --resume to continue "
                         "it, --overwrite to replace it, or choose another --out-dir")
    for name in found:
        (out_dir / name).unlink()


def publish_together(staging: Path | str, out_dir: Path | str, name: str) -> list[Path]:
    """Move every file of ``staging`` into ``out_dir`` as one set, then write ``NAME.complete`` last: each file's
    name and SHA-256.

    Publishers of one folder take turns (its ``OUT_LOCK``, waited for), so two runs never interleave their files.
    The old marker is removed first, so a reader that finds ``NAME.complete`` and checks it (``is_complete``)
    knows that every file it lists is the one that finished run wrote; a kill in between leaves no marker rather
    than a mixed set, and a reader that raced a later publish sees a checksum that does not match.
    """
    staging, out_dir = Path(staging), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    marker = out_dir / f"{name}.complete"
    files = sorted(p for p in staging.iterdir() if p.is_file())
    listing = "".join(f"{p.name} {file_sha256(p)}\n" for p in files)
    with exclusive_lock(out_dir / OUT_LOCK, f"the output folder {out_dir}", wait=True):
        marker.unlink(missing_ok=True)
        for path in files:
            os.replace(path, out_dir / path.name)
        atomic_write_bytes(marker, listing.encode())
    return [out_dir / p.name for p in files]


def is_complete(out_dir: Path | str, name: str) -> bool:
    """Whether ``out_dir`` holds a finished set of ``name``'s files: its marker, and every file the marker lists
    with the SHA-256 it lists (a marker without checksums, from before they were written, is not a finished set)."""
    marker = Path(out_dir) / f"{name}.complete"
    try:
        lines = [line.split() for line in marker.read_text().splitlines() if line.strip()]
        return all(len(line) == 2 and file_sha256(Path(out_dir) / line[0]) == line[1] for line in lines)
    except OSError:  # no marker, or a listed file gone
        return False


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def current_umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


def write_records(rows: Sequence[dict], path: Path | str, columns: Iterable[str] | None = None) -> Path:
    """Write rows as CSV (``.csv``) or JSON lines (``.jsonl``), atomically.

    CSV columns default to every key in first-seen order; a key not in ``columns`` raises ValueError.
    """
    path = Path(path)
    if path.suffix == ".jsonl":
        text = "".join(json.dumps({k: _json_safe(v) for k, v in row.items()}) + "\n" for row in rows)
        return atomic_write_bytes(path, text.encode())
    columns = list(columns) if columns is not None else columns_of(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_bytes(path, buffer.getvalue().encode())


class RecordStream:
    """A records CSV that grows one row at a time, flushed after each, so a killed run keeps the steps it made.

    The file is made (header, then the ``earlier`` rows: a resumed run's) atomically on the first ``append``, not
    before: whoever clears the folder first (``--overwrite``) has done so by then. Its bytes equal
    ``write_records(every row, path, columns)``'s.
    """

    def __init__(self, path: Path | str, columns: Iterable[str], earlier: Sequence[dict] = ()):
        self.path, self.columns, self.earlier = Path(path), list(columns), list(earlier)
        self.handle, self.writer = None, None

    def append(self, row: dict) -> None:
        if self.handle is None:
            write_records(self.earlier, self.path, self.columns)
            self.handle = self.path.open("a", newline="")
            self.writer = csv.DictWriter(self.handle, fieldnames=self.columns, lineterminator="\n",
                                         extrasaction="raise")
        try:
            self.writer.writerow(row)
            self.handle.flush()
        except OSError as err:
            raise _naming(err, self.path) from None

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()

    def __enter__(self) -> RecordStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_records(path: Path | str) -> list[dict]:
    """Read a CSV or JSONL record file back with typed columns: a column whose every value is True/False is bool,
    one of whole numbers int, one of numbers (nan and inf included) float, any other str; an empty CSV cell of a
    number column is None. JSONL's non-finite floats (written as "nan", "inf") come back as floats."""
    path = Path(path)
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line]
        for name in columns_of(rows):
            values = [row[name] for row in rows if name in row]
            if any(v in _NON_FINITE for v in values if isinstance(v, str)) and all(
                    v in _NON_FINITE or isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                for row in rows:
                    if isinstance(row.get(name), str):
                        row[name] = float(row[name])
        return rows
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for name in columns_of(rows):
        convert = _column_type([row[name] for row in rows if row.get(name) not in (None, "")])
        if convert is not str:
            for row in rows:
                row[name] = None if row[name] in (None, "") else convert(row[name])
    return rows


_NON_FINITE = ("nan", "inf", "-inf")


def _column_type(values: Sequence[str]):
    """The type of a CSV column from its non-empty values: bool, int, float or str (an empty column stays str)."""
    if not values:
        return str
    if all(v in ("True", "False") for v in values):
        return lambda v: v == "True"
    for kind in (int, float):
        try:
            for v in values:
                kind(v)
        except ValueError:
            continue
        return kind
    return str


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def git_tracked(path: Path) -> bool:
    """Whether ``path`` is a file that the git repository around it tracks."""
    path = Path(path).resolve()
    if not path.parent.is_dir():
        return False
    try:
        found = subprocess.run(["git", "ls-files", "--error-unmatch", "--", path.name], cwd=path.parent,
                               capture_output=True, text=True)
    except OSError:  # no git
        return False
    return found.returncode == 0


def check_output_files(out: Path, written: Iterable[Path], profile: str, force: bool, flag: str = "--out") -> Path:
    """``out`` once it is a .csv whose folder this process can write in, and none of the ``written`` files
    (``out`` and the files beside it) is tracked by git unless the profile is ``full`` or ``force``; else a one-line
    ValueError naming the path and the way out."""
    out = Path(out)
    if out.suffix != ".csv":
        raise ValueError(f"{flag} must name a .csv file, got {out}")
    if out.is_dir():
        raise ValueError(f"{flag} {out} is a folder; give a .csv file")
    check_output_dir(out.parent, f"{flag} {out}: its folder")
    if profile != "full" and not force:
        tracked = [str(path) for path in written if git_tracked(path)]
        if tracked:
            raise ValueError(f"{flag} {tracked[0]} is committed data (tracked by git) and --profile {profile} would "
                             f"overwrite it with a smaller run; give another {flag}, or --force to overwrite it")
    return out
