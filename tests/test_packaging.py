"""environment.yml and pyproject.toml describe the same environment."""

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def names(requirements):
    return {re.split(r"[<>=\[ ]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


def test_environment_yml_lists_every_pyproject_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = names(project["dependencies"])
    for extra in ("research", "trl", "tensorboard", "dev"):
        wanted |= names(project["optional-dependencies"][extra])
    conda = {line.strip()[2:] for line in (ROOT / "environment.yml").read_text().splitlines()
             if line.strip().startswith("- ") and not line.strip().startswith("- -")}
    conda_names = names(conda) | ({"torch"} if "pytorch" in names(conda) else set())
    assert wanted - conda_names == set()


def test_gac_depends_on_torch_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert names(project["dependencies"]) == {"torch"}
    for path in (ROOT / "gac").rglob("*.py"):
        if "integrations" in path.parts:
            continue
        imports = re.findall(r"^\s*(?:from|import) ([a-z_]+)", path.read_text(), re.M)
        assert set(imports) <= {"torch", "gac", "__future__", "collections", "dataclasses", "typing", "math",
                                "functools"}, (path, set(imports))
