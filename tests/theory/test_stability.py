"""Checks of theory.stability: closed-form boundary (exact and numeric) and random-staleness mean-square boundary."""

import numpy as np
import pytest

from theory import stability


def test_characteristic_polynomial_and_boundary_exact():
    result = stability.check_boundary_symbolic(max_staleness=4)
    assert result["polynomial_ok"]
    assert result["identities_ok"]
    assert result["residual_max"] == 0.0


def test_boundary_numeric_matches_closed_form_up_to_8():  # the fast part of the check below
    result = stability.check_boundary_numeric(max_staleness=8)
    assert result["max_error"] < 1e-8
    assert result["sides_ok"]


@pytest.mark.heavy
def test_boundary_numeric_matches_closed_form_up_to_64():
    result = stability.check_boundary_numeric(max_staleness=64)
    assert result["max_error"] < 1e-8
    assert result["sides_ok"]


def test_stability_map_methods_agree_off_boundary():
    a_grid = np.linspace(0.01, 2.2, 97)
    s_grid = np.arange(0, 13)
    closed = stability.stability_map(a_grid, s_grid)
    roots = stability.stability_map(a_grid, s_grid, method="roots")
    boundary = stability.stability_boundary_closed_form(s_grid)[:, None]
    away = np.abs(a_grid[None, :] - boundary) > 1e-6
    assert closed.shape == (13, 97)
    assert np.array_equal(closed[away], roots[away])
    assert closed[:, 0].all() and not closed[:, -1].any()


@pytest.mark.parametrize("max_staleness", [1, 2, 4, 8])
def test_mean_square_boundary_random_against_simulation(max_staleness):
    result = stability.check_mean_square_random(max_staleness, paths=20000, steps=24, seed=0)
    # random delays are milder than always taking the worst one, never milder than no delay
    assert result["a_star_fixed"] < result["boundary"] < 2.0
    for side in ("below", "above"):  # max |z| over 23 steps: 1.2-2.8 measured; > 0.5 unless the stderr is inflated
        assert 0.5 < result[side]["max_z"] < 5.0, (side, result)
    assert result["below"]["predicted_growth"] < 1.0 and result["below"]["measured_growth"] < 1.0
    assert result["above"]["predicted_growth"] > 1.0 and result["above"]["measured_growth"] > 1.0


def test_mean_square_boundary_without_delay_is_two():
    assert abs(stability.mean_square_boundary_random(0) - 2.0) < 1e-6


def test_negative_staleness_rejected():
    with pytest.raises(ValueError, match=r"^staleness must be >= 0, got -1$"):
        stability.characteristic_polynomial(-1)


def test_derivation_a_star_is_the_numeric_boundary():
    d = stability.boundary_derivation()
    for s in (1, 3, 6):  # the derivation's a*(s), evaluated, against bisection on the companion matrix's roots
        assert abs(float(d["a_star"].subs(d["s"], s)) - stability.stability_boundary(s)) < 1e-9


def test_numeric_check_reports_a_wrong_boundary_at_any_single_staleness(monkeypatch):
    # mutation: the closed form off by 1 % at s = 2 only; the side check must say so although s = 4 is right
    original = stability.stability_boundary_closed_form
    monkeypatch.setattr(stability, "stability_boundary_closed_form",
                        lambda s: original(s) * (1.01 if np.all(np.asarray(s) == 2) else 1.0))
    assert not stability.check_boundary_numeric(max_staleness=4)["sides_ok"]


def test_closed_form_and_map_reject_bad_input_and_exclude_both_ends():
    with pytest.raises(ValueError, match=r"^staleness must be >= 0$"):
        stability.stability_boundary_closed_form(np.array([1, -2]))
    with pytest.raises(ValueError, match=r"^method must be 'closed_form' or 'roots', got 'bisect'$"):
        stability.stability_map([0.5], [1], method="bisect")
    # a = 0 does not contract and a = a*(s) has a root pair on the unit circle: neither is stable
    for s in (0, 1, 3):
        edge = float(stability.stability_boundary_closed_form(s))
        assert stability.stability_map([0.0, 0.5 * edge, edge], [s]).tolist() == [[False, True, False]]
