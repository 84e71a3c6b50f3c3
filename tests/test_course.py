"""The course's exercises: every solution in course/solutions.py against a computation that shares none of its code
(a closed form of theory/, gac.control, torch.distributions, the package's own summary of the same runs), and the
notebooks' shape (objectives, prerequisites, time; >= 2 exercises, one of them predict-then-measure; each solution
cell calls a function tested here; links to the claims and the paper)."""

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

import gac
from course import solutions
from experiments import llm_figures
from theory.cosine import predicted_cosine
from theory.stability import stability_boundary_closed_form

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RUNS = ROOT / "docs" / "data" / "llm_figures_runs.csv"


# --- the solutions -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("staleness", [0, 1, 2, 4, 8, 16])
def test_measured_stability_boundary_is_the_closed_form_on_the_grid(staleness):
    # a grid that avoids the boundary values themselves (2, 1, ...), where decay and growth are both absent
    grid = np.arange(0.0025, 2.0, 0.005)
    measured = solutions.measured_stability_boundary(staleness, grid)
    exact = float(stability_boundary_closed_form(staleness))
    assert exact - 0.005 < measured < exact


@pytest.mark.parametrize("step", [0.5, 0.3, 0.1, 0.05])
def test_smallest_diverging_staleness_is_the_first_s_with_a_star_below_the_step(step):
    expected = next(s for s in range(100) if float(stability_boundary_closed_form(s)) < step)
    assert solutions.smallest_diverging_staleness(step) == expected


def test_delayed_iterate_follows_the_recursion():
    xs = solutions.delayed_iterate(0.3, 2, 5)
    assert xs[0] == 1.0 and xs[1] == pytest.approx(0.7) and xs[2] == pytest.approx(0.4)  # x_{t-2} = x_0 = 1
    assert xs[3] == pytest.approx(0.4 - 0.3 * 1.0)  # x_3 = x_2 - a x_0
    assert xs[4] == pytest.approx(xs[3] - 0.3 * xs[1])


def test_late_cosine_is_the_predicted_stationary_cosine_at_any_noise():
    # 50 directions, κ = 100, ηλ_max = 0.6 a*(4): theory's cosine does not depend on σ; 4 seeds × 700 steps measure
    # it to about ±0.01, far inside 0.03
    curvatures = np.geomspace(0.01, 1.0, 50)
    lr = 0.6 * float(stability_boundary_closed_form(4))
    predicted = predicted_cosine(lr, curvatures, 4)
    for noise in (0.1, 1.0):
        assert solutions.late_cosine(noise, staleness=4, dim=50) == pytest.approx(predicted, abs=0.03)


@pytest.mark.parametrize("step, staleness", [(0.1, 0), (0.1, 1), (0.1, 4), (1.0, 0), (0.3, 1)])
def test_one_direction_cosine_is_the_lyapunov_prediction(step, staleness):
    # 256 chains × 4000 steps: the ratio estimate's standard error is below 0.005 here
    assert solutions.one_direction_cosine(step, staleness) == pytest.approx(
        predicted_cosine(step, [1.0], staleness), abs=0.02)


def test_snr_law_solution_equals_minus_a_half_at_s0_and_bounds_the_cosine_for_s1():
    predicted, bound = solutions.snr_law(0.4, [1.0], 0)
    assert predicted == pytest.approx(-0.2) and bound == pytest.approx(0.2)  # cos = −a/2 = −SNR/(1+SNR)
    spectrum = np.geomspace(0.05, 1.0, 20)
    for staleness in (1, 4, 8):
        predicted, bound = solutions.snr_law(0.8 * float(stability_boundary_closed_form(staleness)), spectrum,
                                             staleness)
        assert predicted <= bound + 1e-12


def test_cap_parallel_scale_is_what_gac_control_applies():
    gen = torch.Generator().manual_seed(0)
    g, d = torch.randn(64, 20, generator=gen, dtype=torch.float64), torch.randn(64, 20, generator=gen,
                                                                            dtype=torch.float64)
    g = g + torch.linspace(-1.0, 3.0, 64, dtype=torch.float64)[:, None] * d  # cosines from about −0.7 to 0.95
    for threshold in (0.1, 0.3, 0.6):
        out = gac.control(g, d, gac.GACConfig(threshold=threshold, mode="cap"))
        cosines = gac.alignment(g, d)
        by_hand = torch.tensor([solutions.cap_parallel_scale(c.item(), threshold) for c in cosines],
                               dtype=torch.float64)
        assert (cosines > threshold).any() and (cosines <= threshold).any()
        torch.testing.assert_close(by_hand, out.parallel_scale.to(torch.float64), rtol=1e-6, atol=1e-9)


