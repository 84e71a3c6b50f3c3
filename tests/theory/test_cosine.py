"""Checks of theory.cosine: Lyapunov-based predicted cosine against Monte Carlo, limits, stale-data model."""

import numpy as np
import pytest
import sympy as sp

from theory import cosine
from theory.stability import stability_boundary_closed_form


@pytest.mark.heavy
def test_predicted_cosine_matches_monte_carlo():
    settings = [(frac * float(stability_boundary_closed_form(s)), name, s, 1.0) for frac, name, s in cosine.MC_SETTINGS]
    rows = cosine.check_cosine_against_simulation(settings, dim=1000, steps=3000, burn_in=1000, seed=0)
    errors = [row["abs_error"] for row in rows]
    assert max(errors) < 0.005, rows
    assert max(row["predicted"] for row in rows) > 0.3  # the check covers strongly aligned settings too


def test_sync_closed_form_is_minus_half_a():
    result = cosine.cosine_sync_closed_form()
    assert sp.simplify(result["cosine"] + result["a"] / 2) == 0
    a, sigma = result["a"], result["sigma"]
    for value in (0.1, 0.7, 1.5):  # the moments the docstring states, against the numeric Lyapunov solve
        lag_one, second = cosine.gradient_moments(value, 0)
        at = {a: value, sigma: 1.3}
        assert abs(float(result["second"].subs(at)) - 1.3**2 * second[0]) < 1e-12
        assert abs(float(result["lag_one"].subs(at)) - 1.3**2 * lag_one[0]) < 1e-12
        assert abs(float(result["variance"].subs(at)) - cosine.unit_noise_covariance(value, 0)[0, 0]) < 1e-12
    for a in (0.1, 0.7, 1.5):
        lag_one, second = cosine.gradient_moments(a, 0)
        assert abs(lag_one[0] / second[0] + a / 2) < 1e-12


def test_sync_cosine_is_negative_and_small_for_small_steps():
    curvatures = cosine.spectrum("log", 500)
    for eta in (0.05, 0.2, 0.5):
        value = cosine.predicted_cosine(eta, curvatures, 0)
        assert -eta / 2 <= value < 0


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["log", "uniform", "spiked", "random"])
def test_cosine_rises_with_staleness_until_the_boundary(name):
    curvatures = cosine.spectrum(name, 400)
    values = cosine.predicted_cosine(0.1, curvatures, np.arange(0, 20))
    stable = ~np.isnan(values)
    assert stable[:10].all() and not stable.all()  # eta=0.1, lambda_max=1 leaves the stable region before s=20
    finite = values[stable]
    assert finite[0] < 0 < finite[1]
    assert np.all(np.diff(finite[1:]) > 0)


@pytest.mark.parametrize("staleness", [0, 1, 2, 4, 8])
def test_cosine_tends_to_cos_pi_over_2s_plus_1_at_the_boundary(staleness):
    curvatures = cosine.spectrum("uniform", 200)
    boundary = float(stability_boundary_closed_form(staleness))
    near = [cosine.predicted_cosine(boundary * (1 - gap), curvatures, staleness) for gap in (1e-2, 1e-4, 1e-7)]
    limit = float(cosine.cosine_at_boundary(staleness))
    assert abs(near[-1] - limit) < 1e-3
    assert abs(near[0] - limit) > abs(near[-1] - limit)


def test_beyond_boundary_is_nan():
    assert np.isnan(cosine.predicted_cosine(1.01, [1.0], 1))


def test_stale_data_reduces_to_stale_gradient_exactly_when_expected():
    result = cosine.check_stale_data_reduction(trials=10)
    for parametrization in ("tabular", "loglinear"):
        # mean baseline, no importance weights: stale data == stale gradient grad J(theta_b)
        assert result[f"{parametrization}/mean/nois"] < 1e-6
        # no baseline: an extra term, not the stale-gradient model
        assert result[f"{parametrization}/none/nois"] > 1e-2
    # a non-log-linear parametrization breaks the reduction even with the mean baseline
    assert result["tanh/mean/nois"] > 1e-2
    # importance weights: the expected gradient is the fresh one, for every parametrization and baseline
    for key, value in result.items():
        if key.endswith("/is"):
            assert value < 1e-6, key
    assert result["none_formula"] < 1e-6


