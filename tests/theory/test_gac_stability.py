"""Checks of theory.gac_stability: GAC's mean-field stability region, slow-mode lemma, self-consistent ρ*."""

import numpy as np
import pytest
import sympy as sp

from theory import cosine, gac_stability
from theory.stability import stability_boundary_closed_form


def test_semi_closed_boundary_matches_companion_bisection_small_staleness():  # the fast part of the check below
    result = gac_stability.check_gac_boundary(max_staleness=4, rhos=(0.0, 0.3, 0.9))
    assert result["max_error"] < 1e-8
    assert result["rho_zero_vs_a_star"] < 1e-12


@pytest.mark.heavy
def test_semi_closed_boundary_matches_companion_bisection():
    result = gac_stability.check_gac_boundary(max_staleness=32, rhos=(0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95))
    assert result["max_error"] < 1e-8
    assert result["rho_zero_vs_a_star"] < 1e-12
    assert abs(gac_stability.gac_stability_boundary(0, 0.4) - 2 / 1.4) < 1e-12


def test_bad_arguments_rejected():
    with pytest.raises(ValueError, match="rho"):
        gac_stability.gac_stability_boundary(2, 1.0)
    with pytest.raises(ValueError, match="staleness"):
        gac_stability.gac_stability_boundary(-1, 0.2)


def test_slow_mode_lemma():
    lemma = gac_stability.slow_mode_root_series(2)
    a, s, rho = lemma["symbols"]
    assert sp.simplify(lemma["c1"] + (1 - rho)) == 0  # z = 1 - a(1 - rho) + O(a^2): a step cut
    assert sp.simplify(lemma["c2"] - (1 - rho) * (rho * (s + 1) - s)) == 0
    # independent: eigenvalues of the companion matrix; the a^2 and a^3 remainders stay bounded as a -> 0
    coarse = gac_stability.check_slow_mode(a_values=(1e-3,))
    fine = gac_stability.check_slow_mode(a_values=(1e-4,))
    assert fine["first_order_over_a2"] <= 1.01 * coarse["first_order_over_a2"] < 30
    assert fine["second_order_over_a3"] <= 1.01 * coarse["second_order_over_a3"] < 1e3


def test_step_cut_explains_small_rho_only():
    # slow modes are a step cut, the boundary (an oscillatory mode) is not: close for small rho, far for large
    assert abs(gac_stability.step_cut_ratio(8, 0.1) - 1) < 0.05
    assert gac_stability.step_cut_ratio(2, 0.9) < 0.3


def test_filtered_moments_reduce_to_plain_at_rho_zero():
    a = np.array([0.0, 0.1, 0.25])
    for staleness in (0, 1, 3):
        filtered = gac_stability.filtered_gradient_moments(a, staleness, 0.0)
        plain = cosine.gradient_moments(a, staleness)
        assert np.allclose(filtered, plain, atol=1e-12)


def test_self_consistent_rho_and_max_stable_step_on_small_runs():  # fast versions of the two heavy checks below
    # real GAC (gac.control) against the mean-field Lyapunov rho*, s = 2 at 1.5 a*(s): measured 0.368 vs 0.373
    (row,) = gac_stability.check_self_consistent_rho(settings=[(2, 1.5)], dim=200, steps=600, seeds=2)
    assert row["diverged"] == 0.0 and row["abs_error"] < 0.03 and row["measured"] > 0.3, row
    result = gac_stability.check_max_stable_step(1, factors=(0.9,), dim=100, steps=400, seeds=2)
    assert abs(result["top_mode_limit"] - 1 / np.cos(np.pi / 5)) < 1e-12  # 1/cos(pi/(2s+3)) at s = 1
    assert abs(result["predicted"] - result["top_mode_limit"]) < 2e-3  # the bisection over rho* meets it
    run = result["runs"][0.9]
    # stationary: 90 slow directions (lambda = 0.05 a*(1)) at about plain SGD's eta/(2 lambda) each, ~1000 (939)
    assert run["diverged"] == 0.0 and 600 < run["final_sq"] < 1400 and 0.5 < run["final_sq"] / run["mid_sq"] < 1.5


@pytest.mark.heavy
def test_self_consistent_rho_matches_gac_control_runs():
    rows = gac_stability.check_self_consistent_rho()
    for row in rows:
        assert row["diverged"] == 0.0, row
        assert row["abs_error"] < 0.03, row
    assert max(row["measured"] for row in rows) > 0.3  # covers strong filtering beyond a*(s)


@pytest.mark.heavy
def test_predicted_max_stable_step_and_runs_below_it():
    result = gac_stability.check_max_stable_step(2, factors=(0.95,))
    # the bisection over self-consistent solutions meets the closed-form top-mode limit 1/cos(pi/(2s+3))
    assert abs(result["predicted"] - result["top_mode_limit"]) < 2e-3
    assert result["predicted"] > float(stability_boundary_closed_form(2))
    below = result["runs"][0.95]
    assert below["diverged"] == 0.0 and below["final_sq"] < 1.5 * below["mid_sq"]


@pytest.mark.heavy
def test_mutation_filter_replaced_by_step_cut_fails(monkeypatch):
    def step_cut_matrix(a, staleness, rho):
        m = np.zeros((staleness + 2, staleness + 2))
        m[: staleness + 1, : staleness + 1] = cosine.companion_matrix(a * (1 - rho), staleness)
        m[staleness + 1, staleness] = 1.0
        return m

    monkeypatch.setattr(gac_stability, "filtered_companion_matrix", step_cut_matrix)
    assert gac_stability.check_gac_boundary(max_staleness=8, rhos=(0.5, 0.9))["max_error"] > 1e-2
    monkeypatch.undo()
    monkeypatch.setattr(gac_stability, "filtered_gradient_moments",
                        lambda a, staleness, rho: cosine.gradient_moments(np.asarray(a) * (1 - rho), staleness))
    rows = gac_stability.check_self_consistent_rho(settings=[(4, 2.0)], dim=400, steps=1000)
    assert not rows[0]["abs_error"] < 0.03
