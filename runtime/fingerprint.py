"""Fingerprints of the package's source: which code computed a result (run cache, checkpoints, warm starts).

``code_fingerprint(entries)`` hashes every .py file under the given folders or files (path and code);
``source_hashes`` keeps one hash per file, so a refusal can say which files changed.

What is hashed is a file's code, not its text: the syntax tree with docstrings dropped (``code_text``), so an edit
to a comment, a docstring or the layout keeps every cached run, warm start and checkpoint, and an edit that can
change a result (any statement, name or constant) makes new ones. The tree's printed form follows the Python
version (``ast.dump``), so another Python minor version computes afresh. A file that does not parse is hashed as
its bytes.
"""

from __future__ import annotations

import ast
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


def code_text(source: bytes) -> bytes:
    """What a file's hash covers: its syntax tree without docstrings (any bare string statement) and without
    positions; ``source`` itself when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):  # a bare string statement (docstrings, attribute docstrings) computes nothing
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts:
                kept = [s for s in stmts if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                 and isinstance(s.value.value, str))]
                setattr(node, field, kept or [ast.Pass()])
    return ast.dump(tree).encode()


@functools.lru_cache(maxsize=16)
def code_fingerprint(entries: tuple[str, ...], root: Path = ROOT) -> str:
    """Hash of every .py file of ``entries`` (path and code, ``code_text``); read once per process."""
    digest = hashlib.sha256()
    for path in source_files(entries, root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(code_text(path.read_bytes()))
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def source_hashes(entries: tuple[str, ...], root: Path = ROOT) -> dict[str, str]:
    """{path relative to ``root``: SHA-256 of its code (``code_text``, 16 hex digits)} for every .py file of
    ``entries``."""
    return {str(path.relative_to(root)): hashlib.sha256(code_text(path.read_bytes())).hexdigest()[:16]
            for path in source_files(entries, root)}


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files added, removed or edited between two ``source_hashes``, sorted."""
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
