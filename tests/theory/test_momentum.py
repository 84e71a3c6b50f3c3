"""Checks of theory.momentum: staleness as implicit momentum, and GAC's projection acting on it."""

import numpy as np
import pytest

from theory import gac_stability, momentum
from theory.stability import stability_boundary_closed_form


def test_geometric_staleness_is_heavy_ball_symbolically():
    assert momentum.geometric_staleness_momentum()["difference"] == 0


def test_geometric_staleness_is_heavy_ball_numerically():
    result = momentum.check_geometric_momentum(a=0.3, mu=0.6, steps=60, paths=40000, seed=0)
    assert result["kernel_error"] < 1e-10
    # max over 58 steps of |z|: below 5 if the mean is right, above 0.5 unless the standard error is inflated (2.43)
    assert 0.5 < result["mc_max_z"] < 5.0


def test_effective_momentum_matches_fit_to_trajectory():
    assert momentum.check_effective_momentum() < 1e-6


def test_effective_momentum_limits():
    for a in (0.1, 0.3, 0.9):  # s = 1 is exactly heavy ball with momentum a and step a
        mu_eff, a_eff = momentum.effective_momentum(a, 1)
        assert abs(mu_eff - a) < 1e-12 and abs(a_eff - a) < 1e-12
    for s in (2, 4, 8):  # momentum grows toward 1 at the boundary
        values = [momentum.effective_momentum(f * float(stability_boundary_closed_form(s)), s)[0]
                  for f in (0.5, 0.9, 0.999)]
        assert values[0] < values[1] < values[2] and values[2] > 0.99


@pytest.mark.parametrize("staleness", [2, 4, 8])
def test_mean_field_gac_filter_lowers_momentum_and_widens_stability(staleness):
    boundary = float(stability_boundary_closed_form(staleness))
    assert abs(momentum.mean_field_gac_boundary(staleness, 0.0) / boundary - 1) < 1e-8
    ratios = [momentum.mean_field_gac_boundary(staleness, rho) / boundary for rho in (0.2, 0.5)]
    assert 1.2 < ratios[0] < ratios[1]
    a = 0.9 * boundary
    assert momentum.effective_momentum(a, staleness, 0.2)[0] < momentum.effective_momentum(a, staleness)[0]


def test_gac_keeps_a_small_overshooting_quadratic_stable_at_the_mean_field_rho():  # fast version of the one below
    staleness, overshoot, dim = 2, 1.3, 100
    result = momentum.check_gac_extends_stability(staleness, overshoot, dim=dim, steps=300, seeds=4, seed=0)
    assert result["plain_final"] > 1e15  # beyond a*(s) plain delayed SGD grows geometrically
    assert np.isfinite(result["gac_final"]) and 0.5 * result["gac_mid"] < result["gac_final"] < 1.5 * result["gac_mid"]
    # independent: the mean-field self-consistent rho* (Lyapunov with the filter) on the same spectrum, eta = 1
    boundary = float(stability_boundary_closed_form(staleness))
    curvatures = np.full(dim, 0.05 * boundary)
    curvatures[: dim // 10] = overshoot * boundary
    rho_star = gac_stability.self_consistent_rho(1.0, curvatures, staleness)
    assert abs(result["rho_bar"] - rho_star) < 0.02, (result, rho_star)  # measured 0.271 vs 0.274
    assert abs(result["mean_field_boundary_ratio"] - gac_stability.gac_stability_boundary(staleness, rho_star)
               / boundary) < 0.02


@pytest.mark.heavy
@pytest.mark.parametrize("staleness", [2, 4])
def test_gac_keeps_overshooting_quadratic_stable(staleness):
    result = momentum.check_gac_extends_stability(staleness, overshoot=1.3, seed=0)
    assert result["plain_final"] > 1e10  # beyond a*(s): plain delayed SGD diverges
    assert np.isfinite(result["gac_final"]) and result["gac_final"] < 1e5
    assert result["gac_final"] < 1.5 * result["gac_mid"]  # stationary, not slowly growing
    # the mean-field model, fed the measured rho, also puts 1.3 a*(s) inside the stable range
    assert result["mean_field_boundary_ratio"] > 1.3
