"""Checks of theory.gac_stability: GAC's mean-field stability region, slow-mode lemma, self-consistent ρ*."""

import numpy as np
import pytest
import sympy as sp
import torch

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
    # real GAC (gac.control) against the mean-field Lyapunov rho*, s = 2 at 1.5 a*(s)
    (row,) = gac_stability.check_self_consistent_rho(settings=[(2, 1.5)], dim=200, steps=600, seeds=2)
    assert row["diverged"] == 0.0 and row["abs_error"] < 0.03 and row["measured"] > 0.3, row
    eta = 1.5 * 2 * np.sin(np.pi / 10)  # 1.5 a*(2), a*(s) = 2 sin(π/(2(2s+1)))
    assert (row["staleness"], row["fraction"]) == (2, 1.5) and abs(row["eta"] - eta) < 1e-12
    predicted = gac_stability.self_consistent_rho(eta, gac_stability.spiked_curvatures(2, 200), 2)
    assert abs(row["predicted"] - predicted) < 1e-9 and row["abs_error"] == abs(row["predicted"] - row["measured"])
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


# ---- issue 23: fast checks of the parts only the heavy checks reached, each against an independent computation ----


def test_top_mode_limit_is_the_boundary_at_rho_cos_omega():
    for staleness in range(1, 7):
        limit = gac_stability.top_mode_limit(staleness)
        assert abs(np.cos(limit["omega"]) - limit["rho"]) < 1e-15
        assert abs(gac_stability.gac_phase(limit["omega"], staleness, limit["rho"])) < 1e-12  # ω is the phase root
        assert abs(limit["a_max"] - 1 / np.cos(np.pi / (2 * staleness + 3))) < 1e-12
        # the semi-closed boundary at ρ = cos ω is the stated a_max
        assert abs(gac_stability.gac_stability_boundary(staleness, limit["rho"]) - limit["a_max"]) < 1e-12


def test_boundary_check_covers_staleness_zero_to_max():
    assert gac_stability.check_gac_boundary(2, (0.0, 0.5))["cases"] == 3 * 2
    only_sync = gac_stability.check_gac_boundary(0, (0.0,))
    assert only_sync["cases"] == 1 and only_sync["max_error"] < 1e-8 and only_sync["rho_zero_vs_a_star"] < 1e-12


def test_slow_mode_check_reports_the_next_series_coefficients():
    # order 1 is the step cut alone
    lemma_1 = gac_stability.slow_mode_root_series(1)
    a, s, rho = lemma_1["symbols"]
    assert lemma_1["c2"] is None and sp.simplify(lemma_1["root"] - (1 - a * (1 - rho))) == 0
    # numeric roots against the order-3 sympy series: |z − (1 − a(1−ρ))|/a² → |c2| and |z − series to a²|/a³ → |c3|
    lemma_3 = gac_stability.slow_mode_root_series(3)
    a3, s3, rho3 = lemma_3["symbols"]
    c2, c3 = (abs(float(lemma_3["root"].coeff(a3, k).subs({s3: 1, rho3: 0.9}))) for k in (2, 3))
    assert 0.01 < c2 < 1 and 0.01 < c3 < 1  # both below the checks' starting value of 0, both visible
    result = gac_stability.check_slow_mode(stalenesses=(1,), rhos=(0.9,), a_values=(1e-3,))
    assert abs(result["first_order_over_a2"] - c2) < 0.02 * c2
    assert abs(result["second_order_over_a3"] - c3) < 0.02 * c3


def _impulse_moments(a, staleness, rho, steps=4000):
    """E[g_t g_{t−1}], E[g_t²] in units of σ² from the impulse response of the filtered recursion (no Lyapunov)."""
    y = np.zeros(steps + staleness + 2)  # y[t + staleness + 1] = x_t / (ησ); x_t = 0 before t = 0
    response, previous = np.zeros(steps), 0.0
    for t in range(steps):
        response[t] = a * y[t + 1] + (1.0 if t == 0 else 0.0)  # g_t = a x_{t−s} + ξ_t, ξ an impulse at t = 0
        y[t + staleness + 2] = y[t + staleness + 1] - (response[t] - rho * previous)
        previous = response[t]
    return (response[1:] * response[:-1]).sum(), (response * response).sum()


