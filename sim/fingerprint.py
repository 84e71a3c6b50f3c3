"""Fingerprints of the package's source: which code computed a result (run cache, checkpoints, warm starts).

``code_fingerprint(entries)`` hashes every .py file under the given folders or files (path and content);
``source_hashes`` keeps one hash per file, so a refusal can say which files changed.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_files(entries: tuple[str, ...], root: Path = ROOT) -> list[Path]:
    """The .py files of ``entries`` (folders searched recursively, or single files), in a stable order."""
    files = []
    for entry in entries:
        path = root / entry
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


@functools.lru_cache(maxsize=16)
def code_fingerprint(entries: tuple[str, ...], root: Path = ROOT) -> str:
    """Hash of every .py file of ``entries`` (path and content); read once per process."""
    digest = hashlib.sha256()
    for path in source_files(entries, root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def source_hashes(entries: tuple[str, ...], root: Path = ROOT) -> dict[str, str]:
    """{path relative to ``root``: SHA-256 of its content (16 hex digits)} for every .py file of ``entries``."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            for path in source_files(entries, root)}


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files added, removed or edited between two ``source_hashes``, sorted."""
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
