"""gac-lab's environment variables (GAC_LAB_*) are read in one module, runtime/paths.py, and only when asked for."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gac", "theory", "sim", "runtime", "experiments", "paper_figs", "benchmarks")
READ = re.compile(r"""(environ\.get\(\s*|environ\[\s*|getenv\(\s*)["']GAC_LAB_""")


def readers() -> dict[str, list[str]]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = [line.strip() for line in path.read_text().splitlines() if READ.search(line)]
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    return found


def test_only_runtime_paths_reads_the_environment():
    assert set(readers()) == {"runtime/paths.py"}


def test_runtime_paths_reads_nothing_at_import():
    source = (ROOT / "runtime" / "paths.py").read_text()
    top_level = [line for line in source.splitlines() if READ.search(line) and not line.startswith(" ")]
    assert top_level == []