@pytest.mark.parametrize("staleness, rho", [(0, 0.3), (2, 0.7)])
def test_filtered_moments_against_the_impulse_response(staleness, rho):
    boundary = gac_stability.gac_stability_boundary(staleness, rho)
    a = np.array([-0.1, 0.0, 0.2, 0.5 * boundary, boundary, 3.0])
    lag_one, second = gac_stability.filtered_gradient_moments(a, staleness, rho)
    # a < 0 has a root beyond 1, a ≥ a*_GAC is not stable: nan (the companion matrix confirms the first)
    assert np.abs(np.linalg.eigvals(gac_stability.filtered_companion_matrix(-0.1, staleness, rho))).max() > 1
    assert np.isnan(lag_one[[0, 4, 5]]).all() and np.isnan(second[[0, 4, 5]]).all()
    assert lag_one[1] == 0.0 and second[1] == 1.0
    for k in (2, 3):
        expected = _impulse_moments(a[k], staleness, rho)
        assert np.allclose((lag_one[k], second[k]), expected, rtol=1e-9, atol=1e-12), (a[k], expected)


def test_predicted_coefficient_weights_each_direction_by_its_noise_variance():
    # the model is linear in the noise: a direction with noise σ counts as σ² unit-noise copies of itself
    eta, staleness, rho = 0.3, 2, 0.3
    weighted = gac_stability.predicted_coefficient(eta, [1.0, 0.2], staleness, rho, noise=[1.0, 3.0])
    copies = gac_stability.predicted_coefficient(eta, [1.0] + [0.2] * 9, staleness, rho)
    assert abs(weighted - copies) < 1e-12 and abs(weighted - gac_stability.predicted_coefficient(
        eta, [1.0, 0.2], staleness, rho)) > 1e-3
    silent_top = gac_stability.predicted_coefficient(eta, [1.0, 0.2], staleness, rho, noise=[0.0, 1.0])
    assert abs(silent_top - gac_stability.predicted_coefficient(eta, [0.2], staleness, rho)) < 1e-12


def test_self_consistent_rho_is_a_fixed_point_with_per_direction_noise():
    eta, curvatures, staleness = 0.9, [1.0, 0.2], 2  # η·λ_max = 0.9 > a*(2) = 0.618: only the filter holds it
    rho = gac_stability.self_consistent_rho(eta, curvatures, staleness, noise=[1.0, 3.0])
    assert 0 < rho < 1
    assert abs(gac_stability.predicted_coefficient(eta, curvatures, staleness, rho, noise=[1.0, 3.0]) - rho) < 1e-9
    copies = gac_stability.self_consistent_rho(eta, [1.0] + [0.2] * 9, staleness)
    assert abs(rho - copies) < 1e-9


def test_self_consistent_rho_is_zero_in_sync():
    # s = 0: consecutive gradients anti-correlated (cosine −a/2 per direction), so GAC never acts and ρ* = 0
    eta, curvatures = 0.5, [1.0, 0.3]
    lag_one, _ = cosine.gradient_moments(eta * np.array(curvatures), 0)
    assert (lag_one < 0).all()
    assert gac_stability.self_consistent_rho(eta, curvatures, 0) == 0.0


def test_stable_rho_interval_ends_where_the_bisection_boundary_is_a_max():
    # at s = 1 a*_GAC(1, ρ) rises from 1 to ≈ 1.25 (ρ ≈ 0.4) and falls back to 1: a_max = 1.2 is stable on [lo, hi]
    lo, hi = gac_stability._stable_rho_interval(1.2, 1)
    assert 0 < lo < 0.4 < hi < 0.9
    for end in (lo, hi):
        assert abs(gac_stability.gac_stability_boundary_bisection(1, end) - 1.2) < 1e-9
    radius = lambda r: np.abs(np.linalg.eigvals(gac_stability.filtered_companion_matrix(1.2, 1, r))).max()  # noqa: E731
    assert radius(lo - 0.01) > 1 and radius(0.5 * (lo + hi)) < 1 and radius(hi + 0.01) > 1
    assert gac_stability._stable_rho_interval(1.3, 1) is None  # above the peak of the boundary


