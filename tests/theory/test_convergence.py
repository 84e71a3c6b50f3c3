"""Checks of theory.convergence: the sympy algebra, and the bound against measured GAC-SGD runs."""

import numpy as np
import pytest
import sympy as sp

from theory import convergence

# A subset of DEFAULT_SETTINGS that keeps the test under ~15 s: both problems, both noise regimes,
# fixed and bounded-random staleness, all three modes the theorem covers.
TEST_SETTINGS = [
    {"kind": kind, "staleness": s, "eta_fraction": frac, "mode": mode, "threshold": tau, "noise_std": noise}
    for noise, kind, s, frac in ((0.1, "quadratic", 0, 0.5), (1.0, "quadratic", 8, 0.5), (0.1, "wavy", 2, 0.1),
                                 (1.0, "wavy", 8, 0.5))
    for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3))
] + [{"kind": "quadratic", "staleness": 8, "eta_fraction": 0.5, "mode": "project", "threshold": 0.0,
      "noise_std": 1.0, "random_staleness": True}]


def test_step_size_condition_and_optimal_epsilon():
    e = convergence.bound_expression()
    sym = e["symbols"]
    # eta_max solves phi = 1 exactly and matches the numeric helper
    assert sp.simplify(e["phi"].subs(sym["eta"], e["eta_max"]) - 1) == 0
    for s, delta in ((1, 0.0), (4, 0.3), (16, 2.0)):
        exact = float(e["eta_max"].subs({sym["L"]: 2.0, sym["s"]: s, sym["delta"]: delta}))
        assert abs(exact - convergence.max_step_size(2.0, s, delta)) < 1e-12
    # the closed-form epsilon is the minimizer of (C + sigma_par2/eps)/(kappa - eps)
    values = {sym["C"]: 3.0, sym["sigma_par2"]: 0.2, sym["kappa"]: 0.7}
    eps_star = float(e["eps_opt"].subs(values))
    objective = lambda eps: (3.0 + 0.2 / eps) / (0.7 - eps)  # noqa: E731
    grid = np.linspace(1e-4, 0.7 - 1e-4, 20001)
    assert abs(eps_star - grid[np.argmin(objective(grid))]) < 1e-3


def test_optimal_step_size_sync():
    o = convergence.optimal_step_size_expression()
    sym = o["symbols"]
    values = {sym["L"]: 2.0, sym["T"]: 1000, sym["Delta"]: 5.0, sym["sigma2"]: 0.3}
    eta_star = float(o["eta_sync"].subs(values))
    assert abs(eta_star - np.sqrt(2 * 5.0 / (2.0 * 1000 * 0.3))) < 1e-12
    assert abs(float(o["rate_sync"].subs(values)) - 2 * np.sqrt(2 * 2.0 * 5.0 * 0.3 / 1000)) < 1e-12
    # numeric minimizer of the stale bound equals the cubic's root when the cap is not active
    eta_num = convergence.optimal_step_size(2.0, 5.0, 0.3, 4, 1000)
    grid = np.linspace(1e-4, convergence.max_step_size(2.0, 4), 200001)
    bound = 2 * 5.0 / (grid * 1000) + 2.0 * grid * 0.3 + 4.0 * grid**2 * 16 * 0.3
    assert abs(eta_num - grid[np.argmin(bound)]) < 1e-4


def test_bound_reduces_to_classical_without_gac():
    classical = 2 * 3.0 / (0.05 * 100) + (1.0 * 0.05 + 0.05**2 * 4) * 2.0
    assert abs(convergence.convergence_bound(1.0, 3.0, 2.0, 0.05, 2, 100, mode="none") - classical) < 1e-12
    # GAC with noise along the reference costs something; a lower retention costs more
    with_gac = convergence.convergence_bound(1.0, 3.0, 2.0, 0.05, 2, 100, "project", sigma_par2=0.04, retention=0.8)
    worse = convergence.convergence_bound(1.0, 3.0, 2.0, 0.05, 2, 100, "project", sigma_par2=0.04, retention=0.4)
    assert classical / 0.8 < with_gac < worse
    assert convergence.convergence_bound(1.0, 3.0, 2.0, 10.0, 2, 100, mode="none") == float("inf")


def test_skip_mode_is_not_claimed():
    with pytest.raises(ValueError, match="skip"):
        convergence.convergence_bound(1.0, 1.0, 1.0, 0.1, 1, 10, mode="skip")


def test_bound_holds_on_measured_runs():
    rows = convergence.check_bound(TEST_SETTINGS, dim=50, steps=300, seeds=32)
    for row in rows:
        # the theorem bounds the average over t; the minimum is below it
        assert row["measured_min"] <= row["measured_avg"] <= row["bound"], row
    # not vacuous: without GAC the bound is within a small factor of the measured average
    plain = [row["tightness_avg"] for row in rows if row["mode"] == "none"]
    assert max(plain) < 10.0, plain