def test_gac_act_fraction_falls_with_the_threshold_and_is_higher_when_stale():
    # the same noise at every threshold: a higher threshold can only act on fewer steps (it acts where cos > τ)
    fractions = [solutions.gac_act_fraction(8, tau, steps=100, seeds=2, dim=40) for tau in (0.0, 0.3, 0.9, 0.999)]
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert fractions == sorted(fractions, reverse=True) and fractions[0] > fractions[-1]
    assert solutions.gac_act_fraction(0, 0.3, steps=100, seeds=2, dim=40) < fractions[1]


def test_bandit_cosine_grows_with_the_batch():
    # a larger batch, a larger signal share: at s = 8 over 4 seeds × 200 steps the cosine moves by far more than 0.1
    # between 1 and 16 groups (0.7 vs 0.9 when measured); the assertion only needs the direction with a margin
    small, large = (solutions.bandit_cosine(groups, 8, steps=200) for groups in (1, 16))
    assert large > small + 0.1


def test_softmax_kl_is_torch_distributions_kl():
    gen = torch.Generator().manual_seed(1)
    behaviour, current = torch.randn(5, 10, generator=gen), torch.randn(5, 10, generator=gen)
    expected = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=behaviour),
                                                 torch.distributions.Categorical(logits=current))
    torch.testing.assert_close(solutions.softmax_kl(behaviour, current), expected)
    assert torch.all(solutions.softmax_kl(behaviour, behaviour).abs() < 1e-6)


def test_paired_gap_is_the_packages_paired_summary():
    runs = pd.read_csv(RUNS)
    summary = llm_figures.paired_summary(runs).set_index("arm")
    for arm in ("naive s=2", "naive s=16", "gac gradient s=16", "gac update s=16"):
        mean, low, high = solutions.paired_gap(runs, arm)
        row = summary.loc[arm]
        assert (mean, low, high) == pytest.approx((row.minus_sync, row.minus_sync_low, row.minus_sync_high), abs=1e-12)


def test_paired_gap_pairs_by_warm_start_and_seed():
    runs = pd.DataFrame({"warm_seed": [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3], "seed": [0, 1] * 6,
                         "arm": (["sync"] * 2 + ["x"] * 2) * 3,
                         "final_accuracy": [0.1, 0.3, 0.2, 0.2, 0.5, 0.5, 0.4, 0.6, 0.0, 0.2, 0.3, 0.1]})
    # warm start 1: (0.2−0.1 + 0.2−0.3)/2 = 0; 2: (−0.1 + 0.1)/2 = 0; 3: (0.3 + −0.1)/2 = 0.1
    mean, low, high = solutions.paired_gap(runs, "x")
    half = 4.302652729911275 * math.sqrt(((0 - 1 / 30) ** 2 * 2 + (0.1 - 1 / 30) ** 2) / 2) / math.sqrt(3)
    assert (mean, low, high) == pytest.approx((1 / 30, 1 / 30 - half, 1 / 30 + half))


def test_cosine_by_staleness_is_the_arm_summary_of_sync_and_naive():
    runs = pd.read_csv(RUNS)
    table = solutions.cosine_by_staleness(runs)
    summary = llm_figures.paired_summary(runs).set_index("arm")
    assert list(table.index) == [0, 2, 4, 8, 16]
    for staleness in table.index:
        arm = "sync" if staleness == 0 else f"naive s={staleness}"
        assert table.loc[staleness, "cos_prev"] == pytest.approx(summary.loc[arm, "cos_prev"], abs=1e-12)
        assert table.loc[staleness, "cos_bound"] == pytest.approx(summary.loc[arm, "cos_bound"], abs=1e-12)


# --- the notebooks' shape ---------------------------------------------------------------------------------------------


def read_cells(path: Path) -> list[SimpleNamespace]:
    """The notebook's cells (``cell_type``, ``source``) from its JSON: importing nbformat builds a schema validator,
    which every test worker would pay at collection."""
    return [SimpleNamespace(cell_type=cell["cell_type"], source="".join(cell["source"]))
            for cell in json.loads(path.read_text())["cells"]]


def markdown(path: Path) -> list[str]:
    return [cell.source for cell in read_cells(path) if cell.cell_type == "markdown"]


