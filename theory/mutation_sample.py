"""Tooling for `make mutation-sample`: a seeded random sample of mutmut's mutants, and the score per file.

A full `mutmut run` of the six files (5 436 mutants) takes hours of CPU; a uniform sample
of each file's mutants estimates each file's score with a stated interval. mutmut has no sampling option, so
this picks the names (from the `.meta` files mutmut writes when it generates the mutants) and scores them.

  python -m theory.mutation_sample pick N [SEED]   # N mutant names per file, one a line
  mutmut results --all true | python -m theory.mutation_sample score [NAMES_FILE]
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

import tyro

KILLED = {"killed", "timeout"}  # a timeout is a mutant the tests did not let finish: mutmut counts it as caught


def module_of(name: str) -> str:
    """'theory.cosine.x_snr__mutmut_3' → 'theory.cosine' (class methods: 'pkg.mod.xǁClassǁmethod__mutmut_1')."""
    return re.sub(r"\.x[^.]*$", "", name)


def all_mutant_names(mutants_dir: Path = Path("mutants")) -> dict[str, list[str]]:
    """Every generated mutant, per module, in mutmut's order."""
    names: dict[str, list[str]] = defaultdict(list)
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        for name in json.loads(meta.read_text())["exit_code_by_key"]:
            names[module_of(name)].append(name)
    if not names:
        raise SystemExit("no mutants/*.py.meta: run `mutmut run <a name that matches nothing>` first to generate them")
    return names


def pick(per_file: int, seed: int = 0) -> list[str]:
    """A uniform sample without replacement of `per_file` mutants of each module (all of them if fewer)."""
    rng = random.Random(seed)
    out = []
    for _module, names in sorted(all_mutant_names().items()):
        out += sorted(rng.sample(names, min(per_file, len(names))))
    return out


def wilson(killed: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson interval of a binomial proportion (the score of the whole file, estimated from the sample)."""
    if total == 0:
        return 0.0, 1.0
    p = killed / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return centre - half, centre + half


def score(results_lines, only: set[str] | None = None) -> list[dict]:
    """Per module: killed, checked, not checked, total and score from `mutmut results --all true` lines."""
    counts: dict[str, dict] = defaultdict(lambda: {"killed": 0, "checked": 0, "not_checked": 0, "survivors": []})
    for line in results_lines:
        name, _, status = line.strip().partition(": ")
        if not status or (only is not None and name not in only):
            continue
        row = counts[module_of(name)]
        if status == "not checked":
            row["not_checked"] += 1
            continue
        row["checked"] += 1
        row["killed"] += status in KILLED
        if status not in KILLED:
            row["survivors"].append(f"{name} ({status})")
    return [{"module": module, **row} for module, row in sorted(counts.items())]


def pick_command(n: tyro.conf.Positional[int], seed: tyro.conf.Positional[int] = 0) -> None:
    """Print N mutant names per file (seeded), one a line (reads mutants/*.meta)."""
    if n < 1:
        raise SystemExit(f"python -m theory.mutation_sample pick: N must be >= 1, got {n}")
    print("\n".join(pick(n, seed)))


def score_command(names_file: tyro.conf.Positional[Path | None] = None) -> None:
    """Read `mutmut results --all true` on stdin; print each file's score (with a 95 % interval for a sample
    named in NAMES_FILE)."""
    only = set(names_file.read_text().split()) if names_file is not None else None
    for row in score(sys.stdin, only):
        lo, hi = wilson(row["killed"], row["checked"])
        percent = 100 * row["killed"] / max(row["checked"], 1)
        # every mutant of the file judged: the score is exact; else a sample's 95 % interval for the whole file
        complete = only is None and not row["not_checked"]
        print(f"{row['module']:22s} {row['killed']:4d} / {row['checked']:4d} killed {percent:5.1f} %  "
              + ("(complete)" if complete else f"(95 % interval {100 * lo:.0f}-{100 * hi:.0f} %)")
              + (f", {row['not_checked']} not checked" if row["not_checked"] else ""))
        for survivor in row["survivors"]:
            print(f"    survived: {survivor}")


def main(argv: list[str] | None = None) -> None:
    tyro.extras.subcommand_cli_from_dict({"pick": pick_command, "score": score_command}, args=argv,
                                         prog="python -m theory.mutation_sample", description=__doc__)


if __name__ == "__main__":
    main()
