"""Run cache: results keyed by a hash of their configuration, so a re-run with nothing changed is fast.

A ``Unit`` is one computable, cacheable piece of work (a GRPO run, a toy simulation): ``fn(*args)``'s JSON-able
result, stored under ``experiments/.cache/KIND-HASH.json`` in a checkout, the user's cache folder otherwise
(``runtime.paths``; atomically; ``GAC_LAB_CACHE`` moves it). Its key holds a fingerprint of the code that computes it
(gac/, sim/, theory/, experiments/; not the plotting code, not this runtime), so editing that code recomputes. Units
are computed in one graph of tasks (``runtime.graph.compute``, ``compute_unit`` in a worker), whoever asks for them:
a figure, a study's command line, or a unit that needs another's result. ``GAC_LAB_FORCE=1`` always recomputes.

Each entry carries the SHA-256 of its content (as a checkpoint does), so an entry altered into other valid JSON is
a miss that warns with its path, never a silent change of a figure. A write that fails (disk full, a read-only
folder) warns with the path and hands back the computed result: a full cache never loses a finished run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import gac
from runtime import fingerprint, paths
from runtime.files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = paths.cache_dir()
"""The run cache (``runtime.paths``: the checkout's experiments/.cache, else the user's cache folder; GAC_LAB_CACHE)."""
SOURCE_DIRS = ("gac", "sim", "theory", "experiments")
"""The code that computes a cached result (paper_figs/ only plots and runtime/ only runs, stores and reports: an edit
there recomputes nothing)."""


def config_hash(config: dict) -> str:
    """A short stable hash of a JSON-able config (keys sorted; package version included)."""
    payload = json.dumps({"config": config, "version": gac.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def code_fingerprint(folders: tuple[str, ...] = SOURCE_DIRS, root: Path = ROOT) -> str:
    """Hash of every .py file under ``folders`` of ``root`` (path and content); read once per process."""
    return fingerprint.code_fingerprint(tuple(folders), root)


def cache_path(kind: str, config: dict, folder: Path | None = None) -> Path:
    """Where the result of (kind, config) is stored (in ``folder``, default ``CACHE_DIR``)."""
    return Path(CACHE_DIR if folder is None else folder) / f"{kind.replace('/', '__')}-{config_hash(config)}.json"


_warned: set[Path] = set()
_MISSING = object()


def content_checksum(entry: dict) -> str:
    """SHA-256 of an entry's kind, config and result as ``json.dumps`` writes them (Python's JSON round trip is
    exact: floats by repr, keys in order, NaN as NaN), so a reader recomputes it from what it parsed."""
    return hashlib.sha256(json.dumps(entry).encode()).hexdigest()


def _read(path: Path) -> Any:
    """The stored result at ``path``; _MISSING when absent or unreadable (a corrupt entry warns once, with its path)."""
    if not path.exists():
        return _MISSING
    try:
        entry = json.loads(path.read_text())
        if entry.pop("sha256", None) != content_checksum(entry):
            raise ValueError("its content does not match its SHA-256 (altered after it was written)")
        result = entry["result"]
        if result is None:  # no computation returns None: an entry written by a failed or foreign writer
            raise ValueError("its result is null")
        return result
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSONDecodeError is a ValueError
        if path not in _warned:
            _warned.add(path)
            warnings.warn(f"corrupt cache entry {path} ({type(error).__name__}: {error}); recomputing it",
                          RuntimeWarning, stacklevel=3)
        return _MISSING


def lookup(kind: str, config: dict, folder: Path | None = None) -> Any | None:
    """The stored result of (kind, config), or None when it has not been computed or is corrupt (never computes)."""
    stored = _read(cache_path(kind, config, folder))
    return None if stored is _MISSING else stored


def store(kind: str, config: dict, result: Any, folder: Path | None = None) -> Any:
    """Write ``result`` as the entry of (kind, config) with its checksum, atomically; returns it as a later read
    would (through JSON, so a fresh and a cached result have the same types).

    A write that fails with an OSError (disk full, quota, a read-only folder) warns in one line naming the path and
    still returns the result: the run goes on with it, and only the cache misses it next time.
    """
    entry = {"kind": kind, "config": config, "result": result}
    text = json.dumps({**entry, "sha256": content_checksum(entry)})
    path = cache_path(kind, config, folder)
    try:
        atomic_write_bytes(path, text.encode())
    except OSError as error:
        warnings.warn(f"cache entry {path} not written ({error.strerror or error}); the result is used but will be "
                      "recomputed next time", RuntimeWarning, stacklevel=2)
    return json.loads(text)["result"]


@dataclass(frozen=True, eq=False)
class Unit:
    """A computable, cacheable unit of work: ``fn(*args)``'s JSON-able result, stored under ``kind`` and ``key``.

    ``fn`` lives in the code whose fingerprint ``key`` holds, and is module-level when a worker computes the unit
    (a spawned worker imports it; a unit computed in this process, ``jobs`` ≤ 1, takes any callable).
    ``spec`` is what the unit stands for to whoever reads its result (an ``experiments.llm.Run``, a panel name);
    ``before`` holds the tasks (``runtime.graph.Task``) it waits for (a GRPO run: its warm start); ``cost`` is a rough
    estimate of its seconds on one core, which orders the work and never changes a result.
    """

    kind: str
    key: dict
    fn: Callable[..., Any] = field(repr=False)
    args: tuple = field(default=(), repr=False)
    spec: Any = None
    before: tuple = field(default=(), repr=False)
    cost: float = 10.0

    @functools.cached_property
    def name(self) -> str:
        """The unit's identity (and its cache file's stem): units with equal kind and key are one unit."""
        return f"{self.kind}-{config_hash(self.key)}"

    def lookup(self, folder: Path | None = None) -> Any | None:
        """The cached result, or None when it is missing (never computes)."""
        return lookup(self.kind, self.key, folder)

    def describe(self, result: Any) -> str:
        """What the progress line says of the unit once ``result`` is in: its kind."""
        return self.kind


def unit(kind: str, fn: Callable[..., Any], *args, spec: Any = None, cost: float = 10.0) -> Unit:
    """The unit ``fn(*args)`` keyed by the function's name, its arguments and the fingerprint of SOURCE_DIRS.

    An argument JSON cannot hold (a dataclass such as ``sim.grid.Setting``) is keyed by its ``repr``, which names
    every field."""
    key = {"fn": f"{fn.__module__}.{fn.__qualname__}", "args": json.loads(json.dumps(list(args), default=repr)),
           "code": code_fingerprint()}
    return Unit(kind, key, fn, args, spec=kind if spec is None else spec, cost=cost)


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """torch on one intra-op thread inside the block, the previous count restored after: the units run side by side,
    one per core, and on tiny tensors a second thread only spins when another process holds a core."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def compute_unit(item: Unit, folder: str | Path) -> Any:
    """Compute ``item`` with torch on one thread and store its result in the cache folder ``folder`` (a task: runs
    in a worker process, so the folder is an argument, never a global set there). A GRPO run sets its own thread
    count from its arguments."""
    with single_thread():
        result = item.fn(*item.args)
    return store(item.kind, item.key, result, Path(folder))
