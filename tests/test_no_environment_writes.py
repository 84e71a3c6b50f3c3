"""The program never sets environment variables to talk to itself: no ``os.environ[...] =`` (or update, setdefault,
putenv) anywhere in the package; folders, force, dry run and jobs travel as arguments."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gac", "theory", "sim", "runtime", "experiments", "paper_figs", "benchmarks", "course")
WRITE = re.compile(r"os\.environ\s*\[[^\]]+\]\s*=(?!=)|os\.environ\.(update|setdefault|pop)\(|os\.putenv\(|"
                   r"os\.unsetenv\(|del\s+os\.environ\[")


def writes(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if WRITE.search(line)]


def test_the_check_finds_each_kind_of_write():
    for line in ('os.environ["GAC_LAB_JOBS"] = "1"', "os.environ['X']='1'", "os.environ.update(A='1')",
                 'os.environ.setdefault("A", "1")', 'os.putenv("A", "1")', 'del os.environ["A"]'):
        assert writes(line) == [line]
    assert writes('value = os.environ.get("GAC_LAB_JOBS", "")') == []
    assert writes('same = os.environ["A"] == "1"') == []
    assert writes('env = {**os.environ, "GAC_LAB_CACHE": "x"}') == []  # a child's environment, built as a dict


def test_no_environment_variable_is_set_by_the_package():
    found = {str(path.relative_to(ROOT)): writes(path.read_text())
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: lines for path, lines in found.items() if lines} == {}
