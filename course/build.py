"""Build the course site: execute every teaching notebook (a cell error stops the build, naming the notebook and the
cell), then render the executed notebooks, a home page (the start-here path and the README's findings) and
RESULTS.md with MkDocs + mkdocs-jupyter into a static HTML folder. ``make site`` = ``python -m course.build``.

MkDocs renders; it does not execute (mkdocs-jupyter's ``execute: false``): the notebooks are executed here with
nbclient, the same code the test suite uses, so CI executes each notebook once and renders what it executed.
The site works offline: MathJax comes from a package the site extra installs (django-static-mathjax) and is copied
into the site, the search index is MkDocs' own, and every relative link of every page is checked after the build.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PAPER = "https://arxiv.org/abs/2603.01501"
COURSE_PAGES = {"Solutions": "course/solutions.md", "Results": "RESULTS.md", "Theory": "theory/README.md",
                "Using the library": "docs/usage.md"}
DEVELOPER_PAGES = {"Changelog": "CHANGELOG.md", "Reliability": "RELIABILITY.md", "Benchmarks": "benchmarks/README.md",
                   "Figures": "paper_figs/README.md"}
"""Markdown pages of the checkout the site carries, at the same relative paths, in two navigations: the course's
and the developers'."""
EXTRA_PAGES = (*COURSE_PAGES.values(), *DEVELOPER_PAGES.values())
FINDINGS = "## The paper's claims, here"
SITE_PACKAGES = ("mkdocs", "mkdocs_jupyter", "material", "mathjax")
"""The site extra's modules (mkdocs, mkdocs-jupyter, mkdocs-material, django-static-mathjax), checked before any
notebook runs."""
MATHJAX = "assets/mathjax"
"""Where the site carries MathJax (its TeX input, HTML output and fonts) and the loader that configures it."""
MATHJAX_PARTS = ("tex-mml-chtml.js", "input/tex", "output/chtml", "output/chtml.js", "ui", "a11y")
"""The parts of MathJax's es5 folder the pages load: the combined TeX component, the extensions it may autoload, the
HTML output's fonts, the menu and the accessibility components the menu loads."""
MATHJAX_LOADER = r"""// Configure MathJax 3 for the course's pages ($...$ inline, $$...$$ display, as in the notebooks)
// and load it from beside this file. A page that includes the loader twice (a notebook page: the theme
// and mkdocs-jupyter) loads it once.
if (!window.gacMathJaxLoading) {
  window.gacMathJaxLoading = true;
  window.MathJax = {
    tex: {inlineMath: [["$", "$"], ["\(", "\)"]], displayMath: [["$$", "$$"], ["\[", "\]"]],
          processEscapes: true, processEnvironments: true},
    options: {ignoreHtmlClass: "tex2jax_ignore", processHtmlClass: "tex2jax_process|arithmatex"}
  };
  var script = document.createElement("script");
  script.src = new URL("tex-mml-chtml.js", document.currentScript.src).href;
  script.async = true;
  document.head.appendChild(script);
}
"""
SITE_CSS = """/* Wide code, outputs and tables scroll sideways instead of being cut off or wrapping mid-row. */
.md-grid { max-width: 1600px; }
.md-typeset pre, .jp-OutputArea-output pre, .jp-RenderedText pre { overflow-x: auto; white-space: pre; }
.md-typeset table:not([class]) { display: block; overflow-x: auto; }
.jp-RenderedHTMLCommon table { display: block; overflow-x: auto; }
.jp-OutputArea-output { overflow-x: auto; }
"""
SOLUTION = re.compile(r"^<!-- solution: (\w+) -->$", re.M)


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


def findings_section(readme: str, link_prefix: str = "") -> str:
    """The README's findings section (its heading up to the next level-2 heading), its relative links prefixed with
    ``link_prefix`` (``"../"`` where it is shown from notebooks/)."""
    start = readme.index(FINDINGS)
    end = readme.find("\n## ", start + len(FINDINGS))
    section = readme[start:end if end >= 0 else None].strip() + "\n"
    return re.sub(r"\]\((?![a-z]+:|#)([^)\s]+)\)", lambda m: f"]({link_prefix}{m[1]})", section)


def version() -> str:
    """The package's version, from pyproject.toml (the site's version label)."""
    found = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    return found[1] if found else "unknown"


