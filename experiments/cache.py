"""Run cache: results keyed by a hash of their configuration, so a re-run with nothing changed is fast.

``cached(kind, config, compute)`` returns ``compute()``'s JSON-able result, stored under
``experiments/.cache/KIND-HASH.json`` (atomically; ``GAC_LAB_CACHE`` moves it). ``cached_runs`` adds the
profile, the device and a fingerprint of the package's source (gac/, sim/, theory/, experiments/,
paper_figs/) to the config, so editing any code that could change a number recomputes. ``--force``
(``GAC_LAB_FORCE=1``) always recomputes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gac
from sim.record import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = Path(os.environ.get("GAC_LAB_CACHE", ROOT / "experiments" / ".cache"))
SOURCE_DIRS = ("gac", "sim", "theory", "experiments", "paper_figs")


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-able config (keys sorted; package version included)."""
    payload = json.dumps({"config": config, "version": gac.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of every .py file under the source folders (path and content)."""
    digest = hashlib.sha256()
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_path(kind: str, config: dict) -> Path:
    """Where the result of (kind, config) is stored."""
    return CACHE_DIR / f"{kind.replace('/', '__')}-{config_hash(config)}.json"


def lookup(kind: str, config: dict) -> Any | None:
    """The stored result of (kind, config), or None when it has not been computed (never computes)."""
    path = cache_path(kind, config)
    return json.loads(path.read_text())["result"] if path.exists() else None


def cached(kind: str, config: dict, compute: Callable[[], Any], force: bool = False) -> Any:
    """``compute()`` once per (kind, config); later calls read the stored JSON result.

    The result always goes through JSON, so a fresh and a cached call return the same types.
    """
    path = cache_path(kind, config)
    force = force or os.environ.get("GAC_LAB_FORCE") == "1"
    if path.exists() and not force:
        return json.loads(path.read_text())["result"]
    text = json.dumps({"kind": kind, "config": config, "result": compute()})
    atomic_write_bytes(path, text.encode())
    return json.loads(text)["result"]


def cached_runs(kind: str, profile: str, device: str, compute: Callable[[], Any], **config) -> Any:
    """``cached`` with the profile, the device and the source fingerprint in the key."""
    key = {"profile": profile, "device": device, "code": code_fingerprint(), **config}
    return cached(kind, key, compute)
