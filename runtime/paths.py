"""Where gac-lab writes by default, decided in one place, and the one module that reads gac-lab's environment variables.

Run from inside a source checkout (the package folders beside ``pyproject.toml``, the working folder in it), the
defaults are the checkout's own folders, as the README describes: warm starts in ``runs/``, the run cache in
``experiments/.cache/``, figures in ``paper_figs/out/``. Anywhere else — the package installed from a wheel
into site-packages, or a checkout used from another folder — nothing is written next to the code: the caches go to
the user's cache folder (``platformdirs.user_cache_dir("gac-lab")``, e.g. ``~/.cache/gac-lab`` on Linux) and the
figures to ``paper_figs/out/`` under the current folder. ``GAC_LAB_RUNS`` and ``GAC_LAB_CACHE`` override the two
caches; ``--out`` the figures. ``GAC_LAB_FORCE=1`` recomputes cached results (``force_recompute``) and
``GAC_LAB_JOBS`` sets the worker count of the run graph (``jobs_setting``); ``GAC_LAB_TIMELINE=FILE`` appends each
task's estimate and times to FILE (``timeline_file``). Each is read when asked for, never at
import, so a worker process started later reads the same value as its parent.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The folder holding the package folders (a checkout's root, or site-packages when installed)."""


def checkout(cwd: Path | None = None) -> Path | None:
    """The source checkout this package runs from, if the working folder ``cwd`` (default: the current one) lies in
    it; None when installed or used from elsewhere."""
    cwd = (Path.cwd() if cwd is None else Path(cwd)).resolve()
    if not (ROOT / "pyproject.toml").is_file():  # a wheel installs the packages without it
        return None
    return ROOT if cwd == ROOT or ROOT in cwd.parents else None


def user_cache() -> Path:
    """The user's cache folder for gac-lab (platformdirs where installed; else $XDG_CACHE_HOME or ~/.cache)."""
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gac-lab"
    return Path(user_cache_dir("gac-lab", appauthor=False))


def runs_dir() -> Path:
    """Where warm starts (and other trained checkpoints) are cached: ``GAC_LAB_RUNS``, else see the module doc."""
    if os.environ.get("GAC_LAB_RUNS"):
        return Path(os.environ["GAC_LAB_RUNS"])
    root = checkout()
    return root / "runs" if root else user_cache() / "runs"


def cache_dir() -> Path:
    """Where finished runs are cached: ``GAC_LAB_CACHE``, else see the module doc."""
    if os.environ.get("GAC_LAB_CACHE"):
        return Path(os.environ["GAC_LAB_CACHE"])
    root = checkout()
    return root / "experiments" / ".cache" if root else user_cache() / "run-cache"


def figures_dir() -> Path:
    """Where figures go without ``--out``: the checkout's ``paper_figs/out``, else ``./paper_figs/out``."""
    root = checkout()
    return (root or Path.cwd()) / "paper_figs" / "out"


def force_recompute() -> bool:
    """Whether ``GAC_LAB_FORCE=1`` asks every cached result to be recomputed."""
    return os.environ.get("GAC_LAB_FORCE") == "1"


def jobs_setting() -> str:
    """``GAC_LAB_JOBS`` as written (stripped; "" when unset): the worker count asked for, checked by the caller."""
    return os.environ.get("GAC_LAB_JOBS", "").strip()


def timeline_file() -> Path | None:
    """``GAC_LAB_TIMELINE``: the CSV file to which the run graph appends one row per task (its name, cost estimate and
    the seconds it started and finished at), the data to check the cost estimates against; None when unset."""
    text = os.environ.get("GAC_LAB_TIMELINE", "").strip()
    return Path(text) if text else None