def solutions_page(text: str) -> str:
    """course/solutions.md with each ``<!-- solution: NAME -->`` replaced by the source of ``course.solutions.NAME``
    (an unknown name is an error)."""
    import inspect

    from course import solutions

    def source(match: re.Match) -> str:
        function = getattr(solutions, match[1], None)
        if not inspect.isfunction(function):
            raise ValueError(f"course/solutions.md names no function of course/solutions.py: {match[1]}")
        return f"```python\n{inspect.getsource(function).rstrip()}\n```"

    return SOLUTION.sub(source, text)


def copy_mathjax(target: Path) -> None:
    """MathJax's parts (``MATHJAX_PARTS``) from the installed django-static-mathjax, and the loader, into ``target``."""
    import mathjax

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    for part in MATHJAX_PARTS:
        source, destination = es5 / part, target / part
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination)
        else:
            shutil.copy(source, destination)
    (target / "loader.js").write_text(MATHJAX_LOADER)


def notebook_title_and_time(path: Path) -> tuple[str, str]:
    """The first heading of a notebook and its 'Time:' sentence (for the home page's path through the course)."""
    import nbformat

    first = nbformat.read(path, as_version=4).cells[0].source
    title = re.search(r"^#\s+(.+)$", first, re.M)
    time = re.search(r"\*\*Time:\*\*\s*([^.;(]+)", first)
    return (title[1].strip() if title else path.stem), (" ".join(time[1].split()) if time else "")


def home_page(executed: list[Executed]) -> str:
    lines = ["# Gradient Alignment Control: a course", "", f"*Version {version()}.*", "",
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
              "exercises: you fill in a function and a check cell compares it with the solution. The solutions and "
              "their discussion: [Solutions](course/solutions.md).", "",
              "Every number with its setting and interval: [Results](RESULTS.md).", "",
              findings_section((ROOT / "README.md").read_text())]
    return "\n".join(lines)


def link_for_site(source: str) -> str:
    """A notebook's markdown links to the checkout's .md files (../RESULTS.md#anchor) and to other notebooks
    (01_x.ipynb) as the site's pages (../RESULTS.html#anchor, 01_x.html): mkdocs rewrites links in markdown pages,
    not in the HTML a notebook becomes. Web links stay as they are."""
    source = re.sub(r"\]\((\.\./[^)#\s:]+)\.md(#[^)\s]*)?\)", lambda m: f"]({page_html(m[1])}{m[2] or ''})", source)
    return re.sub(r"\]\(([^)#\s/:]+)\.ipynb(#[^)\s]*)?\)", lambda m: f"]({m[1]}.html{m[2] or ''})", source)


def page_html(path: str) -> str:
    """A markdown page's HTML path on the site: X.md -> X.html, except a folder's README.md, which MkDocs makes the
    folder's index.html (``path`` without the .md suffix)."""
    return (path[: -len("README")] + "index.html") if path.endswith("/README") else path + ".html"


def mkdocs_config(docs_dir: Path, site_dir: Path, executed: list[Executed]) -> str:
    course = ["      - Start: index.md"] + [f"      - 'notebooks/{item.name}'" for item in executed]
    course += [f"      - {title}: {page}" for title, page in COURSE_PAGES.items()]
    developers = [f"      - {title}: {page}" for title, page in DEVELOPER_PAGES.items()]
    return "\n".join([
        f"site_name: gac-lab course {version()}",
        f"docs_dir: '{docs_dir}'",
        f"site_dir: '{site_dir}'",
        "use_directory_urls: false",  # pages are NAME.html: the notebooks' rewritten links point at them
        "theme:",
        "  name: material",
        "  features: [navigation.tabs, navigation.sections]",  # course and developer pages: two tabs
        "  font: false",  # the system's fonts: nothing fetched from a font CDN when a page is viewed
        "extra_css: [assets/course.css]",
        f"extra_javascript: [{MATHJAX}/loader.js]",
        "validation:",  # with --strict a broken link or anchor in a markdown page fails the build
        "  links: {not_found: warn, anchors: warn, unrecognized_links: warn}",
        "markdown_extensions:",
        "  - tables",
        "  - pymdownx.arithmatex: {generic: true}",  # $...$ in markdown pages (Solutions) reaches MathJax intact
        "  - toc:",
        "      permalink: true",
        # GitHub's heading anchors, so that a link like RESULTS.md#verdict works on GitHub and on the site alike
        "      slugify: !!python/object/apply:pymdownx.slugs.slugify {kwds: {case: lower}}",
        "plugins:",
        "  - search",
        "  - mkdocs-jupyter:",
        "      include: ['*.ipynb']",
        "      execute: false",  # executed above, with nbclient: each notebook runs once per build
        "      cache: false",  # mkdocs-jupyter's cache would write into the current folder
        f"      custom_mathjax_url: '../{MATHJAX}/loader.js'",  # every notebook page lies in notebooks/
        "nav:",
        "  - Course:",
        *course,
        "  - Developers:",
        *developers,
        "",
    ])


