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
    assert set(result) == {f"{p}/{b}/{w}" for p in cosine.PARAMETRIZATIONS for b in ("mean", "none")
                           for w in ("is", "nois")} | {"none_formula"}
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
    assert 0 < result["none_formula"] < 1e-6  # finite differences are never exact: 0 means nothing was compared


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


@pytest.mark.parametrize("staleness", [1, 2, 5, 8])
def test_the_series_by_power_series_division_is_sympys_series(staleness):
    derived = cosine.gradient_autocovariance_symbolic(staleness)
    for order in (2, 3):
        expected = sp.series(derived["cosine"], derived["a"], 0, order + 1).removeO()
        assert sp.expand(cosine.cosine_series(staleness, order) - expected) == 0


def test_power_series_division_on_known_series_and_its_fallback_at_a_pole():
    a = sp.Symbol("a")
    assert sp.expand(cosine._rational_taylor(1 / (1 - a), a, 3) - (1 + a + a**2 + a**3)) == 0
    assert sp.expand(cosine._rational_taylor((2 + a) / (1 + 2 * a + a**2), a, 2) - (2 - 3 * a + 4 * a**2)) == 0
    assert sp.expand(cosine._rational_taylor(1 / (a * (1 - a)), a, 1) - (1 / a + 1 + a)) == 0  # sp.series' path


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


# --- fast cases of the Monte-Carlo checks and of the helpers (so that their mutants are judged without heavy runs) ---


def _direct_simulation(eta, curvatures, staleness, noise, steps, burn_in, seed):
    """The same model with the whole trajectory kept (no ring buffer): x_{t-s} = 0 before the start."""
    rng = np.random.default_rng(seed)
    curvatures = np.asarray(curvatures, dtype=float)
    noise = np.broadcast_to(np.asarray(noise, dtype=float), curvatures.shape)
    xs, grads, signals, noises = [np.zeros(curvatures.size)], [], [], []
    for t in range(burn_in + steps):
        stale = xs[t - staleness] if t - staleness >= 0 else np.zeros(curvatures.size)
        signals.append(curvatures * stale)
        noises.append(noise * rng.standard_normal(curvatures.size))
        grads.append(signals[-1] + noises[-1])
        xs.append(xs[t] - eta * grads[-1])
    kept = range(burn_in, burn_in + steps)
    cosines = [grads[t] @ grads[t - 1] / np.linalg.norm(grads[t]) / np.linalg.norm(grads[t - 1]) for t in kept]
    return {"mean_cosine": np.mean(cosines),
            "ratio_cosine": sum(grads[t] @ grads[t - 1] for t in kept) / sum(grads[t] @ grads[t] for t in kept),
            "snr": sum(signals[t] @ signals[t] for t in kept) / sum(noises[t] @ noises[t] for t in kept)}


@pytest.mark.parametrize("staleness", [0, 1, 3])
def test_simulate_cosine_against_a_direct_loop(staleness):
    curvatures, noise = np.array([0.2, 0.5, 1.0, 0.05]), np.array([1.0, 0.5, 2.0, 1.5])
    eta = 0.7 * float(stability_boundary_closed_form(staleness))
    got = cosine.simulate_cosine(eta, curvatures, staleness, noise, steps=40, burn_in=7, seed=5)
    expected = _direct_simulation(eta, curvatures, staleness, noise, steps=40, burn_in=7, seed=5)
    for key, value in expected.items():
        assert abs(got[key] - value) < 1e-12 * max(1.0, abs(value)), key


def test_check_cosine_against_simulation_small():
    # d = 200, 800 steps: the per-step cosine's noise (~1/sqrt(d)) averages to a few 1e-3
    settings = [(frac * float(stability_boundary_closed_form(s)), name, s, 1.0) for frac, name, s in cosine.MC_SETTINGS]
    rows = cosine.check_cosine_against_simulation(settings, dim=200, steps=800, burn_in=300, seed=0)
    assert len(rows) == len(settings)
    for k, (row, (eta, name, staleness, noise)) in enumerate(zip(rows, settings, strict=True)):
        curvatures = cosine.spectrum(name, 200)
        assert (row["eta"], row["spectrum"], row["staleness"], row["noise"]) == (eta, name, staleness, noise)
        assert row["predicted"] == cosine.predicted_cosine(eta, curvatures, staleness, noise)
        assert row["simulated"] == cosine.simulate_cosine(eta, curvatures, staleness, noise, 800, 300, k)["mean_cosine"]
        assert abs(row["top_a_over_boundary"] - cosine.MC_SETTINGS[k][0]) < 1e-12
        assert row["abs_error"] == abs(row["predicted"] - row["simulated"]) < 0.03, row
        assert abs(row["simulated_ratio"] - row["predicted"]) < 0.03, row


