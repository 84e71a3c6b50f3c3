"""The staleness × step-size law (experiments.staleness_lr): the boundary search on predicates with a known answer,
on the deterministic delayed quadratic where a*(s) is exact, the exponent fit, and the command's checks."""

import math

import numpy as np
import pytest

from experiments import staleness_lr as law
from sim.quadratic import QuadraticProblem
from theory.stability import stability_boundary

DETERMINISTIC = QuadraticProblem(dim=1, condition_number=1.0, curvature_max=1.0, noise=0.0)
"""x_{t+1} = x_t − η x_{t−s}: delayed GD on one direction, λ = 1, stable iff η < a*(s)."""
DETERMINISTIC_STEPS = 300
TOLERANCE = 0.03
"""Largest relative distance allowed between the searched boundary and a*(s): the run's transient makes the criterion
err just below a*, by far less than this; the wrong formulas of ``WRONG`` miss by ≥ 4.7 % somewhere."""


def fake_evaluator(truth: np.ndarray, hole: tuple[int, int, float, float] | None = None):
    """Stable iff lr ≤ truth[cell, seed]; ``hole`` (cell, seed, lo, hi) makes that seed unstable on (lo, hi) too."""
    calls = []

    def evaluate(pairs):
        calls.append(len(pairs))
        out = np.array([[lr <= truth[c, k] for k in range(truth.shape[1])] for c, lr in pairs])
        if hole is not None:
            for i, (c, lr) in enumerate(pairs):
                if c == hole[0] and hole[2] < lr < hole[3]:
                    out[i, hole[1]] = False
        return out
    return evaluate, calls


def test_search_brackets_each_seeds_known_boundary_to_the_bisection_resolution():
    truth = np.array([[0.3, 0.31, 0.5], [2.2, 0.05, 1.0]])
    evaluate, calls = fake_evaluator(truth)
    found = law.search_boundaries(evaluate, 2, 3, 0.01, 4.0, grid_points=9, refinements=3, refine_points=8)
    assert np.all(found.low <= truth) and np.all(truth < found.high)
    grid_ratio = (4.0 / 0.01) ** (1 / 8)
    assert np.all(found.high / found.low <= grid_ratio ** (1 / 9**3) * (1 + 1e-9))  # each zoom: 8 points, 9 parts
    assert np.allclose(found.boundary, truth, rtol=grid_ratio ** (1 / 9**3) - 1)
    assert not (found.censored_low.any() or found.censored_high.any() or found.nonmonotone.any())
    assert calls[0] == 2 * 9 and len(calls) == 4  # one grid call, then one call per zoom
    assert calls[1] == 8 * 5  # 8 points per distinct bracket: 0.3 and 0.31 share one grid bracket, 5 brackets


def test_search_marks_censored_and_nonmonotone_seeds_instead_of_clipping_them():
    truth = np.array([[0.001, 9.0, 1.0]])
    evaluate, _ = fake_evaluator(truth, hole=(0, 2, 0.02, 0.1))  # seed 2 also unstable at small steps (GAC's case)
    found = law.search_boundaries(evaluate, 1, 3, 0.01, 4.0, grid_points=12, refinements=2)
    assert found.censored_low.tolist() == [[True, False, False]] and found.boundary[0, 0] == 0.01
    assert found.censored_high.tolist() == [[False, True, False]] and found.boundary[0, 1] == 4.0
    assert found.nonmonotone.tolist() == [[False, False, True]]
    assert found.low[0, 2] <= 1.0 < found.high[0, 2] < 1.02  # the largest stable step is still found above the hole


def test_search_refuses_a_bad_range_before_evaluating_anything():
    evaluate, calls = fake_evaluator(np.ones((1, 1)))
    for low, high in ((0.0, 1.0), (2.0, 1.0)):
        with pytest.raises(ValueError, match="0 < low < high"):
            law.search_boundaries(evaluate, 1, 1, low, high, 8, 2)
    with pytest.raises(ValueError, match="refine_points >= 1"):
        law.search_boundaries(evaluate, 1, 1, 0.1, 1.0, 8, 2, refine_points=0)
    assert calls == []


