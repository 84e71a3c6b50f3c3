"""The per-step record every simulator writes (DESIGN.md, "Per-step record"), and its writers.

One row per (run, step): the fixed columns below, then the run's own extras (lr, diverged, kl,
entropy, ...). Writers are atomic (temp file, then rename) and need nothing beyond the stdlib, so
the LLM run can use them as well.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

COLUMNS = ("sim", "step", "seed", "method", "staleness", "objective", "grad_norm", "cos_prev", "cos_applied",
           "regime", "parallel_scale")
"""The fixed columns, in order. cos_prev = cos(raw g_t, raw g_{t−1}); cos_applied = cos of the applied
update with the previous applied update; regime = "keep" | "project" | "cap" | "skip" for GAC runs and
"n/a" for methods without a GAC decision; a diverged run carries ``diverged=True`` from its first bad step."""

NO_REGIME = "n/a"


def make_row(sim: str, step: int, seed: int, method: str, staleness: int, objective: float, grad_norm: float,
             cos_prev: float, cos_applied: float, regime: str = NO_REGIME, parallel_scale: float = 1.0,
             **extras) -> dict:
    """One record row with the fixed columns first, then ``extras`` (e.g. lr=, diverged=, kl=)."""
    row = {"sim": sim, "step": int(step), "seed": int(seed), "method": method, "staleness": int(staleness),
           "objective": float(objective), "grad_norm": float(grad_norm), "cos_prev": float(cos_prev),
           "cos_applied": float(cos_applied), "regime": regime, "parallel_scale": float(parallel_scale)}
    row.update(extras)
    return row


def columns_of(rows: Sequence[dict]) -> list[str]:
    """COLUMNS first, then every extra key in first-seen order."""
    extra = dict.fromkeys(k for row in rows for k in row if k not in COLUMNS)
    return [*COLUMNS, *extra]


def atomic_write_bytes(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temp file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_records(rows: Sequence[dict], path: Path | str, columns: Iterable[str] | None = None) -> Path:
    """Write record rows as CSV (``.csv``) or JSON lines (``.jsonl``), atomically."""
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


def read_records(path: Path | str) -> list[dict]:
    """Read a CSV or JSONL record file back (CSV values come back as strings)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line]
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


RUN_KEYS = ("sim", "method", "label", "staleness", "seed")
"""Columns that name a run (its TensorBoard sub-folder); the numeric others become scalars."""


def write_tensorboard(rows: Sequence[dict], log_dir: Path | str) -> list[Path]:
    """Write record rows as TensorBoard scalars, one sub-folder per run, tags = the record's column names.

    Needs the optional ``tensorboard`` package (``pip install 'gac-lab[tensorboard]'``). Booleans
    (e.g. ``diverged``) are written as 0/1; strings (``regime``) are skipped.
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise ImportError("write_tensorboard needs the tensorboard package: "
                          "pip install 'gac-lab[tensorboard]'") from error
    runs: dict[tuple, list[dict]] = {}
    for row in rows:
        runs.setdefault(tuple((k, row[k]) for k in RUN_KEYS if k in row), []).append(row)
    folders = []
    for key, run_rows in runs.items():
        folder = Path(log_dir) / "_".join(f"{k}={v}" for k, v in key)
        with SummaryWriter(log_dir=str(folder)) as writer:
            for row in run_rows:
                for name, value in row.items():
                    if name in RUN_KEYS or name == "step" or isinstance(value, str) or value is None:
                        continue
                    writer.add_scalar(name, float(value), global_step=int(row["step"]))
        folders.append(folder)
    return folders


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


__all__ = ["COLUMNS", "NO_REGIME", "make_row", "columns_of", "atomic_write_bytes", "write_records", "read_records",
           "write_tensorboard", "RUN_KEYS"]