def test_snr_law_small():
    result = cosine.check_snr_law(spectra=15, seed=0)
    assert sum(result["cases"]) == 15 and min(result["cases"]) >= 3
    assert result["sync_max_error"] < 1e-12
    assert -1.0 < result["async_max_excess"] <= 1e-12


def test_anisotropic_cosine_small():
    # d = 300, 800 steps: the bounds hold the simulation's noise; the isotropic prediction misses by more
    rows = cosine.check_anisotropic_cosine(dim=300, steps=800, burn_in=300, seed=0)
    assert [(row["fraction"], row["spectrum"], row["staleness"]) for row in rows] == cosine.ANISOTROPIC_SETTINGS
    for row in rows:
        curvatures = cosine.spectrum(row["spectrum"], 300)
        eta = row["fraction"] * float(stability_boundary_closed_form(row["staleness"]))
        sigma = 0.2 + 2.0 * curvatures  # lambda_max = 1
        assert row["predicted"] == cosine.predicted_cosine(eta, curvatures, row["staleness"], sigma)
        assert row["isotropic_predicted"] == cosine.predicted_cosine(eta, curvatures, row["staleness"])
        assert row["abs_error"] == abs(row["predicted"] - row["simulated"]) < 0.03, row
        assert abs(row["snr"] / row["snr_simulated"] - 1) < 0.15, row
        assert abs(row["snr"] - cosine.snr(eta, curvatures, row["staleness"], sigma)) < 1e-12
        assert abs(row["isotropic_predicted"] - row["simulated"]) > 0.05
    last = cosine.simulate_cosine(eta, curvatures, row["staleness"], sigma, 800, 300, seed=len(rows) - 1)
    assert (row["simulated"], row["snr_simulated"]) == (last["mean_cosine"], last["snr"])  # run k has seed + k


def test_anisotropic_noise_grows_with_curvature():
    sigma = cosine.anisotropic_noise([0.0, 1.0, 4.0])  # lambda_max = 4: sigma = 0.2 + 2 lambda / 4
    assert np.allclose(sigma, [0.2, 0.7, 2.2], rtol=0, atol=1e-15)


def test_snr_at_s0_is_the_weighted_a_over_2_minus_a():
    # at s = 0, SNR_i = a/(2 - a) (cosine_sync_closed_form: E[g^2]/sigma^2 = 2/(2 - a)), weighted by sigma_i^2
    curvatures, sigma = np.array([0.0, 0.1, 0.4, 1.0]), np.array([1.0, 2.0, 1.0, 0.5])
    a = 1.5 * curvatures
    expected = (sigma**2 * a / (2 - a)).sum() / (sigma**2).sum()
    assert abs(cosine.snr(1.5, curvatures, 0, sigma) - expected) < 1e-12
    assert np.isnan(cosine.snr(2.5, curvatures, 0, sigma))  # a = 2.5 > a*(0) = 2: no stationary state
    with pytest.raises(ValueError, match="^snr needs curvatures >= 0$"):
        cosine.snr(0.1, [-1.0], 0)


