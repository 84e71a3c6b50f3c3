"""Compare the figure CSVs of two output folders: same rows, same values, after the documented column changes.

``python -m experiments.compare_csv BASELINE_DIR NEW_DIR [--names fig1_cosine ...]`` prints one line per
CSV (identical / equal after documented changes / DIFFERENT, with the first differences) and exits 1 if
any differs. Where NEW_DIR has completion markers (``NAME.complete``), a CSV outside a finished set differs.
Floats are equal when within ``rel_tol`` relative (float reordering); NaN equals NaN.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from sim.record import is_complete

RENAMED = {"kl": "kl_behaviour"}
"""Old column name -> new name (the bandit's KL column now has its ``sim.schema`` name)."""


@dataclass(frozen=True)
class Comparison:
    name: str
    equal: bool
    notes: tuple[str, ...]


def _read(path: Path) -> tuple[list[str], list[dict]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def values_equal(a: str, b: str, rel_tol: float = 1e-12) -> bool:
    """Equal as text, or as floats within ``rel_tol`` relative (NaN equals NaN)."""
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) and math.isnan(y):
        return True
    return math.isclose(x, y, rel_tol=rel_tol, abs_tol=0.0)


def compare(old_path: Path, new_path: Path, rel_tol: float = 1e-12, allow_added: tuple[str, ...] = ()) -> Comparison:
    """Compare one CSV; columns only in the new file are allowed when every value there is NaN or empty, or
    when named in ``allow_added`` (a documented addition; reported)."""
    raw_cols, old_rows = _read(old_path)
    new_cols, new_rows = _read(new_path)
    old_cols = [RENAMED.get(c, c) for c in raw_cols]
    old_rows = [{RENAMED.get(k, k): v for k, v in row.items()} for row in old_rows]
    notes, equal = [], True
    missing = [c for c in old_cols if c not in new_cols]
    added = [c for c in new_cols if c not in old_cols]
    if missing:
        equal = False
        notes.append(f"columns missing in the new file: {missing}")
    filled = [c for c in added if any(r[c] not in ("nan", "") for r in new_rows)]
    unexpected = [c for c in filled if c not in allow_added]
    if unexpected:
        equal = False
        notes.append(f"new columns with values: {unexpected}")
    if [c for c in filled if c in allow_added]:
        notes.append(f"new columns with values, allowed: {[c for c in filled if c in allow_added]}")
    if [c for c in added if c not in filled]:
        notes.append(f"new all-NaN schema columns: {[c for c in added if c not in filled]}")
    if [c for c in new_cols if c in old_cols] != old_cols:
        notes.append("column order changed")
    renamed = {c: RENAMED[c] for c in raw_cols if c in RENAMED}
    if renamed:
        notes.append(f"renamed: {renamed}")
    if len(old_rows) != len(new_rows):
        return Comparison(old_path.name, False, (*notes, f"rows: {len(old_rows)} before, {len(new_rows)} after"))
    diffs = [(i, c, o[c], n[c]) for i, (o, n) in enumerate(zip(old_rows, new_rows, strict=True))
             for c in old_cols if c in n and not values_equal(o[c], n[c], rel_tol)]
    if diffs:
        equal = False
        notes.append(f"{len(diffs)} differing values, first: {diffs[:3]}")
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