def test_descent_finds_the_grids_boundaries_one_run_per_open_walk_per_call():
    """From the top down, each (cell, seed) alone: the same brackets as the grid search with one point per zoom (an
    independent computation of the same boundary), censoring at both ends, and far fewer runs than the grid."""
    truth = np.array([[0.3, 0.31, 0.001], [2.2, 0.05, 9.0]])
    calls = []

    def evaluate(triples):
        calls.append(sorted((c, k) for c, k, _ in triples))
        return [lr <= truth[c, k] for c, k, lr in triples]

    found = law.descend_boundaries(evaluate, 2, 3, 0.01, 4.0, grid_points=9, refinements=2)
    grid_evaluate, grid_calls = fake_evaluator(truth)
    grid = law.search_boundaries(grid_evaluate, 2, 3, 0.01, 4.0, grid_points=9, refinements=2, refine_points=1)
    for name in ("low", "high", "boundary"):  # the zoom's midpoint: a square root here, geomspace's there
        np.testing.assert_allclose(getattr(found, name), getattr(grid, name), rtol=1e-12, err_msg=name)
    np.testing.assert_array_equal(found.censored_low | found.censored_high, grid.censored_low | grid.censored_high)
    assert found.censored_low.tolist() == [[False, False, True], [False, False, False]]
    assert found.censored_high.tolist() == [[False, False, False], [False, False, True]]
    assert all(len(set(call)) == len(call) for call in calls)  # a walk's next run, once per call
    assert sum(map(len, calls)) < sum(grid_calls) * 3
    # two points beyond the top: the walk stable at 4.0 climbs to its bracket at 8.4–17.8, as the grid over the
    # wider range finds it; the others walk as before
    climbed = law.descend_boundaries(evaluate, 2, 3, 0.01, 4.0, grid_points=9, refinements=2, above=2)
    top = law.walk_grid(0.01, 4.0, 9, 2)[-1]
    wide_evaluate, _ = fake_evaluator(truth)
    wide = law.search_boundaries(wide_evaluate, 2, 3, 0.01, top, grid_points=11, refinements=2, refine_points=1)
    for name in ("low", "high", "boundary"):
        np.testing.assert_allclose(getattr(climbed, name), getattr(wide, name), rtol=1e-9, err_msg=name)
    assert not climbed.censored_high.any() and climbed.low[1, 2] <= 9.0 < climbed.high[1, 2]


def test_fewer_zooms_ask_for_a_subset_of_a_longer_searchs_runs_and_keep_the_truth_bracketed():
    """``--refinements`` below the profile's reads a longer search's runs from the cache: every run it asks for was
    asked for by the longer search, and each bracket (one zoom: half the grid ratio in log) still holds the truth."""
    truth = np.array([[0.3, 0.31, 0.07], [2.2, 0.05, 0.9]])

    def evaluate_into(store):
        def evaluate(triples):
            store.update((c, k, lr) for c, k, lr in triples)
            return [lr <= truth[c, k] for c, k, lr in triples]
        return evaluate

    longer, shorter = set(), set()
    law.descend_boundaries(evaluate_into(longer), 2, 3, 0.01, 4.0, grid_points=9, refinements=2)
    one = law.descend_boundaries(evaluate_into(shorter), 2, 3, 0.01, 4.0, grid_points=9, refinements=1)
    assert shorter < longer
    ratio = law.walk_grid(0.01, 4.0, 9, 0)[1] / 0.01
    np.testing.assert_allclose(one.high / one.low, np.sqrt(ratio), rtol=1e-9)
    assert ((one.low <= truth) & (truth < one.high)).all()


def test_descent_refuses_a_bad_range_before_evaluating_anything():
    with pytest.raises(ValueError, match="0 < low < high"):
        law.descend_boundaries(lambda t: pytest.fail("evaluated"), 1, 1, 2.0, 1.0, 8, 2)


@pytest.fixture(scope="module")
def delayed_gd_boundaries() -> np.ndarray:
    """The search through the real simulator on the deterministic delayed quadratic, naive at every STALENESS."""
    cells = [("naive", s) for s in law.STALENESS]
    evaluate = law.quadratic_evaluator(DETERMINISTIC, DETERMINISTIC_STEPS, 1, cells)
    found = law.search_boundaries(evaluate, len(cells), 1, 0.02, 3.0, grid_points=8, refinements=2, refine_points=8)
    assert not (found.censored_low.any() or found.censored_high.any() or found.nonmonotone.any())
    return found.boundary[:, 0]


def worst_relative_error(found: np.ndarray) -> float:
    theory = law.theory_step("naive", law.STALENESS) / DETERMINISTIC.curvature_max
    return float(np.max(np.abs(found / theory - 1)))


def test_search_finds_delayed_gd_boundary_a_star_on_the_deterministic_quadratic(delayed_gd_boundaries):
    assert worst_relative_error(delayed_gd_boundaries) < TOLERANCE
    roots = np.array([stability_boundary(s) for s in law.STALENESS])  # independent of the closed form: the roots
    assert np.max(np.abs(delayed_gd_boundaries / roots - 1)) < TOLERANCE


