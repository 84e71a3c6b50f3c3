"""Checks of theory.cosine: Lyapunov-based predicted cosine against Monte Carlo, limits, stale-data model."""

import numpy as np
import pytest
import sympy as sp

from theory import cosine
from theory.stability import stability_boundary_closed_form


def test_predicted_cosine_matches_monte_carlo():
    settings = [(frac * float(stability_boundary_closed_form(s)), name, s, 1.0) for frac, name, s in cosine.MC_SETTINGS]
    rows = cosine.check_cosine_against_simulation(settings, dim=1000, steps=3000, burn_in=1000, seed=0)
    errors = [row["abs_error"] for row in rows]
    assert max(errors) < 0.03, rows
    assert max(row["predicted"] for row in rows) > 0.3  # the check covers strongly aligned settings too


def test_sync_closed_form_is_minus_half_a():
    result = cosine.cosine_sync_closed_form()
    assert sp.simplify(result["cosine"] + result["a"] / 2) == 0
    for a in (0.1, 0.7, 1.5):
        lag_one, second = cosine.gradient_moments(a, 0)
        assert abs(lag_one[0] / second[0] + a / 2) < 1e-12


def test_sync_cosine_is_negative_and_small_for_small_steps():
    curvatures = cosine.spectrum("log", 500)
    for eta in (0.05, 0.2, 0.5):
        value = cosine.predicted_cosine(eta, curvatures, 0)
        assert -eta / 2 <= value < 0


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
