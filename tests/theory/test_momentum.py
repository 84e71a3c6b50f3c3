"""Checks of theory.momentum: staleness as implicit momentum, and GAC's projection acting on it."""

import numpy as np
import pytest
import torch

from theory import gac_stability, momentum
from theory.stability import stability_boundary_closed_form


def test_geometric_staleness_is_heavy_ball_symbolically():
    geometric = momentum.geometric_staleness_momentum()  # sympy: seconds, so one call checks every output
    assert geometric["difference"] == 0
    # the returned polynomials, evaluated through the returned symbols, against a numeric sum of the delay kernel
    z, a, mu = geometric["symbols"]
    for a_value, mu_value, z_value in ((0.3, 0.6, 0.9), (0.7, 0.2, -1.5), (1.1, 0.45, 2.0)):
        kernel = (1 - mu_value) * sum((mu_value / z_value) ** k for k in range(400))  # |mu/z| <= 0.75
        expected = (z_value - 1 + a_value * kernel) * (z_value - mu_value)
        values = {z: z_value, a: a_value, mu: mu_value}
        assert float(geometric["delayed"].subs(values)) == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert float(geometric["heavy_ball"].subs(values)) == pytest.approx(expected, rel=1e-12, abs=1e-12)


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
    assert abs(result["rho_bar"] - rho_star) < 0.02, (result, rho_star)
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


def test_monte_carlo_checks_are_reproducible_from_their_seed():
    # same seed, same machine => the same numbers (the checks draw from their own generators)
    def geometric():
        return momentum.check_geometric_momentum(a=0.3, mu=0.6, steps=20, paths=500, seed=3)

    def effective():
        return momentum.check_effective_momentum(cases=((2, 0.5), (3, 0.8)), seed=3)

    def gac_run():
        return momentum.check_gac_extends_stability(2, 1.3, dim=20, steps=20, seeds=3, seed=3)

    for check in (geometric, effective, gac_run):
        assert check() == check()


def test_geometric_staleness_monte_carlo_with_long_delays():
    # at mu = 0.9 one delay in ten exceeds 21 steps: the Monte Carlo must read those far-back iterates (or the
    # pre-history x = 1) and still agree with the heavy ball; the kernel sum is cut after history + steps terms
    result = momentum.check_geometric_momentum(a=0.3, mu=0.9, steps=60, paths=4000, seed=0)
    assert result["kernel_error"] < 1e-5  # truncated weight mu^141 = 3.5e-7
    assert 0.5 < result["mc_max_z"] < 5.0


@pytest.mark.parametrize("staleness", [0, 1, 2, 4])
@pytest.mark.parametrize("rho", [0.0, 0.3])
def test_effective_momentum_from_the_recursions_companion_matrix(staleness, rho):
    # independent: eigenvalues of the state matrix of x_{t+1} = x_t - a x_{t-s} + a rho x_{t-s-1}
    for a in (0.05, 0.4, 0.9 * gac_stability.gac_stability_boundary(staleness, rho)):
        eigenvalues = np.linalg.eigvals(gac_stability.filtered_companion_matrix(a, staleness, rho))
        z1, z2 = eigenvalues[np.argsort(-np.abs(eigenvalues))][:2]
        mu_eff, a_eff = momentum.effective_momentum(a, staleness, rho)
        assert mu_eff == pytest.approx((z1 * z2).real, abs=1e-9)
        assert a_eff == pytest.approx(((1 - z1) * (1 - z2)).real, abs=1e-9)


def test_effective_momentum_without_staleness_is_the_filtered_step():
    # s = 0: x_{t+1} = x_t - a(1 - rho) x_t - a rho (x_t - x_{t-1}), a heavy ball with momentum -a rho (exact)
    for a, rho in ((0.5, 0.0), (0.5, 0.3), (1.2, 0.6)):
        mu_eff, a_eff = momentum.effective_momentum(a, 0, rho)
        assert mu_eff == pytest.approx(-a * rho, abs=1e-12) and a_eff == pytest.approx(a * (1 - rho), abs=1e-12)


def test_effective_momentum_fit_far_beyond_the_boundary():
    # a = 1000 a*(s): the trajectory grows by about 1e500 (s = 2) and 1e227 (s = 4) over the run, past float64's
    # range, so the check must rescale it on the way; the fitted heavy ball still matches the dominant roots
    assert momentum.check_effective_momentum(cases=((2, 1000.0), (4, 1000.0))) < 1e-6


def _gac_extends_stability_direct(staleness, overshoot, dim, steps, seeds, seed):
    """The docstring's experiment written out as a plain loop (numpy, the projection by hand), same noise."""
    gen = torch.Generator().manual_seed(seed)
    boundary = float(stability_boundary_closed_form(staleness))
    curvature = np.where(np.arange(dim) < dim // 10, overshoot * boundary, 0.05 * boundary)
    out = {}
    for use_gac in (False, True):
        past = [np.zeros((seeds, dim)) for _ in range(staleness + 1)]  # past[k] = x_{t-k}
        prev = np.zeros((seeds, dim))
        removed = []
        for t in range(steps):
            noise = torch.randn((seeds, dim), generator=gen, dtype=torch.float64).numpy()
            grad = curvature * past[staleness] + noise
            step = grad.copy()
            if use_gac:
                for i in range(seeds):
                    norm_prev = prev[i] @ prev[i]
                    coef = grad[i] @ prev[i] / norm_prev if norm_prev > 0 else 0.0
                    if coef > 0:  # cos > tau = 0: remove the whole parallel part
                        step[i] = grad[i] - coef * prev[i]
                    if t >= steps // 2:
                        removed.append(max(coef, 0.0))
            prev = grad
            x = past[0] - step
            past = [x] + past[:-1]
            if use_gac and t == steps // 2:
                out["gac_mid"] = float(np.median((x * x).sum(1)))
        out["gac_final" if use_gac else "plain_final"] = float(np.median((x * x).sum(1)))
    out["rho_bar"] = float(np.mean(removed))
    return out


@pytest.mark.parametrize("dim", [20, 2])  # d = 2: ‖g_{t−1}‖² < 1 at many steps
def test_gac_extends_stability_against_a_direct_loop(dim):
    # an odd run length, so that "half-way" and "second half" are steps // 2 and nothing else
    args = dict(staleness=2, overshoot=1.3, dim=dim, steps=41, seeds=3, seed=5)
    result = momentum.check_gac_extends_stability(**args)
    expected = _gac_extends_stability_direct(**args)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, rel=1e-9), key
    boundary = float(stability_boundary_closed_form(2))
    assert result["mean_field_boundary_ratio"] == pytest.approx(
        gac_stability.gac_stability_boundary(2, expected["rho_bar"]) / boundary, rel=1e-9)
