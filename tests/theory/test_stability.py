"""Checks of theory.stability: closed-form boundary (exact and numeric) and random-staleness mean-square boundary."""

import itertools

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


# --- issue 23, theory v3: small exact cases that judge the checks' own bookkeeping (fast, no Monte-Carlo tolerance) ---


def test_a_radius_of_exactly_one_is_not_stable():
    # marginal stability (a root on the unit circle) is not asymptotic stability: a = 0 leaves the root z = 1
    for s in (0, 1, 4):
        assert stability.spectral_radius(0.0, s) == 1.0
        assert stability.stability_map([0.0, 0.1], [s], method="roots").tolist() == [[False, True]]
    # the bisection treats radius == 1 as unstable too: a step radius that is exactly 1 from 0.25 on
    boundary = stability._last_stable(lambda a: 1.0 if a >= 0.25 else 0.5, 0.0, 1.0, 1e-10)
    assert abs(boundary - 0.25) < 1e-9


def test_derivation_identities_hold_numerically():
    # each step of boundary_derivation evaluated at sampled (s, omega) with plain floats, no sympy simplification
    d = stability.boundary_derivation()
    s_sym, w_sym = d["s"], d["omega"]
    for s, w in ((1, 0.3), (2.5, 1.1), (7, 2.9)):
        at = {s_sym: s, w_sym: w}
        assert abs(float(d["imag_part"].subs(at)) - (np.sin(w * (s + 1)) - np.sin(w * s))) < 1e-12
        assert abs(float(d["product_form"].subs(at)) - float(d["imag_part"].subs(at))) < 1e-12
        assert abs(float(d["modulus_sq"].subs(at)) - abs(np.exp(1j * w) - 1) ** 2) < 1e-12
        assert abs(float(d["modulus_sq_closed"].subs(at)) - abs(np.exp(1j * w) - 1) ** 2) < 1e-12
    for s in (0, 1, 5):  # at omega*, a* the polynomial z^{s+1} - z^s + a has the root e^{i omega*}
        omega, a = float(d["omega_star"].subs(s_sym, s)), float(d["a_star"].subs(s_sym, s))
        z = np.exp(1j * omega)
        assert abs(z ** (s + 1) - z**s + a) < 1e-12


def test_mean_square_check_without_delay_is_exact():
    # s_max = 0 has no randomness: x_t = (1 - a)^t on every path, so the Monte Carlo equals the recursion to rounding
    # and both growths over the last half (steps 12..24) are (1 - a)^24, at a = 0.8 and 1.25 times the boundary 2
    result = stability.check_mean_square_random(0, paths=500, steps=24, seed=0)
    assert abs(result["boundary"] - 2.0) < 1e-6 and result["a_star_fixed"] == 2.0
    for side, factor in (("below", 0.8), ("above", 1.25)):
        a = result[side]["a"]
        assert a == factor * result["boundary"]
        assert result[side]["max_z"] < 1.0  # the relative rounding guard, not a statistical spread
        exact = (1.0 - a) ** 24
        assert abs(result[side]["predicted_growth"] / exact - 1) < 1e-9
        assert abs(result[side]["measured_growth"] / exact - 1) < 1e-9


def test_mean_square_check_is_seeded():
    first = stability.check_mean_square_random(2, paths=400, steps=10, seed=3)
    assert first == stability.check_mean_square_random(2, paths=400, steps=10, seed=3)
    other = stability.check_mean_square_random(2, paths=400, steps=10, seed=4)
    assert other["below"]["measured_growth"] != first["below"]["measured_growth"]
    assert other["below"]["predicted_growth"] == first["below"]["predicted_growth"]


def test_predicted_second_moment_against_every_delay_sequence():
    # E[x_t^2] exactly: the average over all (s_max + 1)^t equally likely delay sequences, each run as a plain loop
    a, max_staleness, steps, x0 = 0.7, 2, 5, 1.5
    predicted = stability.predicted_second_moment(a, max_staleness, steps, x0=x0)
    for t in range(steps + 1):
        squares = []
        for delays in itertools.product(range(max_staleness + 1), repeat=t):
            xs = [x0] * (max_staleness + 1)  # x_{-s_max}, ..., x_0
            for delay in delays:
                xs.append(xs[-1] - a * xs[-1 - delay])
            squares.append(xs[-1] ** 2)
        assert abs(predicted[t] - np.mean(squares)) < 1e-12 * max(1.0, np.mean(squares)), t
