"""Checks of theory.placement: GAC on the gradient, the first moment or the update of a momentum optimizer."""

import numpy as np
import pytest
import sympy as sp

from theory import gac_stability, placement
from theory.stability import stability_boundary_closed_form


@pytest.mark.heavy
def test_state_matrix_matches_transfer_function_polynomial():
    result = placement.check_characteristic_polynomial(stalenesses=(0, 1, 3), draws=6)
    assert result["max_error"] < 1e-9, result
    assert result["gradient_equals_update"]  # the two filters commute: same linear system at equal rho


@pytest.mark.heavy
def test_boundaries_reduce_to_known_cases():
    for s in (0, 1, 4):
        plain = float(stability_boundary_closed_form(s))
        assert abs(placement.stability_boundary(s, 0.0, 0.0, "none") - plain) < 1e-8
        for space in placement.GAC_PLACEMENTS:  # without momentum every space is theory.gac_stability's filter
            filtered = gac_stability.gac_stability_boundary(s, 0.4)
            assert abs(placement.stability_boundary(s, 0.0, 0.4, space) - filtered) < 1e-8
    for beta in (0.5, 0.9):  # s = 0 heavy ball (EMA form) loses stability at z = -1: a(1 - beta) = 2(1 + beta)
        assert abs(placement.stability_boundary(0, beta, 0.0, "none") - 2 * (1 + beta) / (1 - beta)) < 1e-7
        assert abs(placement.stability_boundary(3, beta, 0.3, "step_cut")
                   - placement.stability_boundary(3, beta, 0.0, "none") / 0.7) < 1e-7


def test_slow_mode_gain_is_the_root_near_one():
    assert placement.check_slow_mode_gain() < 1e-3
    # momentum space removes rho m~ from every later moment: at beta = 0.9, rho = 0.5 an 11x step cut, not 2x
    assert abs(placement.slow_mode_gain(0.9, 0.5, "momentum") - 0.05 / 0.55) < 1e-12


def test_slow_mode_gain_check_fails_on_naive_momentum_gain(monkeypatch):
    right = placement.slow_mode_gain
    monkeypatch.setattr(placement, "slow_mode_gain",
                        lambda beta, rho, space: 1 - rho if space == "momentum" else right(beta, rho, space))
    assert placement.check_slow_mode_gain() > 0.1


FIXED_RHO_SETTINGS = [(2, 0.9, 0.5, 0.3), (0, 0.9, 0.6, 5.0), (4, 0.5, 0.3, 0.2)]
"""(s, beta, rho, a) of the fixed-filter check: strong momentum, s = 0 far beyond plain SGD's a = 2, mild momentum."""


def _fixed_rho_errors(settings=FIXED_RHO_SETTINGS, dim=200, steps=1200):
    errors = []
    for s, beta, rho, a in settings:
        for space in placement.PLACEMENTS:
            run = placement.simulate(np.ones(dim), a, s, beta, space, rho=rho, steps=steps, seeds=2, seed=1)
            errors.append(abs(run["cos_ratio"] - placement.predicted_update_cosine(a, [1.0], s, beta, rho, space)))
    return errors


@pytest.mark.heavy
def test_lyapunov_cosine_matches_direct_simulation_and_fails_on_wrong_momentum_semantics(monkeypatch):
    assert max(_fixed_rho_errors()) < 0.015
    # mutation: store the uncontrolled moment, so the removed part returns through beta*m (the update-space system)
    monkeypatch.setitem(placement.OPTIMIZER_STEPS, "momentum", lambda g, m, q, beta, rho: (
        beta * m + (1 - beta) * g, beta * m + (1 - beta) * g, beta * m + (1 - beta) * g - rho * q))
    assert max(_fixed_rho_errors(settings=FIXED_RHO_SETTINGS[:1])) > 0.1


def check_noise_limit(betas=(0.5, 0.9, 0.99), a: float = 1e-5, staleness: int = 4) -> float:
    """max |closed form − Lyapunov| of ρ* and cos(Δθ) at a tiny a (one direction, where both converge as a → 0)."""
    worst = 0.0
    for beta in betas:
        closed = placement.noise_limit(beta)
        for where in placement.PLACEMENTS:
            rho = (placement.self_consistent_rho(a, [1.0], staleness, beta, where)
                   if where in placement.GAC_PLACEMENTS else 0.0)
            cosine = placement.predicted_update_cosine(a, [1.0], staleness, beta, rho, where)
            worst = max(worst, abs(rho - closed[where]["rho"]), abs(cosine - closed[where]["cosine"]))
    return worst


