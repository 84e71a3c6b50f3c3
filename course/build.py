"""Build the course site: execute every teaching notebook (a cell error stops the build, naming the notebook and the
cell), then render the executed notebooks, a home page (the start-here path and the README's findings) and
RESULTS.md with MkDocs + mkdocs-jupyter into a static HTML folder. ``make site`` = ``python -m course.build``.

MkDocs renders; it does not execute (mkdocs-jupyter's ``execute: false``): the notebooks are executed here with
nbclient, the same code the test suite uses, so CI executes each notebook once and renders what it executed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PAPER = "https://arxiv.org/abs/2603.01501"
EXTRA_PAGES = ("RESULTS.md", "docs/usage.md", "RELIABILITY.md", "CHANGELOG.md", "theory/README.md",
               "paper_figs/README.md", "benchmarks/README.md")
"""Markdown pages of the checkout the site carries (RESULTS.md links to the others), at the same relative paths."""
FINDINGS = "## The paper's claims, here"
SITE_PACKAGES = ("mkdocs", "mkdocs_jupyter", "material")
"""The site extra's modules (mkdocs, mkdocs-jupyter, mkdocs-material), checked before any notebook runs."""


class NotebookError(RuntimeError):
    """A notebook failed to execute: the build stops and says which notebook and which cell."""


@dataclass(frozen=True)
class Executed:
    name: str
    """The notebook's file name (NAME.ipynb)."""
    path: Path
    """Where the executed copy (with its outputs) was written."""


def notebooks(folder: Path = NOTEBOOKS) -> list[Path]:
    return sorted(folder.glob("*.ipynb"))


