"""Comments and docstrings say what and why, never dates, machines or measured values: those belong in commit bodies,
benchmarks/README.md and RESULTS.md. This test greps every comment and string statement (docstrings, attribute
docstrings) of the checkout's Python files, tests included, for the patterns below."""

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
PATTERNS = {
    "a date": rf"\b20[12]\d-[01]\d\b|\b{MONTH} +(\d{{1,2}}, +)?20\d\d\b|\b\d{{1,2}} +{MONTH} +20\d\d\b",
    "a machine": r"\b(this|our|my|the project's|the lab's) (machine|cpu|laptop|box|host|computer|workstation)\b"
                 r"|\b\d+[- ]((cpu|idle|free|busy|shared) )?cores?\b"
                 r"|\b(on|with|per|for) (one |an? |the |a single )?(h100|h200|a100|v100|l4|t4|rtx ?\d+)\b",
    "a load": r"\bload( average)?( of)? \d|\bat load\b|\bidle (\d+-)?(cores?|cpus?|machine)\b",
    "a measured value": r"\btook (about |only |roughly |~ ?|≈ ?)?\d|\bpeaked at\b"
                        r"|\bmeasured( \w+)?( \|?\w+\|?)?:? (at |about |~ ?|≈ ?)?\d",
    "a speed ratio": r"\b\d+\.\d+[x×]|\b\d+ ?[x×] (faster|slower|longer|shorter|quicker|too)\b",
    "a duration": r"\b(\d+(\.\d+)?|a|an|one|two|three|four|five|ten) ?(ms|µs|min|mins|minutes?|secs?|seconds|hours?|hrs"
                  r"|cpu-s|core-s|cpu-min|cpu-h)\b|\b\d+(\.\d+)? s\b(?!\s*[=<>≤≥+−\-^*/·²_{(])",
}
PATTERNS = {name: re.compile(pattern, re.I) for name, pattern in PATTERNS.items()}

ALLOWED = {
    # a constant of Ray's, not a measurement
    "runtime/cluster.py": ("a fixed 30 s",),
    # the tests' own inputs: a poll interval and made-up task timings
    "tests/runtime/test_pool.py": ("0.5 s watchdog poll",),
    "tests/runtime/test_cluster.py": ("30 estimated core-s in 15 s", "Two 90 s warm starts then ten 10 s runs",
                                  "48.3 s are left"),
    # this file's own examples of what it catches
    "tests/test_code_comments.py": ("PLANTED",),
}


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line number, text) of every comment and of every line of every string statement (module, class, function
    and attribute docstrings)."""
    lines = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines += [(node.lineno + i, text) for i, text in enumerate(node.value.value.splitlines())]
    return sorted(lines)


def offenders(source: str, allowed: tuple[str, ...] = ()) -> list[tuple[int, str, str]]:
    """(line number, what it looks like, the text) of every comment or docstring line that matches a pattern and
    holds none of the ``allowed`` phrases."""
    found = []
    for line, text in comments_and_docstrings(source):
        for name, pattern in PATTERNS.items():
            if pattern.search(text) and not any(phrase in text for phrase in allowed):
                found.append((line, name, text.strip()))
                break
    return found


def python_files() -> list[str]:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in files.stdout.split() if not f.startswith("notebooks/")]


@pytest.mark.parametrize("planted", [
    "# PLANTED: measured on 2026-12-05", "# PLANTED: on this machine", "# PLANTED: a 2-core laptop",
    "# PLANTED: sized for one H100", "# PLANTED: at load 3", "# PLANTED: the runs took 12 s",
    "# PLANTED: measured max 0.008", "# PLANTED: 1.94x the fused step", "# PLANTED: about 14 min",
    "# PLANTED: 3 seconds", "# PLANTED: in Dec 2026",
    '"""PLANTED: idle 2 cores."""', 'def f():\n    """PLANTED: 196 s with two threads."""',
    'X = 1\n"""PLANTED: peaked at 635 MiB."""',
])
def test_a_planted_offender_is_caught(planted):
    assert offenders(planted), planted
    assert not offenders(planted, allowed=("PLANTED",))


@pytest.mark.parametrize("fine", [
    "# a*(s) = 2 sin(π/(2(2s+1)))", "# neighbours 2× apart", "# ≥ 10 × sync's loss", "# 4x more seeds",
    "# psi'' = 1 + 6 cos 2x", "# the measured rho, also puts 1.3 a*(s) inside", "# eta^2 s^2 = 1",
    "# a second thread", "# at s = 16",
])
def test_math_and_design_statements_pass(fine):
    assert not offenders(fine)


def test_no_dates_machines_or_measurements_in_code_comments():
    bad = [f"{path}:{line}: {name}: {text}" for path in python_files()
           for line, name, text in offenders((ROOT / path).read_text(), ALLOWED.get(path, ()))]
    assert not bad, "comments and docstrings with dates, machines or measured values:\n" + "\n".join(bad)
