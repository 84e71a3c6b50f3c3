"""Where the package writes (issue 35.9): in a checkout, its own folders; installed or run from another folder,
nothing next to the code (the caches in the user's cache folder, figures under the current folder)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRINT = ("import json; from runtime import paths; print(json.dumps({'runs': str(paths.runs_dir()), "
         "'cache': str(paths.cache_dir()), 'figures': str(paths.figures_dir())}))")


def locations(cwd: Path, pythonpath: Path, home: Path) -> dict[str, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAC_LAB_") and k != "XDG_CACHE_HOME"}
    env.update(PYTHONPATH=str(pythonpath), HOME=str(home))
    done = subprocess.run([sys.executable, "-c", PRINT], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return {k: Path(v) for k, v in json.loads(done.stdout).items()}


def test_in_the_checkout_the_defaults_are_its_own_folders(tmp_path):
    where = locations(ROOT / "notebooks", ROOT, tmp_path)  # a folder inside the checkout counts too
    assert where == {"runs": ROOT / "runs", "cache": ROOT / "experiments" / ".cache",
                     "figures": ROOT / "paper_figs" / "out"}


def test_from_another_folder_nothing_goes_into_the_checkout(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    where = locations(work, ROOT, home)
    assert where["figures"] == work / "paper_figs" / "out"
    assert home in where["runs"].parents and home in where["cache"].parents
    assert not any(ROOT in p.parents for p in where.values())


def test_installed_nothing_goes_into_site_packages(tmp_path):
    site, work, home = tmp_path / "site-packages", tmp_path / "work", tmp_path / "home"
    shutil.copytree(ROOT / "runtime", site / "runtime", ignore=shutil.ignore_patterns("__pycache__"))
    work.mkdir()
    where = locations(work, site, home)  # no pyproject.toml beside the package: an install
    assert not any(site in p.parents for p in where.values())
    assert home in where["runs"].parents and where["figures"] == work / "paper_figs" / "out"


def test_a_figure_made_from_another_folder_writes_nothing_into_the_checkout(tmp_path):
    watched = [ROOT / "runs", ROOT / "experiments" / ".cache", ROOT / "paper_figs" / "out"]

    def listing():
        return {str(p) for folder in watched if folder.exists() for p in folder.rglob("*")}

    before = listing()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAC_LAB_") and k != "XDG_CACHE_HOME"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"))
    subprocess.run([sys.executable, "-m", "paper_figs", "fig4_stability_region", "--dry-run"], cwd=tmp_path,
                   env=env, capture_output=True, text=True, timeout=600, check=True)
    assert (tmp_path / "paper_figs" / "out" / "dry_run" / "fig4_stability_region.png").exists()
    assert list((tmp_path / "home").rglob("gac-lab/run-cache/*.json"))  # its runs were cached there
    assert listing() == before