def test_predicted_cosine_with_per_direction_noise_and_zero_curvature():
    # s = 0: cos = -sum w_i a_i/2 with w_i = sigma_i^2 E[g_i^2]/sigma_i^2 = sigma_i^2 * 2/(2 - a_i); a flat
    # direction (a = 0) adds sigma^2 to the denominator only
    curvatures, sigma = np.array([0.0, 0.3, 1.0]), np.array([1.0, 2.0, 0.5])
    a = 0.8 * curvatures
    weights = sigma**2 * 2 / (2 - a)
    assert abs(cosine.predicted_cosine(0.8, curvatures, 0, sigma) + (weights * a / 2).sum() / weights.sum()) < 1e-12
    # s = 1: cos_i = a_i/2 with weights sigma_i^2 * 2/((1 - a_i)(2 + a_i)) (cosine_s1)
    weights = sigma**2 * 2 / ((1 - a) * (2 + a))
    assert abs(cosine.predicted_cosine(0.8, curvatures, 1, sigma) - (weights * a / 2).sum() / weights.sum()) < 1e-12
    with pytest.raises(ValueError, match="^predicted_cosine needs curvatures >= 0 "):
        cosine.predicted_cosine(0.1, [-0.5, 1.0], 0)
    # an array of stalenesses in any order: unstable ones are nan, the others still computed
    values = cosine.predicted_cosine(0.8, curvatures, [8, 0, 1], sigma)
    assert np.isnan(values[0]) and values[1] == cosine.predicted_cosine(0.8, curvatures, 0, sigma)
    assert values[2] == cosine.predicted_cosine(0.8, curvatures, 1, sigma)


def test_gradient_moments_on_many_repeated_values():
    # more than one chunk of 256 distinct values, each repeated, in shuffled order: every entry gets its own value
    a = np.random.default_rng(3).permutation(np.repeat(np.linspace(0.001, 0.5, 300), 2))
    lag_one, second = cosine.gradient_moments(a, 1)
    assert np.allclose(lag_one / second, a / 2, rtol=1e-10, atol=0)
    assert np.allclose(second, 2 / ((1 - a) * (2 + a)), rtol=1e-10, atol=0)
    grid = a[:120].reshape(4, 30)  # any array shape: the same values entry by entry
    assert np.array_equal(cosine.gradient_moments(grid, 1)[1], cosine.gradient_moments(a[:120], 1)[1].reshape(4, 30))
    for staleness in (0, 1, 3):  # exactly at the boundary there is no stationary state either
        at_boundary = cosine.gradient_moments(float(stability_boundary_closed_form(staleness)), staleness)
        assert np.isnan(at_boundary[0][0]) and np.isnan(at_boundary[1][0])
    lag_one, second = cosine.gradient_moments(np.array([0.0, -0.1, 1.0, 0.3]), 1)  # a*(1) = 1
    assert lag_one[0] == 0.0 and second[0] == 1.0 and np.isnan(second[1:3]).all() and np.isnan(lag_one[1:3]).all()


def test_cosine_s1_numeric_values():
    values = np.array([0.05, 0.3, 0.9])
    assert np.allclose(cosine.cosine_s1(values), values / 2, rtol=1e-12, atol=0)