def test_there_is_a_start_here_notebook_first():
    assert NOTEBOOKS[0].name.startswith("00_")
    text = "\n".join(markdown(NOTEBOOKS[0]))
    for figure in ("fig1_cosine", "fig3_divergence"):  # the paper's two figures
        assert f"../docs/figures/{figure}.png" in text
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
        assert (NOTEBOOKS[0].parent / image).resolve().exists(), image


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_opens_with_objectives_prerequisites_and_time(path):
    opening = "\n".join(markdown(path)[:2])
    for label in ("**You will learn**", "**Prerequisites:**", "**Time:**"):
        assert label in opening, (path.name, label)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_links_the_paper_and_the_claims_it_shows(path):
    text = "\n".join(markdown(path))
    assert "https://arxiv.org/abs/2603.01501" in text
    anchors = re.findall(r"\]\(\.\./RESULTS\.md(?:#([^)]*))?\)", text)
    assert anchors, path.name
    headings = re.findall(r"^#+ (.+)$", (ROOT / "RESULTS.md").read_text(), re.M)
    github = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    assert {a for a in anchors if a} <= github, path.name


def solution_sections() -> dict[str, str]:
    """course/solutions.md's sections by exercise number ('1.2' -> its text)."""
    text = (ROOT / "course" / "solutions.md").read_text()
    parts = re.split(r"^## Exercise (\d+\.\d+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_has_two_exercises_the_learner_solves_with_a_hidden_tested_solution(path):
    """Each exercise: a stub the learner fills in (it raises NotImplementedError), a check cell comparing it with the
    solution of the same name, a link to that exercise on the Solutions page, which shows the solution's code; no
    solution code in the notebook; each solution tested above."""
    cells = read_cells(path)
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and re.match(r"## Exercise", c.source)]
    assert len(starts) >= 2, path.name
    assert any("predict, then measure" in cells[i].source.lower() for i in starts), path.name
    sections = solution_sections()
    tests = Path(__file__).read_text().split("# --- the notebooks' shape")[0]
    for i in starts:
        number = re.match(r"## Exercise (\d+\.\d+)", cells[i].source)[1]
        stub, check, link = cells[i + 1], cells[i + 2], cells[i + 3]
        (name,) = re.findall(r"^def (\w+)\(", stub.source, re.M)
        assert "raise NotImplementedError" in stub.source, (path.name, number)
        assert re.match(rf"exercises\.check\({name}, solutions\.{name},", check.source), (path.name, number)
        assert f"(../course/solutions.md#exercise-{number.replace('.', '')})" in link.source, (path.name, number)
        assert f"<!-- solution: {name} -->" in sections[number], (path.name, number)
        assert re.search(rf"solutions\.{name}\(", tests), name
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert "solutions.show" not in code and "inspect.getsource" not in code  # no solution shown open


def test_every_solution_section_names_a_solution_function():
    from course.build import solutions_page

    sections = solution_sections()
    assert len(sections) == 12
    page = solutions_page((ROOT / "course" / "solutions.md").read_text())
    assert "<!-- solution:" not in page and page.count("```python") == 12
    with pytest.raises(ValueError, match="no_such_function"):
        solutions_page("<!-- solution: no_such_function -->")


def test_check_passes_the_solution_fails_a_wrong_answer_and_waits_for_a_stub(capsys):
    from course import exercises

    cases = [(0.3,), (0.5,)]
    assert exercises.check(solutions.smallest_diverging_staleness, solutions.smallest_diverging_staleness, cases)
    assert "All cases agree" in capsys.readouterr().out

    def off_by_one(a):
        return solutions.smallest_diverging_staleness(a) + 1

    assert exercises.check(off_by_one, solutions.smallest_diverging_staleness, cases) is False
    assert "✗ off_by_one(0.3): yours 6, expected 5" in capsys.readouterr().out

    def stub(a):
        raise NotImplementedError

    assert exercises.check(stub, solutions.smallest_diverging_staleness, cases) is None
    assert "Not done yet: fill in `stub`" in capsys.readouterr().out


def test_check_compares_tuples_tables_and_tensors_with_a_tolerance():
    from course import exercises

    assert exercises.close((0.1, 0.2), (0.1 + 1e-12, 0.2), 1e-6, 1e-9)
    assert not exercises.close((0.1, 0.2), (0.1, 0.25), 1e-6, 1e-9)
    table = pd.DataFrame({"cos_prev": [0.01, 0.02]}, index=[0, 16])
    assert exercises.close(table.copy(), table, 1e-6, 1e-9) and not exercises.close(table * 2, table, 1e-6, 1e-9)
    assert not exercises.close(table.iloc[:1], table, 1e-6, 1e-9)  # another shape
    assert exercises.close(torch.tensor([0.5, 1.0]), torch.tensor([0.5, 1.0]), 1e-6, 1e-9)
    assert exercises.close(0.42, 0.40, 0.0, 0.05) and not exercises.close(0.5, 0.40, 0.0, 0.05)
    assert exercises.close(None, None, 0.0, 0.0) and not exercises.close(5, None, 0.0, 0.0)