def test_cosine_s1_is_plus_half_a_and_matches_lyapunov():
    derived = cosine.cosine_s1()
    a = derived["a"]
    assert sp.simplify(derived["cosine"] - a / 2) == 0
    assert sp.simplify(derived["weight"] - 2 / ((1 - a) * (2 + a))) == 0
    for value in (0.05, 0.4, 0.9):  # independent path: the numeric Lyapunov solve
        lag_one, second = cosine.gradient_moments(value, 1)
        assert abs(lag_one[0] / second[0] - value / 2) < 1e-12
        assert abs(second[0] - float(derived["weight"].subs(a, value))) < 1e-10


@pytest.mark.parametrize("staleness", [*range(1, 7), *(pytest.param(s, marks=pytest.mark.heavy) for s in (7, 8))])
def test_cosine_series_coefficients_and_numeric_value(staleness):
    series = cosine.cosine_series(staleness, order=2)
    a = sp.Symbol("a", positive=True)
    assert sp.expand(series - (a / 2 + (staleness - 1) * a**2 / 2)) == 0
    value = 0.03  # the a^3 term, s(s-1)a^3/4, is below 1e-3 here for every s <= 8
    lag_one, second = cosine.gradient_moments(value, staleness)
    assert abs(float(series.subs(a, value)) - lag_one[0] / second[0]) < 1e-3


@pytest.mark.parametrize("staleness", [1, 2, 3, 5, 8])
def test_cosine_series_order_three_and_the_next_term_against_lyapunov(staleness):
    # exact cosine from the numeric Lyapunov solve (no sympy); after the order-3 series the residual must be the
    # a^4 term s(s-1)(2s-1)a^4/12: a wrong a^3 coefficient leaves a residual/a^4 that grows like 1/a
    a = sp.Symbol("a", positive=True)
    series = sp.lambdify(a, cosine.cosine_series(staleness, order=3))

    def residual_over_a4(value):
        lag_one, second = cosine.gradient_moments(value, staleness)
        return (lag_one[0] / second[0] - series(value)) / value**4

    next_coefficient = 2 * residual_over_a4(0.005) - residual_over_a4(0.01)  # Richardson: removes the a^5 term
    expected = staleness * (staleness - 1) * (2 * staleness - 1) / 12
    assert abs(next_coefficient - expected) < 0.02 * expected + 0.02, (next_coefficient, expected)


def test_exact_autocovariance_agrees_with_lyapunov():
    for staleness in (0, 2, 5):
        derived = cosine.gradient_autocovariance_symbolic(staleness)
        value = 0.6 * float(stability_boundary_closed_form(staleness))
        lag_one, second = cosine.gradient_moments(value, staleness)
        assert abs(float(derived["second"].subs(derived["a"], value)) - second[0]) < 1e-10
        assert abs(float(derived["lag_one"].subs(derived["a"], value)) - lag_one[0]) < 1e-10


@pytest.mark.heavy
def test_snr_law_on_random_spectra():
    result = cosine.check_snr_law(spectra=120, seed=0)
    assert sum(result["cases"]) == 120 and min(result["cases"]) >= 20  # every spectrum counted once
    assert result["sync_max_error"] < 1e-12  # equality at s = 0
    assert result["async_max_excess"] <= 1e-12  # inequality for s >= 1


@pytest.mark.heavy
def test_anisotropic_noise_cosine_and_snr_against_monte_carlo():
    rows = cosine.check_anisotropic_cosine()
    for row in rows:
        assert row["abs_error"] < 0.005, row
        assert abs(row["snr"] / row["snr_simulated"] - 1) < 0.02, row
        assert abs(row["isotropic_predicted"] - row["simulated"]) > 0.05  # the sigma_i weights matter here


@pytest.mark.heavy
def test_mutation_dropping_noise_weights_fails_the_check(monkeypatch):
    original = cosine.predicted_cosine
    monkeypatch.setattr(cosine, "predicted_cosine", lambda eta, curv, s, noise=1.0: original(eta, curv, s, 1.0))
    rows = cosine.check_anisotropic_cosine(dim=500, steps=600, burn_in=300)
    assert max(row["abs_error"] for row in rows) > 0.005


def test_series_curve_and_snr_bound_curve():
    curvatures = cosine.spectrum("log", 80)
    grid = np.arange(0, 9)
    predicted = cosine.predicted_cosine(0.03, curvatures, grid)
    series = cosine.series_cosine(0.03, curvatures, grid)
    bound = cosine.snr_bound(0.03, curvatures, grid)
    assert np.max(np.abs(series - predicted)) < 1e-3
    assert abs(series[0] - predicted[0]) < 1e-12  # s = 0 is exact
    assert abs(bound[0] + predicted[0]) < 1e-12
    assert np.all(predicted[1:] <= bound[1:])
