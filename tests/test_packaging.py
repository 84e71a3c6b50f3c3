"""environment.yml and pyproject.toml describe the same environment; the wheel holds the library ``gac`` alone."""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def names(requirements):
    return {re.split(r"[<>=\[ ]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


EXTRAS = ("research", "trl", "cluster", "site", "notebooks", "dev")
CONDA_NAME = {"torch": "pytorch", "ray": "ray-core"}  # PyPI name -> conda-forge name, where they differ
PIP_ONLY = ("django-static-mathjax",)
"""Requirements that environment.yml takes from PyPI (its pip section) instead of conda-forge."""


def specs(requirements, where):
    """name -> version specifier of a requirement list; a name listed twice (even with the same bound) fails."""
    out = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*([<>=!~].*)?", requirement.strip())
        assert match, f"{where}: cannot read requirement {requirement!r}"
        name, spec = match[1].lower(), (match[2] or "").replace(" ", "")
        assert name not in out, f"{where}: {name} listed twice"
        out[name] = spec
    return out


def pyproject_requirements() -> dict:
    """Every requirement of pyproject.toml (dependencies and the extras) under its conda-forge name; a name that
    two lists give different bounds fails."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    merged = {"python": project["requires-python"].replace(" ", "")}
    for where, requirements in [("dependencies", project["dependencies"]),
                                *((f"[{e}]", project["optional-dependencies"][e]) for e in EXTRAS)]:
        for name, spec in specs(requirements, where).items():
            name = CONDA_NAME.get(name, name)
            assert merged.setdefault(name, spec) == spec, f"{name}: {merged[name]} and {spec} in pyproject.toml"
    return merged


def environment_requirements(text: str) -> tuple[list, dict, list]:
    """(channels, conda requirements as name -> specifier, pip lines) of an environment.yml."""
    env = yaml.safe_load(text)
    conda = [d for d in env["dependencies"] if isinstance(d, str) and d != "pip"]
    pip_lines = [line for d in env["dependencies"] if isinstance(d, dict) for line in d.get("pip", [])]
    return env["channels"], specs(conda, "environment.yml"), pip_lines


def test_environment_yml_equals_pyproject():
    channels, conda, pip_lines = environment_requirements((ROOT / "environment.yml").read_text())
    assert channels[0] == "conda-forge" and not {"pytorch", "defaults"} & set(channels), channels
    assert "cpuonly" not in conda, "cpuonly belongs to the retired pytorch channel"
    pip = specs([line.split("#")[0] for line in pip_lines[1:]], "environment.yml pip")
    wanted = pyproject_requirements()
    assert conda == {k: v for k, v in wanted.items() if k not in PIP_ONLY}
    assert pip_lines[0] == "-e ." and pip == {k: v for k, v in wanted.items() if k in PIP_ONLY}  # nothing else


def test_gac_depends_on_torch_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert names(project["dependencies"]) == {"torch"}
    for path in (ROOT / "gac").rglob("*.py"):
        if "integrations" in path.parts:
            continue
        imports = re.findall(r"^\s*(?:from|import) ([a-z_]+)", path.read_text(), re.M)
        assert set(imports) <= {"torch", "gac", "__future__", "collections", "dataclasses", "typing", "math",
                                "functools", "numbers", "reprlib", "warnings", "weakref", "importlib", "sys",
                                "types"}, (path, set(imports))


def test_the_wheel_holds_the_library_alone(tmp_path):
    """A wheel built from the checkout's package folders has ``gac`` (with its integrations) and its metadata, and
    none of the research packages, which run from the checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert {"gac", "sim", "theory", "runtime", "experiments", "paper_figs"} <= set(packages)
    for package in packages:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "out", ".cache"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "-q", "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"gac"}, sorted(tops)
    assert "gac/__init__.py" in names and "gac/integrations/trl.py" in names


def test_layers_contract_holds_and_covers_every_package():
    """lint-imports keeps gac <- runtime <- theory, sim <- experiments <- paper_figs (no upward import, even in a
    function)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    linter = config["tool"]["importlinter"]
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(linter["root_packages"])
    layers = linter["contracts"][0]["layers"]
    assert layers.index("experiments") < layers.index("sim | theory") < layers.index("runtime") < layers.index("gac")
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("lint-imports is not installed (pip install 'gac-lab[dev]')")
    result = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]


def test_a_contract_forbids_the_run_code_from_importing_the_figures(tmp_path):
    """experiments (and sim, theory, gac) -> paper_figs is forbidden by its own contract; lint-imports on a small
    tree with such an import (inside a function) fails with that contract, so the check can fail."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (forbidden,) = [c for c in config["contracts"] if c["type"] == "forbidden"]
    assert set(forbidden["source_modules"]) >= {"experiments", "sim", "theory", "runtime", "gac"}
    assert forbidden["forbidden_modules"] == ["paper_figs"]
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("lint-imports is not installed (pip install 'gac-lab[dev]')")
    for package in ("gac", "theory", "sim", "runtime", "experiments", "paper_figs"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "experiments" / "__init__.py").write_text("def plot():\n    from paper_figs import x\n")
    lines = ["[importlinter]", "root_packages =", *[f"    {p}" for p in ("gac", "theory", "sim", "runtime",
                                                                         "experiments", "paper_figs")],
             "[importlinter:contract:forbidden]", f"name = {forbidden['name']}", "type = forbidden",
             "source_modules =", *[f"    {m}" for m in forbidden["source_modules"]],
             "forbidden_modules =", *[f"    {m}" for m in forbidden["forbidden_modules"]]]
    (tmp_path / ".importlinter").write_text("\n".join(lines) + "\n")
    result = subprocess.run([str(exe)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode != 0 and "experiments -> paper_figs" in result.stdout, result.stdout[-2000:]
