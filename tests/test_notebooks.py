"""Every teaching notebook executes top to bottom (stored without outputs; run here with nbclient)."""

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_are_stored_without_outputs():
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has stored outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, monkeypatch):
    # The kernel is this interpreter (its bin/ first on PATH) and imports the package from the checkout.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("GAC_LAB_NOTEBOOK_TEST", "1")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
              if out.get("output_type") == "error"]
    assert not errors


def paired_cells(notebook) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def out_of_step(path: Path, script_text: str | None = None) -> bool:
    """Whether the notebook at ``path`` and its py:percent script (notebooks/jupytext.toml) hold other cells."""
    import jupytext

    script = jupytext.reads(script_text if script_text is not None else path.with_suffix(".py").read_text(),
                            fmt="py:percent")
    return paired_cells(jupytext.read(path)) != paired_cells(script)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_is_in_step_with_its_reviewable_script(path):
    assert path.with_suffix(".py").exists(), f"{path.name} has no paired script: jupytext --sync {path}"
    assert not out_of_step(path), f"{path.name} and its .py differ: run jupytext --sync notebooks/*.ipynb"


def test_the_pairing_check_catches_an_edit_on_one_side():
    path = NOTEBOOKS[0]
    edited = path.with_suffix(".py").read_text().replace("import", "import  ", 1)
    assert out_of_step(path, edited)