def broken_links(site: Path) -> list[str]:
    """Every relative link of every page of ``site`` (href and src) whose file, or whose #anchor in that file, does
    not exist, as 'page: link'."""
    ids: dict[Path, set[str]] = {}

    def anchors(page: Path) -> set[str]:
        if page not in ids:
            ids[page] = set(re.findall(r'\bid="([^"]+)"', page.read_text(errors="replace")))
        return ids[page]

    broken = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(errors="replace")
        for link in re.findall(r'(?:href|src)="([^"]*)"', text):
            if not link or re.match(r"[a-z][a-z0-9+.-]*:|//", link, re.I):  # web, mailto, data: links
                continue
            path, _, anchor = html.unescape(link).partition("#")
            path = path.split("?")[0]
            base = site if path.startswith("/") else page.parent  # 404.html links from the site's root
            target = (base / path.lstrip("/")).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists() or (anchor and target.suffix == ".html" and anchor not in anchors(target)):
                broken.append(f"{page.relative_to(site)}: {link}")
    return broken


def build_site(out: Path, executed: list[Executed]) -> Path:
    """Render ``executed`` notebooks and the pages into the static site ``out`` (replaced only once it is built)."""
    out = out.resolve()
    with tempfile.TemporaryDirectory(prefix="gac-course-") as tmp:
        docs = Path(tmp) / "docs"
        (docs / "notebooks").mkdir(parents=True)
        for page in EXTRA_PAGES:
            (docs / page).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / page, docs / page)
        (docs / "course" / "solutions.md").write_text(solutions_page((ROOT / "course" / "solutions.md").read_text()))
        shutil.copytree(ROOT / "docs" / "figures", docs / "docs" / "figures")  # RESULTS.md shows them
        copy_mathjax(docs / MATHJAX)
        (docs / "assets" / "course.css").write_text(SITE_CSS)
        (docs / "index.md").write_text(home_page(executed))
        import nbformat

        for item in executed:
            nb = nbformat.read(item.path, as_version=4)
            for cell in nb.cells:
                if cell.cell_type == "markdown":
                    cell.source = link_for_site(cell.source)
                for output in cell.get("outputs", []):  # markdown a cell displays (notebook 0 shows the README's)
                    if "text/markdown" in output.get("data", {}):
                        output["data"]["text/markdown"] = link_for_site(output["data"]["text/markdown"])
            nbformat.write(nb, docs / "notebooks" / item.name)
        staging = Path(tmp) / "site"
        config = Path(tmp) / "mkdocs.yml"
        config.write_text(mkdocs_config(docs, staging, executed))
        done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(config)],
                              cwd=tmp, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"mkdocs build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        broken = broken_links(staging)
        if broken:
            raise RuntimeError(f"{len(broken)} broken links in the site:\n" + "\n".join(broken[:40]))
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staging, out)
    return out


def build(out: Path, extra_env: dict[str, str] | None = None) -> Path:
    """Execute every notebook (stop at the first error), then build the site into ``out``."""
    env = kernel_environment(extra_env)
    paths = notebooks()
    with tempfile.TemporaryDirectory(prefix="gac-executed-") as tmp:
        executed = []
        for number, path in enumerate(paths, 1):
            print(f"[site] executing {path.name} ({number}/{len(paths)}) ...", flush=True)
            start = time.monotonic()
            executed.append(execute_notebook(path, Path(tmp), env))
            print(f"[site] {path.name} done in {time.monotonic() - start:.0f} s", flush=True)
        print("[site] rendering the pages with MkDocs and checking every link ...", flush=True)
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
