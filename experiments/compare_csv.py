"""Compare the figure CSVs of two output folders: same rows, same values, after the documented added columns.

``python -m experiments.compare_csv BASELINE_DIR NEW_DIR [--names fig1_cosine ...]`` prints one line per
CSV (identical / equal after documented changes / DIFFERENT, with the first differences) and exits 1 if
any differs. Where NEW_DIR has completion markers (``NAME.complete``), a CSV outside a finished set differs.
The values are compared by ``pandas.testing.assert_frame_equal``: floats within ``rel_tol`` relative (float
reordering), NaN equals NaN; this module adds only the documented added columns.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from runtime.files import is_complete


@dataclass(frozen=True)
class Comparison:
    name: str
    equal: bool
    notes: tuple[str, ...]


def compare(old_path: Path, new_path: Path, rel_tol: float = 1e-12, allow_added: tuple[str, ...] = ()) -> Comparison:
    """Compare one CSV; columns only in the new file are allowed when every value there is NaN or empty, or
    when named in ``allow_added`` (a documented addition; reported)."""
    import pandas as pd

    old, new = pd.read_csv(old_path), pd.read_csv(new_path)
    missing = [c for c in old.columns if c not in new.columns]
    added = [c for c in new.columns if c not in old.columns]
    filled = [c for c in added if new[c].notna().any()]
    notes = []
    if missing:
        notes.append(f"columns missing in the new file: {missing}")
    if unexpected := [c for c in filled if c not in allow_added]:
        notes.append(f"new columns with values: {unexpected}")
    equal = not notes
    if allowed := [c for c in filled if c in allow_added]:
        notes.append(f"new columns with values, allowed: {allowed}")
    if empty := [c for c in added if c not in filled]:
        notes.append(f"new all-NaN schema columns: {empty}")
    if [c for c in new.columns if c in old.columns] != list(old.columns):
        notes.append("column order changed")
    shared = [c for c in old.columns if c in new.columns]
    try:
        # atol=0: the tolerance is relative only; check_dtype=False: an int column equals its float spelling
        pd.testing.assert_frame_equal(old[shared], new[shared], check_dtype=False, rtol=rel_tol, atol=0.0)
    except AssertionError as err:
        equal = False
        notes.append(" ".join(str(err).split())[:500])
    return Comparison(old_path.name, equal, tuple(notes))


@dataclass(frozen=True)
class CompareArgs:
    """Compare the figure CSVs of two output folders."""

    baseline: tyro.conf.Positional[Path]
    new: tyro.conf.Positional[Path]
    names: tuple[str, ...] = ()
    """figure names (CSV stems and their NAME_*.csv companions); default every CSV in the baseline folder"""
    rel_tol: float = 1e-12
    allow_added: tuple[str, ...] = ()
    """columns the new files may add with values (documented additions)"""


def main(argv=None) -> int:
    args = tyro.cli(CompareArgs, args=argv)
    paths = sorted(args.baseline.glob("*.csv"))
    if args.names:
        paths = [p for p in paths if any(p.stem == n or p.stem.startswith(f"{n}_") for n in args.names)]
    if not paths:
        raise SystemExit(f"error: no CSV to compare in {args.baseline}")
    markers = list(args.new.glob("*.complete"))
    finished = {f for m in markers if is_complete(args.new, m.stem) for f in m.read_text().split()}
    results = []
    for old in paths:
        new = args.new / old.name
        if not new.exists() or (markers and old.name not in finished):
            result = Comparison(old.name, False, ("missing" if not new.exists() else "not in a finished set",))
        else:
            result = compare(old, new, args.rel_tol, args.allow_added)
        results.append(result)
        verdict = "DIFFERENT" if not result.equal else ("equal after documented changes" if result.notes
                                                        else "identical")
        print(f"{result.name}: {verdict}" + "".join(f"\n    {n}" for n in result.notes))
    return 0 if all(r.equal for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
