"""Every ``python -m`` command of the checkout answers ``--help`` with its usage and exit status 0, without importing
torch, pandas or matplotlib (they cost seconds before the first line; the times themselves are in
benchmarks/README.md, never asserted here)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cli_help import commands

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "matplotlib")


def imported_packages(stderr: str) -> set[str]:
    """The top-level packages that ``python -X importtime`` reports as imported."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \| ( *)(\S+)$", stderr, re.M)
    return {name.split(".")[0] for indent, name in names}


def test_the_commands_are_found():
    found = commands()
    assert {"paper_figs", "sim.llm", "sim.llm.warmstart", "experiments.snr", "experiments.verdict",
            "benchmarks.gac_overhead", "theory.placement"} <= set(found), found


@pytest.mark.parametrize("command", commands())
def test_help_prints_usage_and_exits_0(command):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", command, "--help"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout.lower(), result.stdout[:500]
    heavy = imported_packages(result.stderr) & set(HEAVY)
    assert not heavy, f"python -m {command} --help imports {sorted(heavy)}"


def test_imported_packages_reads_importtime():
    stderr = ("import time: self [us] | cumulative | imported package\n"
              "import time:       120 |        340 |   torch._C\n"
              "import time:      2000 |     900000 | torch\n"
              "import time:        50 |         50 | tyro\n")
    assert imported_packages(stderr) == {"torch", "tyro"}
