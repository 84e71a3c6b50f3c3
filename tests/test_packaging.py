"""environment.yml and pyproject.toml describe the same environment."""

import re
import subprocess
import sys
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


def test_layers_contract_holds_and_covers_every_package():
    """lint-imports keeps gac <- theory, sim <- experiments <- paper_figs (no upward import, even in a function)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    linter = config["tool"]["importlinter"]
    packages = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= set(linter["root_packages"])
    layers = linter["contracts"][0]["layers"]
    assert layers.index("experiments") < layers.index("sim | theory") < layers.index("gac")
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("lint-imports is not installed (pip install 'gac-lab[dev]')")
    result = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
