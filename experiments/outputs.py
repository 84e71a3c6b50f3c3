"""Checks of an experiment command's output files, run before any work: the folder can be written, and committed
data is never overwritten by a smaller profile (a quick run over docs/data's full-profile table).

Git is asked with ``git ls-files`` (no library does this for us); where git or the repository is absent, nothing
is tracked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from sim.record import check_output_dir


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
