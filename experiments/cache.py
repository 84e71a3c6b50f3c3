"""Run cache: results keyed by a hash of their configuration, so a re-run with nothing changed is fast.

``cached(kind, config, compute)`` returns ``compute()``'s JSON-able result, stored under
``experiments/.cache/KIND-HASH.json`` (atomically; ``GAC_LAB_CACHE`` moves it). ``cached_runs`` adds the
profile, the device and a fingerprint of the package's source (gac/, sim/, theory/, experiments/,
paper_figs/) to the config, so editing any code that could change a number recomputes. ``GAC_LAB_FORCE=1``
always recomputes; ``GAC_LAB_FORCE_BEFORE=T`` (what ``paper_figs --force`` sets, T = its start in seconds since
the epoch) treats every entry written before T as missing, so each result is recomputed once per command, not
once per figure that reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gac
from sim import fingerprint
from sim.record import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = Path(os.environ.get("GAC_LAB_CACHE", ROOT / "experiments" / ".cache"))
SOURCE_DIRS = ("gac", "sim", "theory", "experiments", "paper_figs")


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-able config (keys sorted; package version included)."""
    payload = json.dumps({"config": config, "version": gac.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def code_fingerprint(folders: tuple[str, ...] = SOURCE_DIRS, root: Path = ROOT) -> str:
    """Hash of every .py file under ``folders`` of ``root`` (path and content); read once per process."""
    return fingerprint.code_fingerprint(tuple(folders), root)


def cache_path(kind: str, config: dict) -> Path:
    """Where the result of (kind, config) is stored."""
    return CACHE_DIR / f"{kind.replace('/', '__')}-{config_hash(config)}.json"


_warned: set[Path] = set()
_MISSING = object()


def _read(path: Path) -> Any:
    """The stored result at ``path``; _MISSING when absent or unreadable (a corrupt entry warns once, with its path)."""
    if not path.exists() or path.stat().st_mtime < float(os.environ.get("GAC_LAB_FORCE_BEFORE", "-inf")):
        return _MISSING
    try:
        result = json.loads(path.read_text())["result"]
        if result is None:  # no computation returns None: an entry written by a failed or foreign writer
            raise ValueError("its result is null")
        return result
    except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if path not in _warned:
            _warned.add(path)
            warnings.warn(f"corrupt cache entry {path} ({type(error).__name__}: {error}); recomputing it",
                          RuntimeWarning, stacklevel=3)
        return _MISSING


def lookup(kind: str, config: dict) -> Any | None:
    """The stored result of (kind, config), or None when it has not been computed or is corrupt (never computes)."""
    stored = _read(cache_path(kind, config))
    return None if stored is _MISSING else stored


def cached(kind: str, config: dict, compute: Callable[[], Any], force: bool = False) -> Any:
    """``compute()`` once per (kind, config); later calls read the stored JSON result.

    The result always goes through JSON, so a fresh and a cached call return the same types. A corrupt
    entry (truncated JSON, missing key) counts as missing: it is recomputed and rewritten atomically.
    """
    path = cache_path(kind, config)
    force = force or os.environ.get("GAC_LAB_FORCE") == "1"
    stored = _MISSING if force else _read(path)
    if stored is not _MISSING:
        return stored
    text = json.dumps({"kind": kind, "config": config, "result": compute()})
    atomic_write_bytes(path, text.encode())
    return json.loads(text)["result"]


def cached_runs(kind: str, profile: str, device: str, compute: Callable[[], Any], **config) -> Any:
    """``cached`` with the profile, the device and the source fingerprint in the key."""
    key = {"profile": profile, "device": device, "code": code_fingerprint(), **config}
    return cached(kind, key, compute)