WRONG = {"asymptotic pi/(2s+1)": lambda s: np.pi / (2 * np.asarray(s, dtype=float) + 1),
         "2s+2 for 2s+1": lambda s: 2 * np.sin(np.pi / (2 * (2 * np.asarray(s, dtype=float) + 2))),
         "1/s law": lambda s: 1 / np.asarray(s, dtype=float)}


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_boundary_formula_patched_in_fails_the_comparison(delayed_gd_boundaries, monkeypatch, name):
    monkeypatch.setattr(law, "stability_boundary_closed_form", WRONG[name])
    assert worst_relative_error(delayed_gd_boundaries) > TOLERANCE


def test_exponent_fit_recovers_a_power_law_and_theorys_exponent_over_one_to_sixteen():
    s = np.array(law.STALENESS, dtype=float)
    assert law.fit_exponent(s, 3.0 * s**-0.7) == pytest.approx(0.7)
    theory = law.fit_exponent(s, law.theory_step("naive", s))
    assert 0.8 < theory < 1.0  # a*(1) = 1 but a*(s) → π/(2s): the finite range bends the fit below 1
    assert law.fit_exponent(s, np.pi / (2 * s)) == pytest.approx(1.0)
    assert law.fit_exponent(s, law.theory_step("gac", s)) < 0.1  # mean-field GAC: 1/cos(π/(2s+3)) → 1


def test_quorum_and_bootstrap_interval_over_seeds():
    assert law.stable_quorum(np.array([4.0, 1.0, 3.0, 2.0])) == 3.0  # stable on ≥ 2 of 4 seeds
    assert law.stable_quorum(np.array([5.0, 1.0, 3.0])) == 3.0  # ≥ 2 of 3
    rng = np.random.default_rng(1)
    s = np.array(law.STALENESS, dtype=float)
    boundaries = (2.0 * s**-0.9)[:, None] * np.exp(0.05 * rng.standard_normal((len(s), 8)))
    low, high = law.bootstrap_exponent(s, boundaries, resamples=500)
    assert low < law.fit_exponent(s, law.stable_quorum(boundaries)) < high
    assert 0.8 < low < high < 1.0
    flat = np.tile((2.0 * s**-0.9)[:, None], (1, 8))  # no spread over seeds: no width
    assert law.bootstrap_exponent(s, flat, resamples=50) == pytest.approx((0.9, 0.9))


def test_criteria_judge_a_run_by_divergence_and_by_progress():
    gap, diverged = np.array([0.1, 0.6, 0.1, math.nan]), np.array([False, False, True, False])
    assert law.stability_of(gap, 1.0, diverged, "progress").tolist() == [True, False, False, False]
    assert law.stability_of(gap, 1.0, diverged, "finite").tolist() == [True, True, False, True]
    with pytest.raises(ValueError, match="unknown criterion"):
        law.stability_of(gap, 1.0, diverged, "bounded")


def test_smoke_tables_have_every_cell_and_the_documented_columns():
    tables = law.law_tables("smoke", scales=("quadratic", "bandit_gaussian"), criteria=("progress",))
    assert [tuple(r) for r in tables["table"]] == [law.COLUMNS] * len(tables["table"])
    cells = {(r["scale"], r["method"], r["staleness"]) for r in tables["table"]}
    assert cells == {(sc, m, s) for sc in ("quadratic", "bandit_gaussian") for m in law.METHODS for s in law.STALENESS}
    assert all(r["lr_all_seeds"] <= r["max_stable_lr"] <= r["lr_any_seed"] for r in tables["table"])
    quad = [r for r in tables["table"] if r["scale"] == "quadratic" and r["method"] == "naive"]
    assert [r["theory_lr"] for r in quad] == pytest.approx(law.stability_boundary_closed_form(law.STALENESS))
    assert all(math.isnan(r["theory_lr"]) for r in tables["table"] if r["scale"] == "bandit_gaussian")
    assert [(r["scale"], r["method"]) for r in tables["fit"]] == [(sc, m) for sc in ("quadratic", "bandit_gaussian")
                                                                 for m in law.METHODS]


