"""Every teaching notebook executes top to bottom (stored without outputs; executed here once, with nbclient, by
the code ``make site`` uses) and the course site renders the executed copies."""

import html
import inspect
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_are_stored_without_outputs():
    import nbformat  # here, not at collection: its import builds a schema validator

    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has stored outputs"


@pytest.fixture(scope="module")
def execute(tmp_path_factory):
    """``execute(path)``: the notebook's executed copy, or the NotebookError that stopped it; each notebook executed
    once (as ``make site`` does, with the tiny LLM run), by its own test, so each test's time is its notebook's. The
    site test renders these copies. `make test` runs this file's tests in one worker (pytest-xdist, --dist loadfile)
    while the other worker runs other files."""
    from course.build import NotebookError, execute_notebook, kernel_environment

    out, env = tmp_path_factory.mktemp("executed"), kernel_environment({"GAC_LAB_NOTEBOOK_TEST": "1"})
    done = {}

    def execute(path: Path):
        if path.name not in done:
            try:
                done[path.name] = execute_notebook(path, out, env, timeout=300)
            except NotebookError as error:
                done[path.name] = error
        return done[path.name]

    return execute


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, execute):
    import nbformat

    result = execute(path)
    assert not isinstance(result, Exception), str(result)
    cells = [cell for cell in nbformat.read(result.path, as_version=4).cells if cell.cell_type == "code"]
    outputs = [out for cell in cells for out in cell.outputs]
    assert outputs and not [out for out in outputs if out.get("output_type") == "error"]
    for cell in cells:  # every figure shown at a cell's top level is stored in the executed copy (the site shows it)
        if re.search(r"^plt\.show\(\)", cell.source, re.M):
            assert any("image/png" in out.get("data", {}) for out in cell.outputs), cell.source[:200]
    if any("plt.show()" in cell.source for cell in cells):  # figures drawn inside a function count too
        assert any("image/png" in out.get("data", {}) for out in outputs), path.name


@pytest.fixture(scope="module")
def site(execute, tmp_path_factory):
    """The course site built once from the executed notebooks (MkDocs --strict, then every link checked)."""
    from course.build import build_site

    executed = [execute(path) for path in NOTEBOOKS]
    if any(isinstance(result, Exception) for result in executed):
        pytest.skip("a notebook failed (test_notebook_runs says which): no site")
    return build_site(tmp_path_factory.mktemp("site") / "site", executed)


def test_the_site_renders_the_executed_notebooks_and_the_results(site):
    import nbformat

    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert {"index.html", "RESULTS.html", "course/solutions.html"} | {f"notebooks/{p.stem}.html" for p in NOTEBOOKS} \
        <= pages
    results_html = (site / "RESULTS.html").read_text()
    for path in NOTEBOOKS:
        page = (site / "notebooks" / f"{path.stem}.html").read_text()
        assert "Exercise" in page and "NotImplementedError" in page and "Not done yet" in page
        anchors = re.findall(r'href="\.\./RESULTS\.html#([^"]+)"', page)  # the claims' links resolve on the site
        assert anchors and all(f'id="{anchor}"' in results_html for anchor in anchors), (path.name, anchors)
        assert ".ipynb" not in "".join(re.findall(r'<a href="([^"]+)"', page)), path.name  # notebooks link pages
        for image in re.findall(r'<img[^>]+src="(\.\./[^"]+)"', page):
            assert (site / "notebooks" / image).resolve().exists(), (path.name, image)
    home = (site / "index.html").read_text()
    assert "The paper&#39;s claims, here" in home or "The paper's claims, here" in home
    for path in NOTEBOOKS:  # the start-here path lists every notebook by its title, with its time
        title = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0].lstrip("# ")
        assert f'href="notebooks/{path.stem}.html">{html.escape(title, quote=False)}</a> — ' in home, title