def test_spectra_are_the_documented_ones():
    log = cosine.spectrum("log", 50)
    assert log[0] == pytest.approx(1e-2) and log[-1] == pytest.approx(1.0)
    assert np.allclose(np.diff(np.log(log)), np.log(100) / 49)  # log-spaced
    uniform = cosine.spectrum("uniform", 20)
    assert uniform.size == 20 and uniform[0] == pytest.approx(0.05) and uniform[-1] == pytest.approx(1.0)
    for dim in (5, 40):  # 10 % of the directions at 1 (at least one), the rest at 0.05
        spiked = cosine.spectrum("spiked", dim)
        assert spiked.size == dim and (spiked == 1.0).sum() == max(1, dim // 10)
        assert (spiked[spiked != 1.0] == 0.05).all()
    random = cosine.spectrum("random", 30)
    assert random.size == 30 and random.max() == 1.0 and random.min() > 0 and np.unique(random).size == 30
    assert np.array_equal(random, cosine.spectrum("random", 30))  # fixed seed
    with pytest.raises(ValueError, match="unknown spectrum 'flat'"):
        cosine.spectrum("flat", 3)


def test_softmax_of_large_logits_and_bad_inputs():
    assert np.allclose(cosine.softmax(np.array([1000.0, 1000.0, 1000.0 + np.log(2)])), [0.25, 0.25, 0.5])
    with pytest.raises(ValueError, match="parametrization must be one of"):
        cosine.policy_logits(np.zeros(2), None, "linear")
    with pytest.raises(ValueError, match="baseline must be 'mean' or 'none'"):
        cosine.stale_data_gradient(np.zeros(3), np.zeros(3), np.ones(3), baseline="median")
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        cosine.gradient_autocovariance_symbolic(-1)
    with pytest.raises(ValueError, match="staleness >= 1"):
        cosine.cosine_series(0)


def test_series_curve_and_snr_bound_with_per_direction_noise_at_one_staleness():
    curvatures, sigma = np.array([0.0, 0.1, 0.3, 1.0]), np.array([1.0, 2.0, 0.7, 0.5])
    # s = 0 (exactly -a/2) and s = 1 (exactly a/2, so its series from order 1 on): the series curve is exact;
    # the SNR law is an equality at s = 0
    for staleness, eta in ((0, 1.2), (1, 0.6)):
        predicted = cosine.predicted_cosine(eta, curvatures, staleness, sigma)
        series = cosine.series_cosine(eta, curvatures, staleness, sigma)
        assert isinstance(series, float) and abs(series - predicted) < 1e-12
    bound = cosine.snr_bound(1.2, curvatures, 0, sigma)
    assert isinstance(bound, float) and abs(bound + cosine.predicted_cosine(1.2, curvatures, 0, sigma)) < 1e-12
    # s = 2, default order 2: per direction a/2 + a^2/2, weighted by sigma_i^2 E[g_i^2] (a/(2(1 - a)) exactly)
    a = 0.4 * curvatures
    derived = cosine.gradient_autocovariance_symbolic(2)  # E[g^2]/sigma^2 without the Lyapunov solve
    weights = sigma**2 * sp.lambdify(derived["a"], derived["second"])(a)
    expected = (weights * (a / 2 + a**2 / 2)).sum() / weights.sum()
    assert abs(cosine.series_cosine(0.4, curvatures, 2, sigma) - expected) < 1e-12
    a_sym = sp.Symbol("a", positive=True)
    assert sp.expand(cosine.cosine_series(2) - (a_sym / 2 + a_sym**2 / 2)) == 0  # the default order is 2
    assert np.isnan(cosine.series_cosine(1.2, curvatures, 2, sigma))  # past a*(2) = 0.618: no stationary state


def test_snr_law_samples_what_its_docstring_says(monkeypatch):
    # s in 0..16 (both s = 0 and s >= 1 drawn), eta*lambda_max in (0.05, 0.98) a*(s), sigma_i > 0, lambda_i >= 0
    calls, original = [], cosine.snr
    monkeypatch.setattr(cosine, "snr", lambda *args: calls.append(args) or original(*args))
    result = cosine.check_snr_law(spectra=15, seed=0)
    assert len(calls) == 15 and sum(result["cases"]) == 15
    for eta, curvatures, staleness, noise in calls:
        fraction = eta * curvatures.max() / float(stability_boundary_closed_form(staleness))
        assert 0.05 <= fraction <= 0.98 and 0 <= staleness <= 16 and 1 <= curvatures.size < 60
        assert (curvatures >= 0).all() and (noise > 0).all() and noise.shape == curvatures.shape
        assert np.isfinite(original(eta, curvatures, staleness, noise))


def test_default_baseline_and_parametrization():
    # the defaults (tabular, mean baseline, no importance weights): the stale gradient grad J(theta_b)
    rng = np.random.default_rng(4)
    theta, theta_b, rewards = rng.standard_normal(5), rng.standard_normal(5), rng.uniform(0, 1, 5)
    pi = np.exp(theta) / np.exp(theta).sum()
    assert abs(cosine.expected_reward(theta, rewards) - pi @ rewards) < 1e-12
    assert np.allclose(cosine.stale_data_gradient(theta, theta_b, rewards),
                       cosine.numeric_policy_gradient(theta_b, rewards), rtol=0, atol=1e-8)


def test_series_curve_passes_its_order_on():
    # s = 2, order 3: per direction a/2 + a^2/2 + s(s-1)a^3/4 = a/2 + a^2/2 + a^3/2 (the docstring's series)
    curvatures = np.array([0.2, 0.6, 1.0])
    a = 0.3 * curvatures
    derived = cosine.gradient_autocovariance_symbolic(2)
    weights = sp.lambdify(derived["a"], derived["second"])(a)
    expected = (weights * (a / 2 + a**2 / 2 + a**3 / 2)).sum() / weights.sum()
    assert abs(cosine.series_cosine(0.3, curvatures, 2, order=3) - expected) < 1e-12


# --- issue 23, theory v3 (last round): inputs the checks document but no fast test passed ---


def test_check_cosine_against_simulation_with_per_direction_noise():
    # the setting's noise may be per-direction sigma_i; the prediction must weight by it like the simulation does
    dim, staleness = 100, 2
    eta = 0.8 * float(stability_boundary_closed_form(staleness))
    sigma = cosine.anisotropic_noise(cosine.spectrum("log", dim))
    row = cosine.check_cosine_against_simulation([(eta, "log", staleness, sigma)], dim=dim, steps=300, burn_in=200)[0]
    weighted = cosine.predicted_cosine(eta, cosine.spectrum("log", dim), staleness, sigma)
    isotropic = cosine.predicted_cosine(eta, cosine.spectrum("log", dim), staleness)
    assert abs(weighted - isotropic) > 0.05  # the weights matter for this setting
    assert row["predicted"] == weighted
    assert abs(row["simulated"] - weighted) < 0.05  # d = 100, 300 steps


def test_snr_law_draws_cover_the_documented_ranges(monkeypatch):
    # the sampling alone, over many draws (snr and the cosine replaced by stubs that record their arguments):
    # every s in 0..16 occurs and no other, eta * lambda_max / a*(s) stays in (0.05, 0.98), spectra are not flat
    calls = []
    monkeypatch.setattr(cosine, "snr", lambda *args: calls.append(args) or 0.0)
    monkeypatch.setattr(cosine, "predicted_cosine", lambda *args: 0.0)
    result = cosine.check_snr_law(spectra=1000, seed=0)
    assert len(calls) == 1000 and sum(result["cases"]) == 1000
    stalenesses = {staleness for _, _, staleness, _ in calls}
    assert stalenesses == set(range(17))
    fractions = [eta * lam.max() / float(stability_boundary_closed_form(s)) for eta, lam, s, _ in calls]
    assert 0.05 <= min(fractions) and max(fractions) <= 0.98
    assert min(lam.size for _, lam, _, _ in calls) >= 1
    assert all(np.ptp(lam) > 0 for _, lam, _, _ in calls if lam.size > 1)  # random curvatures, not one value


def test_stale_data_check_is_seeded_and_uses_dim_parameters_for_the_feature_models(monkeypatch):
    first = cosine.check_stale_data_reduction(trials=2, actions=5, dim=3, seed=7)
    assert first == cosine.check_stale_data_reduction(trials=2, actions=5, dim=3, seed=7)
    sizes, original = set(), cosine.numeric_policy_gradient

    def recording(theta, rewards, features=None, parametrization="tabular"):
        sizes.add((parametrization, np.size(theta)))
        return original(theta, rewards, features, parametrization)

    monkeypatch.setattr(cosine, "numeric_policy_gradient", recording)
    cosine.check_stale_data_reduction(trials=1, actions=5, dim=3, seed=7)
    assert sizes == {("tabular", 5), ("loglinear", 3), ("tanh", 3)}


def test_numeric_policy_gradient_of_an_integer_theta():
    # theta given as integers (a natural input) is the same point as its float copy: no truncated gradient
    rewards, features = np.array([0.1, 0.9, 0.4]), np.array([[1.0, 0.0], [0.5, -1.0], [0.0, 2.0]])
    for parametrization, theta in (("tabular", np.array([0, 1, -1])), ("tanh", np.array([1, 0]))):
        got = cosine.numeric_policy_gradient(theta, rewards, features, parametrization)
        expected = cosine.numeric_policy_gradient(theta.astype(float), rewards, features, parametrization)
        assert got.dtype == np.float64 and np.array_equal(got, expected)
        assert np.abs(got).max() > 0.01