def kernel_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment: this interpreter's bin/ first on PATH, the checkout importable, matplotlib's inline
    backend (figures become the notebook's PNG outputs, no display needed; a plain Agg backend would show nothing),
    plus ``extra`` (a child's environment, built as a dict; ours is left alone)."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": str(ROOT), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    return {**env, **(extra or {})}


def execute_notebook(path: Path, out_dir: Path, env: dict[str, str], timeout: int = 600) -> Executed:
    """Execute ``path`` in its own folder (as a reader would) and write the executed copy to ``out_dir``; a cell
    error raises ``NotebookError`` (nothing is written for that notebook)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute(env=env)
    except CellExecutionError as error:
        failed = next((i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" for out in cell.outputs
                       if out.get("output_type") == "error"), None)
        where = f" (cell {failed})" if failed is not None else ""
        raise NotebookError(f"{path.name} failed{where}: {error.ename}: {error.evalue}") from error
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / path.name
    nbformat.write(nb, target)
    return Executed(path.name, target)


def findings_section(readme: str) -> str:
    """The README's findings section (its heading up to the next level-2 heading)."""
    start = readme.index(FINDINGS)
    end = readme.find("\n## ", start + len(FINDINGS))
    return readme[start:end if end >= 0 else None].strip() + "\n"


def notebook_title_and_time(path: Path) -> tuple[str, str]:
    """The first heading of a notebook and its 'Time:' sentence (for the home page's path through the course)."""
    import nbformat

    first = nbformat.read(path, as_version=4).cells[0].source
    title = re.search(r"^#\s+(.+)$", first, re.M)
    time = re.search(r"\*\*Time:\*\*\s*([^.;(]+)", first)
    return (title[1].strip() if title else path.stem), (" ".join(time[1].split()) if time else "")


def home_page(executed: list[Executed]) -> str:
    lines = ["# Gradient Alignment Control: a course", "",
             "Asynchronous RL trains on data from an older policy. The paper this course follows "
             f"([Xu et al., arXiv:2603.01501]({PAPER})) reports that consecutive gradients then stay aligned, that the "
             "aligned steps overshoot and diverge, and that Gradient Alignment Control (GAC) fixes it. The notebooks "
             "below test that story at three scales — closed-form theory, toy simulators, a small LLM trained with "
             "GRPO — and every page shows the outputs computed when this site was built.", "",
             "## Start here, then in order", ""]
    for item in executed:
        title, time = notebook_title_and_time(item.path)
        lines.append(f"1. [{title}](notebooks/{item.name})" + (f" — {time}" if time else ""))
    lines += ["", "Each notebook opens with its objectives, prerequisites and time, and ends with at least two "
              "exercises; each solution is a function of `course/solutions.py` that the tests check.", "",
              "Every number with its setting and interval: [Results](RESULTS.md).", "",
              findings_section((ROOT / "README.md").read_text())]
    return "\n".join(lines)


def link_for_site(source: str) -> str:
    """A notebook's markdown links to the checkout's .md files (../RESULTS.md#anchor) and to other notebooks
    (01_x.ipynb) as the site's pages (../RESULTS.html#anchor, 01_x.html): mkdocs rewrites links in markdown pages,
    not in the HTML a notebook becomes. Web links stay as they are."""
    source = re.sub(r"\]\((\.\./[^)#\s:]+)\.md(#[^)\s]*)?\)", lambda m: f"]({m[1]}.html{m[2] or ''})", source)
    return re.sub(r"\]\(([^)#\s/:]+)\.ipynb(#[^)\s]*)?\)", lambda m: f"]({m[1]}.html{m[2] or ''})", source)


def mkdocs_config(docs_dir: Path, site_dir: Path, executed: list[Executed]) -> str:
    nav = ["  - Home: index.md"]
    nav += [f"  - 'notebooks/{item.name}'" for item in executed]
    nav += ["  - Results: RESULTS.md"]
    nav += [f"  - '{page}'" for page in EXTRA_PAGES[1:]]
    return "\n".join([
        "site_name: gac-lab course",
        f"docs_dir: '{docs_dir}'",
        f"site_dir: '{site_dir}'",
        "use_directory_urls: false",  # pages are NAME.html: the notebooks' rewritten links point at them
        "theme:",
        "  name: material",
        "markdown_extensions:",
        "  - tables",
        "  - toc:",
        "      permalink: true",
        # GitHub's heading anchors, so that a link like RESULTS.md#verdict works on GitHub and on the site alike
        "      slugify: !!python/object/apply:pymdownx.slugs.slugify {kwds: {case: lower}}",
        "plugins:",
        "  - mkdocs-jupyter:",
        "      include: ['*.ipynb']",
        "      execute: false",  # executed above, with nbclient: each notebook runs once per build
        "      cache: false",  # mkdocs-jupyter's cache would write into the current folder
        "nav:",
        *nav,
        "",
    ])


def build_site(out: Path, executed: list[Executed]) -> Path:
    """Render ``executed`` notebooks and the pages into the static site ``out`` (replaced only once it is built)."""
    out = out.resolve()
    with tempfile.TemporaryDirectory(prefix="gac-course-") as tmp:
        docs = Path(tmp) / "docs"
        (docs / "notebooks").mkdir(parents=True)
        for page in EXTRA_PAGES:
            (docs / page).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / page, docs / page)
        shutil.copytree(ROOT / "docs" / "figures", docs / "docs" / "figures")  # RESULTS.md shows them
        (docs / "index.md").write_text(home_page(executed))
        import nbformat

        for item in executed:
            nb = nbformat.read(item.path, as_version=4)
            for cell in nb.cells:
                if cell.cell_type == "markdown":
                    cell.source = link_for_site(cell.source)
            nbformat.write(nb, docs / "notebooks" / item.name)
        staging = Path(tmp) / "site"
        config = Path(tmp) / "mkdocs.yml"
        config.write_text(mkdocs_config(docs, staging, executed))
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "-f", str(config)],
                              cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"mkdocs build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staging, out)
    return out


def build(out: Path, extra_env: dict[str, str] | None = None) -> Path:
    """Execute every notebook (stop at the first error), then build the site into ``out``."""
    env = kernel_environment(extra_env)
    with tempfile.TemporaryDirectory(prefix="gac-executed-") as tmp:
        executed = [execute_notebook(path, Path(tmp), env) for path in notebooks()]
        return build_site(out, executed)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "site", help="the site's folder (default: site/)")
    args = parser.parse_args(argv)
    missing = [name for name in SITE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:  # before any notebook runs
        parser.error(f"{', '.join(missing)} not installed: pip install -e '.[site]' (make site does)")
    if args.out.resolve() in (ROOT, *ROOT.parents):
        parser.error(f"--out {args.out} would replace the checkout's files; give a folder of its own")
    if args.out.exists() and not (args.out / "index.html").exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} is a non-empty folder that is not a site; give an empty or new folder")
    try:
        site = build(args.out)
    except NotebookError as error:
        sys.exit(f"site not built: {error}")
    print(f"site: {site / 'index.html'}")


if __name__ == "__main__":
    main()