def test_noise_limit_closed_forms():
    beta = sp.Symbol("beta", positive=True)
    closed = placement.noise_limit(beta)
    rho = closed["momentum"]["rho"]
    assert sp.simplify(beta * rho**2 + rho - beta) == 0  # the fixed point of the AR(2) lag-one correlation
    assert sp.simplify(beta / (1 + beta * rho) - rho) == 0
    assert abs(placement.noise_limit(0.9)["momentum"]["cosine"] - 0.3116) < 1e-4
    assert check_noise_limit() < 1e-3  # against the Lyapunov solve at a = 1e-5


def test_noise_limit_check_fails_on_a_wrong_closed_form(monkeypatch):
    right = placement.noise_limit

    def wrong(beta):
        out = right(beta)
        out["momentum"]["cosine"] = out["momentum"]["rho"] ** 3  # forgets E[u²] = (1 − ρ²)γ₀
        return out

    monkeypatch.setattr(placement, "noise_limit", wrong)
    assert check_noise_limit(betas=(0.9,)) > 0.05


def test_noise_limit_fails_when_momentum_reference_is_the_stored_moment(monkeypatch):
    def reference_is_stored(g, m, q, beta, rho):
        formed = beta * m + (1 - beta) * g
        kept = formed - rho * q
        return kept, kept, kept

    monkeypatch.setitem(placement.OPTIMIZER_STEPS, "momentum", reference_is_stored)
    assert check_noise_limit(betas=(0.9,)) > 0.05


def _spiked(staleness, beta, dim):
    top = placement.stability_boundary(staleness, beta, 0.0, "none")
    curvatures = np.full(dim, 0.05 * top)
    curvatures[: dim // 10] = 1.0
    return curvatures, top


def test_momentum_keeps_the_update_aligned_in_sync_and_async():
    # without GAC, cos(dtheta) ~ beta at small steps for every staleness, sync included: the EMA's own correlation
    for s in (0, 1, 4, 16):
        assert abs(placement.predicted_update_cosine(0.01, [1.0], s, 0.9, 0.0, "none") - 0.9) < 0.01


@pytest.mark.heavy
def test_self_consistent_rho_and_update_cosine_match_real_gac():
    # real GAC (gac.control, project, tau = 0) in each space, beta = 0.9, s = 4, top mode at 0.9 a*_none
    curvatures, top = _spiked(4, 0.9, 300)
    eta = 0.9 * top
    for space in placement.GAC_PLACEMENTS:
        rho = placement.self_consistent_rho(eta, curvatures, 4, 0.9, space)
        run = placement.simulate(curvatures, eta, 4, 0.9, space, steps=1200, seeds=2, seed=2)
        assert abs(run["rho_bar"] - rho) < 0.02, (space, rho, run["rho_bar"])
        cosine = placement.predicted_update_cosine(eta, curvatures, 4, 0.9, rho, space)
        assert abs(run["cos_ratio"] - cosine) < 0.02, (space, cosine, run["cos_ratio"])
    # the placement decides what is measured: raw gradients are barely aligned, the moment and the step are
    assert placement.self_consistent_rho(eta, curvatures, 4, 0.9, "gradient") < 0.1
    assert placement.self_consistent_rho(eta, curvatures, 4, 0.9, "update") > 0.85


@pytest.mark.heavy
def test_adam_preconditioner_matches_running_second_moment():
    curvatures, top = _spiked(2, 0.9, 200)
    noise = np.geomspace(0.3, 3.0, 200)
    eta = 0.2
    frozen = placement.adam_preconditioner(eta, curvatures, 2, 0.9, noise)
    run = placement.simulate(curvatures, eta, 2, 0.9, "none", rho=0.0, noise=noise, adam_beta2=0.999, steps=3000,
                             seeds=2, seed=3)
    assert np.max(np.abs(run["precond"] / frozen - 1)) < 0.1
    assert np.max(eta * frozen * curvatures) < top  # the preconditioned top mode stays inside a*_none


def test_bad_arguments_rejected():
    with pytest.raises(ValueError, match="placement"):
        placement.stability_boundary(2, 0.9, 0.3, "optimizer")
    with pytest.raises(ValueError, match="beta"):
        placement.closed_loop(0.1, 2, 1.0, 0.3, "update")
    with pytest.raises(ValueError, match="rho"):
        placement.closed_loop(0.1, 2, 0.9, -0.1, "update")
    with pytest.raises(ValueError, match="staleness"):
        placement.closed_loop(0.1, -1, 0.9, 0.1, "update")
    with pytest.raises(ValueError, match="GAC placement"):
        placement.self_consistent_rho(0.1, [1.0], 2, 0.9, "step_cut")
