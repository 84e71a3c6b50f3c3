"""Run cache: results keyed by a hash of their configuration, so figures that share runs compute them once.

``cached(kind, config, compute)`` returns ``compute()``'s JSON-able result, stored under
``paper_figs/.cache/KIND-HASH.json`` (atomically). A changed config gives a new hash; ``force``
(or ``GAC_LAB_FORCE=1``) recomputes. The hash also covers the package version.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gac
from paper_figs.common import _atomic_write_bytes

CACHE_DIR = Path(os.environ.get("GAC_LAB_CACHE", Path(__file__).resolve().parent / ".cache"))


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-able config (keys sorted; package version included)."""
    payload = json.dumps({"config": config, "version": gac.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def cached(kind: str, config: dict, compute: Callable[[], Any], force: bool = False) -> Any:
    """``compute()`` once per (kind, config); later calls read the stored JSON result."""
    path = CACHE_DIR / f"{kind}-{config_hash(config)}.json"
    force = force or os.environ.get("GAC_LAB_FORCE") == "1"
    if path.exists() and not force:
        return json.loads(path.read_text())["result"]
    result = compute()
    _atomic_write_bytes(path, json.dumps({"kind": kind, "config": config, "result": result}).encode())
    return result