@pytest.mark.parametrize("scale", law.LLM_SCALES)
def test_llm_scale_smoke_on_the_tiny_model(tiny_checkpoint, tmp_path, monkeypatch, scale):
    """An LLM scale's search runs real trainer runs (tiny model, 3 steps), one per (cell, step size, warm start) it
    visits, and yields a row per cell with the table's columns and no closed-form theory."""
    import runtime.cache

    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(law, "LLM_BASE", dict(size="tiny", model=str(tiny_checkpoint), digits=1, prompts_per_step=4,
                                              group_size=4, eval_problems=8, warm_ceiling=1.0, micro_batch=16))
    monkeypatch.setitem(law.SEARCH_RANGE, scale, (1e-3, 1.0))
    found = law.search_scale(scale, "smoke", "progress")
    rows = law.table_rows(found)
    assert {(r["method"], r["staleness"]) for r in rows} == set(law.cells()) and found["seeds"] == 1
    assert all(math.isnan(r["theory_lr"]) and r["steps"] == 3 for r in rows)
    assert all(1e-3 <= r["max_stable_lr"] <= 1.0 for r in rows)
    runs = list((tmp_path / "cache").glob("llm_grpo-*.json"))
    # the grid: every cell at its 3 step sizes on the one warm start; the descent: at least its top one
    assert len(runs) >= len(law.cells()) * (1 if scale in law.DESCEND else 3)
    # the CSV says how an LLM run was judged (accuracy against its best), not the toys' objective-gap rule
    judged = ("no held-out evaluation fell below 0.5 x the best" if scale in law.DESCEND
              else "held-out accuracy is >= 0.5 x the best")
    assert all(judged in r["criterion_rule"] and "gap" not in r["criterion_rule"] for r in rows)


def test_the_high_snr_scale_runs_the_high_snr_configuration_with_the_uncorrected_ratio(monkeypatch):
    """Each (cell, step) pair is one run per warm start, with the high-SNR study's batch and the uncorrected ratio;
    the testbed scale keeps the behaviour ratio and its 16 prompts."""
    import experiments.llm
    from experiments import llm_highsnr

    seen = []

    def results_of(runs, **_):
        seen.extend(runs)
        return [(run, {"summary": {"nonfinite_at": None, "collapsed": run.args.staleness > 2}}) for run in runs]

    monkeypatch.setattr(experiments.llm, "results_of", results_of)
    cells = [("naive", 1), ("naive", 4)]
    stable = law.llm_evaluator(100, (1, 2), cells, scale="llm_highsnr")([(0, 1e-4), (1, 3e-4)])
    assert stable.tolist() == [[True, True], [False, False]]
    assert [(r.args.staleness, r.args.lr, r.args.warm_seed) for r in seen] == [(1, 1e-4, 1), (1, 1e-4, 2),
                                                                              (4, 3e-4, 1), (4, 3e-4, 2)]
    a = seen[0].args
    assert (a.ratio_to, a.prompts_per_step, a.drop_tied_groups, a.steps) == ("proximal", 256, True, 100)
    assert a.prompts_per_step == llm_highsnr.BASE["prompts_per_step"]
    seen.clear()
    law.llm_evaluator(100, (1,), cells, scale="llm")([(0, 1e-4)])
    assert (seen[0].args.ratio_to, seen[0].args.prompts_per_step) == ("behaviour", 16)


@pytest.mark.parametrize("out, message", [("table.txt", "must name a .csv"), ("a_file/t.csv", "is a file"),
                                          ("a_folder.csv", "is a folder")])
def test_command_refuses_bad_output_before_any_run(out, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "a_folder.csv").mkdir()
    monkeypatch.setattr(law, "law_tables", lambda *a, **k: pytest.fail("ran before checking its output"))
    with pytest.raises(SystemExit) as exit_info:
        law.main(["--out", str(tmp_path / out)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_command_will_not_overwrite_the_committed_table_with_the_quick_profile(monkeypatch, capsys):
    monkeypatch.setattr(law, "law_tables", lambda *a, **k: pytest.fail("ran before checking its output"))
    monkeypatch.setattr("runtime.files.git_tracked", lambda path: True)
    with pytest.raises(SystemExit):
        law.main(["--out", "docs/data/staleness_lr_scaling.csv", "--profile", "quick"])
    assert "committed data" in capsys.readouterr().err


def test_command_searches_only_the_criteria_asked_for(tmp_path, monkeypatch):
    seen = {}

    def law_tables(profile, scales, criteria, log=None, refinements=None):
        seen.update(profile=profile, scales=tuple(scales), criteria=tuple(criteria), refinements=refinements)
        return {"table": [], "fit": []}

    monkeypatch.setattr(law, "law_tables", law_tables)
    assert law.main(["--out", str(tmp_path / "t.csv"), "--scales", "llm_highsnr", "--criteria", "progress"]) == 0
    assert seen == {"profile": "quick", "scales": ("llm_highsnr",), "criteria": ("progress",), "refinements": None}
    assert law.main(["--out", str(tmp_path / "t.csv"), "--refinements", "1"]) == 0 and seen["refinements"] == 1
    with pytest.raises(SystemExit) as exit_info:
        law.main(["--out", str(tmp_path / "t.csv"), "--refinements", "-1"])
    assert exit_info.value.code == 2