def test_spiked_curvatures_is_the_stated_spectrum():
    for dim in (5, 10, 100, 1000):
        out = gac_stability.spiked_curvatures(3, dim)
        top = max(1, dim // 10)
        assert out.shape == (dim,) and (out[:top] == 1.0).all()
        assert np.allclose(out[top:], 0.05 * 2 * np.sin(np.pi / 14))  # 0.05·a*(3), a*(s) = 2 sin(π/(2(2s+1)))


def test_gac_project_step_removes_the_parallel_part_and_reports_its_coefficient():
    reference = torch.tensor([[0.2, 0.0], [0.2, 0.0]], dtype=torch.float64)  # ‖d‖² = 0.04 < 1
    grad = torch.tensor([[0.3, 0.1], [-0.3, 0.1]], dtype=torch.float64)  # aligned (acted on), anti-aligned (kept)
    applied, coefficient = gac_stability.gac_project_step(grad, reference)
    assert torch.allclose(applied, torch.tensor([[0.0, 0.1], [-0.3, 0.1]], dtype=torch.float64), atol=1e-15)
    assert torch.allclose(coefficient, torch.tensor([1.5, 0.0], dtype=torch.float64), atol=1e-12)


def _direct_gac_run(curvatures, etas, staleness, steps, seeds, seed, noise=1.0):
    """Delayed SGD with GAC project (τ = 0) written out, the whole trajectory kept and the projection by hand.

    Returns (mean removed coefficient over steps ≥ steps // 2 and the seeds, final ‖x‖², ‖x‖² after step
    steps // 2), per step size and seed (the draws of one generator, in the order the run takes them)."""
    gen = torch.Generator().manual_seed(seed)
    lam = torch.tensor(curvatures, dtype=torch.float64)
    eta = torch.tensor(etas, dtype=torch.float64)[:, None, None]
    trajectory = [torch.zeros(len(etas), seeds, len(curvatures), dtype=torch.float64)]  # x_0, x_1, ...
    reference, removed, mid = None, [], None
    for t in range(steps):
        delayed = trajectory[max(0, t - staleness)]  # the first s steps read x_0
        grad = lam * delayed + noise * torch.randn(delayed.shape, generator=gen, dtype=torch.float64)
        applied, coefficient = grad, torch.zeros(grad.shape[:-1], dtype=torch.float64)
        if reference is not None:  # GAC acts where cos(g, d) > 0: g − (⟨g, d⟩/‖d‖²) d
            dot = (grad * reference).sum(-1)
            coefficient = torch.where(dot > 0, dot / (reference * reference).sum(-1), 0.0)
            applied = grad - coefficient[..., None] * reference
        if t >= steps // 2:
            removed.append(coefficient)
        reference = grad
        trajectory.append(trajectory[-1] - eta * applied)
        if t == steps // 2:
            mid = (trajectory[-1] ** 2).sum(-1)
    return torch.stack(removed).mean((0, 2)), (trajectory[-1] ** 2).sum(-1), mid


@pytest.mark.parametrize("steps", [1, 2, 9])
def test_run_gac_quadratic_against_a_direct_loop(steps):
    curvatures, etas, staleness = [1.0, 0.5, 0.05, 0.05], [0.3, 0.9], 2
    runs = gac_stability.run_gac_quadratic(curvatures, etas, staleness, steps, 3, 5)
    rho_bar, final, mid = _direct_gac_run(curvatures, etas, staleness, steps, 3, 5)
    assert len(runs) == 2
    for k, run in enumerate(runs):
        assert run["rho_bar"] == pytest.approx(float(rho_bar[k]), rel=1e-9, abs=1e-15)
        assert run["final_sq"] == pytest.approx(float(final[k].median()), rel=1e-9)
        assert run["mid_sq"] == pytest.approx(float(mid[k].median()), rel=1e-9)
        assert run["diverged"] == 0.0
    if steps == 1:  # no reference yet at the first step: GAC does not act
        assert [run["rho_bar"] for run in runs] == [0.0, 0.0]
    single = gac_stability.run_gac_quadratic(curvatures, 0.3, staleness, steps, 3, 5)
    assert isinstance(single, dict) and single["mid_sq"] == pytest.approx(float(_direct_gac_run(
        curvatures, [0.3], staleness, steps, 3, 5)[2][0].median()), rel=1e-9)