def test_the_site_ships_mathjax_search_a_version_and_two_navigations(site):
    from course import solutions
    from course.build import COURSE_PAGES, DEVELOPER_PAGES, MATHJAX, version

    for page in ("notebooks/02_theory.html", "course/solutions.html", "index.html"):
        text = (site / page).read_text()
        scripts = re.findall(r'<script src="([^"]*loader\.js)"', text)
        assert scripts and all((site / page).parent.joinpath(s).resolve() == site / MATHJAX / "loader.js"
                                for s in scripts), page  # the math script is on disk, no CDN
        remote = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="((?:https?:)?//[^"]+)"', text)
        assert 'src=""' not in text and not remote, (page, remote)  # nothing fetched from elsewhere on viewing
    for part in ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff"):
        assert (site / MATHJAX / part).stat().st_size > 1000, part
    assert (site / "search" / "search_index.json").stat().st_size > 10_000  # the search plugin's index
    home = (site / "index.html").read_text()
    assert f"Version {version()}" in home and version() != "unknown"
    tabs = re.findall(r'<a href="([^"]+)" class="md-tabs__link">\s*(\w+)\s*</a>', home)
    assert tabs == [("index.html", "Course"), ("CHANGELOG.html", "Developers")], tabs  # two navigations
    assert list(DEVELOPER_PAGES)[0] == "Changelog" and "Results" in COURSE_PAGES and "Changelog" not in COURSE_PAGES
    solutions_text = html.unescape(re.sub(r"<[^>]+>", "", (site / "course" / "solutions.html").read_text()))
    for name in ("measured_stability_boundary", "softmax_kl", "cosine_by_staleness"):  # each solution's own code
        assert f"def {name}(" in solutions_text, name
        assert inspect.getsource(getattr(solutions, name)).splitlines()[-1].strip() in solutions_text, name


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium here (apt-get install chromium)")
def test_a_formula_renders_in_a_headless_browser(site):
    """The theory notebook's formulas, typeset by the site's own MathJax in a real browser without network: every
    $...$ becomes a MathJax element and none is left as raw TeX outside code."""
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000",
                          "--dump-dom", (site / "notebooks" / "02_theory.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<mjx-container") >= 20
    text = re.sub(r"<[^>]+>", "", re.sub(r"<(pre|code|script|style|mjx-container)[\s\S]*?</\1>", "", dom))
    assert not re.search(r"\$[^$\s]", text), "raw TeX left on the page"


def test_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    from course.build import broken_links

    (tmp_path / "a.html").write_text('<h1 id="top">x</h1><a href="b.html">b</a><a href="a.html#top">ok</a>'
                                     '<a href="a.html#nowhere">no</a><a href="https://example.org/x">web</a>')
    assert broken_links(tmp_path) == ["a.html: b.html", "a.html: a.html#nowhere"]


def test_a_notebook_error_stops_the_build_and_names_the_notebook(tmp_path):
    import nbformat

    from course.build import NotebookError, execute_notebook, kernel_environment

    broken = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('fine')"),
                                             nbformat.v4.new_code_cell("1 / 0")])
    path = tmp_path / "broken.ipynb"
    nbformat.write(broken, path)
    with pytest.raises(NotebookError, match=r"^broken\.ipynb failed \(cell 1\): ZeroDivisionError: division by zero$"):
        execute_notebook(path, tmp_path / "out", kernel_environment(), timeout=120)
    assert not (tmp_path / "out" / "broken.ipynb").exists()


def paired_cells(notebook) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def out_of_step(path: Path) -> bool:
    """Whether the notebook at ``path`` and its py:percent script (notebooks/jupytext.toml) hold other cells."""
    import jupytext

    script = jupytext.reads(path.with_suffix(".py").read_text(), fmt="py:percent")
    return paired_cells(jupytext.read(path)) != paired_cells(script)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_is_in_step_with_its_reviewable_script(path):
    assert path.with_suffix(".py").exists(), f"{path.name} has no paired script: jupytext --sync {path}"
    assert not out_of_step(path), f"{path.name} and its .py differ: run jupytext --sync notebooks/*.ipynb"


def test_links_to_the_checkouts_pages_and_notebooks_become_the_sites_pages():
    from course.build import link_for_site

    text = ("[a](../RESULTS.md#verdict) [b](../RESULTS.md) [c](01_x.ipynb) [d](https://arxiv.org/abs/2603.01501) "
            "![e](../docs/figures/fig1_cosine.png)")
    assert link_for_site(text) == ("[a](../RESULTS.html#verdict) [b](../RESULTS.html) [c](01_x.html) "
                                   "[d](https://arxiv.org/abs/2603.01501) ![e](../docs/figures/fig1_cosine.png)")


@pytest.mark.parametrize("out", [".", ".."])
def test_make_site_refuses_to_replace_the_checkout(out, monkeypatch, capsys):
    from course import build

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(build, "build", lambda *a, **k: pytest.fail("the build started"))
    with pytest.raises(SystemExit):
        build.main(["--out", out])
    assert "would replace the checkout" in capsys.readouterr().err


def test_make_site_refuses_a_folder_that_is_not_a_site(tmp_path, monkeypatch, capsys):
    from course import build

    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.setattr(build, "build", lambda *a, **k: pytest.fail("the build started"))
    with pytest.raises(SystemExit):
        build.main(["--out", str(tmp_path)])
    assert "not a site" in capsys.readouterr().err and (tmp_path / "notes.txt").read_text() == "mine"


def test_make_site_says_what_to_install_before_any_notebook_runs(tmp_path, monkeypatch, capsys):
    from course import build

    monkeypatch.setattr(build, "SITE_PACKAGES", ("mkdocs", "no_such_site_package"))
    monkeypatch.setattr(build, "build", lambda *a, **k: pytest.fail("the build started"))
    with pytest.raises(SystemExit):
        build.main(["--out", str(tmp_path / "site")])
    assert "no_such_site_package not installed" in capsys.readouterr().err
