"""Checks of theory.convergence: each proof step on sampled instances, exact Lyapunov tightness, measured runs."""

import inspect

import numpy as np
import pytest
import sympy as sp
import torch

from theory import convergence, cosine

# A subset of DEFAULT_SETTINGS that keeps the test short: both problems, both noise regimes,
# fixed and bounded-random staleness, all three modes the theorem covers.
TEST_SETTINGS = [
    {"kind": kind, "staleness": s, "eta_fraction": frac, "mode": mode, "threshold": tau, "noise_std": noise}
    for noise, kind, s, frac in ((0.1, "quadratic", 0, 0.5), (1.0, "quadratic", 8, 0.5), (0.1, "wavy", 2, 0.1),
                                 (1.0, "wavy", 8, 0.5))
    for mode, tau in (("none", 0.0), ("project", 0.0), ("cap", 0.3))
] + [{"kind": "quadratic", "staleness": 8, "eta_fraction": 0.5, "mode": "project", "threshold": 0.0,
      "noise_std": 1.0, "random_staleness": True}]

# Noise-dominated runs at small step sizes: the bound must not grow like 1/eta there.
SMALL_STEP_SETTINGS = [{"kind": "quadratic", "staleness": s, "eta_fraction": frac, "mode": mode, "threshold": tau,
                        "noise_std": 1.0}
                       for s in (0, 8) for frac in (0.1, 0.03, 0.01) for mode, tau in (("none", 0.0), ("project", 0.0))]


def test_step_size_condition():
    e = convergence.bound_expression()
    sym = e["symbols"]
    assert sp.simplify(e["phi"].subs(sym["gamma"], e["gamma_opt"]) - 1) == 0
    for L, s in ((1.0, 1), (2.0, 4), (0.5, 16)):
        eta = convergence.max_step_size(L, s)
        assert abs(float(e["phi"].subs({sym["L"]: L, sym["s"]: s, sym["eta"]: eta, sym["gamma"]: 0})) - 1) < 1e-12


def test_max_step_size_solves_each_branch_step_condition():
    # independent of how the root is found: the returned eta puts phi (gamma -> 0) exactly at 1
    for L, s in ((1.0, 1), (2.0, 4), (0.5, 16)):
        x = L * convergence.max_step_size(L, s, mode="none")
        assert abs(x + x * x * s * s - 1) < 1e-12
        x = L * convergence.max_step_size(L, s, mode="project")
        assert abs(x + (1 + x) * x * x * s * s - 1) < 1e-12
    assert convergence.max_step_size(4.0, 0) == convergence.max_step_size(4.0, 0, mode="none") == 0.25
    for mode in ("none", "project"):  # finite just below the largest step, infinite at it
        eta_max = convergence.max_step_size(2.0, 3, mode)
        assert np.isfinite(convergence.convergence_bound(2.0, 1.0, 1.0, 0.999 * eta_max, 3, 100, mode, 0.1))
        assert convergence.convergence_bound(2.0, 1.0, 1.0, eta_max, 3, 100, mode, 0.1) == float("inf")


def test_readable_statement_is_the_bound_the_code_evaluates():
    # bound_expression (the notebook's sympy statement, gamma at its optimum) and convergence_bound agree
    e = convergence.bound_expression()
    sym = e["symbols"]
    cases = ((1.0, 0.3, 1, 50, 2.0, 3.0, 0.2), (2.5, 0.7, 4, 10, 0.5, 1.0, 1.0), (0.5, 0.05, 8, 1000, 7.0, 0.3, 0.05))
    for L, eta_frac, s, T, delta, sigma2, sigma_par2 in cases:
        eta = eta_frac * convergence.max_step_size(L, s)
        values = {sym["L"]: L, sym["eta"]: eta, sym["s"]: s, sym["T"]: T, sym["Delta"]: delta, sym["sigma2"]: sigma2,
                  sym["sigma_par2"]: sigma_par2}
        gamma = e["gamma_opt"].subs(values)
        assert abs(float(e["phi"].subs({**values, sym["gamma"]: gamma})) - 1) < 1e-12
        stated = float(e["bound"].subs({**values, sym["gamma"]: gamma}))
        code = convergence.convergence_bound(L, delta, sigma2, eta, s, T, "project", sigma_par2)
        assert abs(stated / code - 1) < 1e-12
        eta = eta_frac * convergence.max_step_size(L, s, mode="none")
        values[sym["eta"]] = eta
        gamma_none = (1 - L * eta) / (L * eta * s) ** 2 - 1  # phi_0 = L eta + (1 + gamma) L^2 eta^2 s^2 = 1
        stated = float(e["bound_none"].subs({**values, sym["gamma"]: gamma_none}))
        assert abs(stated / convergence.convergence_bound(L, delta, sigma2, eta, s, T, "none") - 1) < 1e-12


@pytest.mark.parametrize("argument", ["eta", "L", "T", "sigma2", "sigma_par2", "staleness"])
def test_each_bad_bound_argument_is_rejected(argument):
    good = {"L": 1.0, "delta_f": 1.0, "sigma2": 1.0, "eta": 0.1, "staleness": 1, "T": 10, "sigma_par2": 0.1}
    bad = {**good, argument: 0 if argument in ("eta", "L", "T") else -1}
    message = "^convergence_bound needs eta, L, T > 0 and sigma2, sigma_par2, staleness >= 0$"
    with pytest.raises(ValueError, match=message):
        convergence.convergence_bound(**bad)
    convergence.convergence_bound(**{**good, argument: 0 if argument not in ("eta", "L", "T") else good[argument]})


def test_step_one_decision_bias_lemma_holds_and_is_tight():
    # |p beta| <= sigma_par sqrt(K) on sampled noise laws and decisions; the adversarial law gets within 1 %
    worst = convergence.check_decision_bias(cases=200)
    assert 0.98 < worst < 1.0  # strictly: every sampled law is inside Cauchy-Schwarz, the adversarial one at sqrt(eps)


@pytest.mark.parametrize("mode", ["project", "none"])
def test_step_two_one_step_inequality_on_sampled_instances(mode):
    result = convergence.check_one_step(cases=300, mode=mode)
    assert result["max_excess"] <= 1e-12, result  # exact expectations: the inequality holds on every instance
    if mode != "none":
        assert result["bias_used"] > 0.9, result  # the decision-bias constant b cannot be halved


@pytest.mark.parametrize("staleness", [1, 2, 4, 8, 16])
def test_step_three_window_term_covers_the_window_noise_within_a_constant(staleness):
    sigma_par2 = 1.0 / 50  # isotropic noise in 50 dimensions, sigma^2 = 1 per unit
    window = convergence.gac_terms(1.0, 0.1, staleness, 1.0, sigma_par2)[1]
    measured = convergence.window_noise_energy(staleness, "gac", paths=1000)
    assert measured <= window <= 2.5 * measured  # linear in s: an s^2 window would be 2s times too big
    worst_bias = convergence.window_noise_energy(staleness, "bias", paths=4000)  # (s + s^2)/4, all along d
    assert abs(worst_bias - (staleness + staleness**2) / 4) < 0.1 * (staleness + staleness**2) / 4
    assert worst_bias <= convergence.gac_terms(1.0, 0.1, staleness, 1.0, 1.0)[1]


@pytest.mark.parametrize("mode", ["none", "project"])
def test_noise_terms_against_exact_lyapunov_at_small_steps(mode):
    # the stationary bound and the exact E f'^2 of plain delayed SGD (a GAC process with c = 0), order by order
    for staleness in (0, 1, 2, 4, 8, 16):
        result = convergence.noise_term_coefficients(staleness, mode)
        (first, second), (exact_first, exact_second) = result["bound"], result["exact"]
        assert abs(first / exact_first - 2) < 1e-2  # L eta sigma^2: a factor 2 above the exact a/2
        if staleness:  # the eta^2 (staleness) coefficient: s (none) or 2s (GAC) against (2s+1)/4, linear in s
            ratio = second / exact_second
            assert (1.3 < ratio < 2.0) if mode == "none" else (2.6 < ratio < 4.0), (staleness, ratio)


def test_noise_free_run_is_bounded_by_the_descent_term():
    # sigma = 0: the bound is 2 Delta/(eta T) alone (any dropped or halved base term is caught here)
    rows = convergence.check_bound([{"kind": "quadratic", "staleness": s, "eta_fraction": 0.5, "mode": mode,
                                     "threshold": 0.0, "noise_std": 0.0} for s in (0, 2) for mode in ("none", "cap")],
                                   dim=20, steps=200, seeds=1)
    for row in rows:
        assert row["measured_kept"] <= row["bound"] < 20 * row["measured_kept"], row


@pytest.mark.heavy
def test_tightness_example_noise_terms_linear_in_staleness():
    a = sp.Symbol("a", positive=True)
    for s in range(0, 7):
        series = convergence.stationary_gradient_energy_series(s, order=2)
        assert sp.expand(series - (a / 2 + (2 * s + 1) * a**2 / 4)) == 0
    # exact stationary E f'^2 of plain delayed SGD (Lyapunov) against the bound with T -> infinity
    for s in (0, 1, 4, 8):
        eta_max = convergence.max_step_size(1.0, s)
        for frac in (1e-3, 0.1, 0.5, 0.9):
            eta = frac * eta_max
            exact = cosine.snr(eta, [1.0], s)  # sigma = 1, lambda = L = 1
            bound = convergence.convergence_bound(1.0, 0.0, 1.0, eta, s, 10**12, mode="none")
            gac_bound = convergence.convergence_bound(1.0, 0.0, 1.0, eta, s, 10**12, "project", sigma_par2=0.0)
            assert exact <= bound and exact <= gac_bound, (s, frac)
            if frac == 1e-3:
                assert bound / exact < 2.05  # the leading term L*eta*sigma^2 is tight to a factor 2


def test_skip_mode_is_not_claimed_and_bad_input_rejected():
    with pytest.raises(ValueError, match="skip"):
        convergence.convergence_bound(1.0, 1.0, 1.0, 0.1, 1, 10, mode="skip")
    with pytest.raises(ValueError):
        convergence.convergence_bound(1.0, 1.0, -1.0, 0.1, 1, 10)
    assert convergence.convergence_bound(1.0, 3.0, 2.0, 10.0, 2, 100, mode="none") == float("inf")


@pytest.mark.heavy
def test_bound_holds_on_measured_runs():
    rows = convergence.check_bound(TEST_SETTINGS, dim=50, steps=300, seeds=32)
    for row in rows:
        assert row["measured_kept"] <= row["bound"], row
        assert row["measured_min"] <= row["measured_avg"]
    plain = [row["bound_over_kept"] for row in rows if row["mode"] == "none"]
    assert max(plain) < 10.0, plain  # not vacuous


@pytest.mark.heavy
def test_bound_at_small_steps_on_noise_dominated_runs():
    rows = convergence.check_bound(SMALL_STEP_SETTINGS, dim=50, steps=300, seeds=32)
    for row in rows:
        assert row["measured_kept"] <= row["bound"], row
        assert row["bound_over_kept"] <= 20.0, row


@pytest.mark.heavy
def test_stationary_tightness_rows_against_the_exact_stationary_energy():
    # plain SGD at s = 0 on f = sum lambda_i x_i^2 / 2: E||grad f||^2 = sum_i eta lambda_i sigma^2 / (2 - eta lambda_i)
    # 1000 steps suffice at eta = 0.1 (the slowest variance mixes in 1/(2 eta lambda_min) = 10 steps): 16 seeds x 500
    # averaged steps ~ 800 independent samples per direction, a 2 % standard error on the 10 % tolerance below
    dim, fraction = 6, 0.1
    rows = convergence.stationary_tightness(fractions=(fraction,), stalenesses=(0,), modes=("none", "project"), dim=dim,
                                            seeds=16, transient_steps=100, min_steps=1000)
    curvatures = np.linspace(0.5, 1.0, dim)  # the spectrum the docstring states
    eta = fraction * convergence.max_step_size(1.0, 0)
    exact = float(np.sum(eta * curvatures / (2 - eta * curvatures)))
    plain, gac_row = rows
    assert (plain["mode"], gac_row["mode"]) == ("none", "project") and plain["eta"] == eta
    assert plain["steps"] == gac_row["steps"] == 1000  # max(min_steps, 5 / (eta lambda_min)) = max(1000, 100)
    assert abs(plain["stationary_kept"] / exact - 1) < 0.1, (plain, exact)
    for row in rows:
        assert row["stationary_kept"] <= row["stationary_bound"] and row["transient_kept"] <= row["transient_bound"]
        assert row["transient_kept"] > 3 * row["stationary_kept"]  # the transient starts at U(-3, 3)^P, far away
        assert row["stationary_ratio"] == row["stationary_bound"] / row["stationary_kept"]
        assert row["transient_ratio"] == row["transient_bound"] / row["transient_kept"]
    # the stationary bound is the T -> infinity one: L eta sigma^2 (+ the decision-bias floor with GAC)
    assert abs(plain["stationary_bound"] - eta * dim) < 2 * dim / (eta * 1000) + 1e-12


@pytest.mark.heavy
def test_decision_bias_floor_is_real():
    rows = convergence.decision_bias_floor_example(etas=(0.1, 0.01, 0.001), dim=20, steps=3000, seeds=8)
    small = rows[-1]
    # plain SGD's gradient energy shrinks with eta; the kept energy under this GAC rule does not
    assert small["plain"] < 0.02 and small["kept"] > 0.1
    assert small["kept"] > 0.3 * rows[1]["kept"]
    for row in rows:
        assert row["kept"] <= row["bound"], row
    assert np.isfinite(small["bound"])


@pytest.mark.parametrize("case", ["independent", "minibatches"])
def test_bound_holds_inside_the_assumptions_including_one_pass_over_minibatches(case):
    for mode in ("none", "project"):
        row = convergence.run_assumption_case(case, mode, steps=1000, seeds=4)
        assert row["breaks"] == "inside" and row["ratio"] <= 1.0, row


@pytest.mark.parametrize("case,mode", [("epochs", "none"), ("epochs_minibatches", "none"),
                                       ("reference_uses_noise", "project")])
def test_runs_outside_the_assumptions_exceed_the_bound(case, mode):
    # reused noise (A3) and a reference built from the current noise (A4): the claim fails, as theory/README says
    row = convergence.run_assumption_case(case, mode, steps=1000, seeds=4)
    assert row["breaks"] != "inside" and row["ratio"] > 1.3, row


def test_delay_chosen_after_the_noise_raises_the_kept_energy_but_not_past_the_bound():
    # (A2) broken: the delay whose step descends least, picked knowing the noise; theory/README: 1.585 vs 1.292
    # (independent), the bound with s = 4 still holds
    chosen = convergence.run_assumption_case("delay_after_noise", "none", steps=1000, seeds=4)
    independent = convergence.run_assumption_case("independent", "none", steps=1000, seeds=4)
    assert chosen["breaks"] == "A2" and chosen["staleness"] == 4
    assert chosen["kept"] > 1.1 * independent["kept"], (chosen, independent)
    assert chosen["ratio"] < 1.0, chosen


def test_assumption_case_rejects_unknown_names():
    with pytest.raises(ValueError, match="case must be one of"):
        convergence.run_assumption_case("shared_noise", "none")


# ---------------------------------------------------------------------------------------------
# Fast cases of the simulations, each against a direct loop written from the docstrings (numpy, one seed at a time,
# GAC's projection and cap by hand); the loops draw the same torch random numbers in the same order
# ---------------------------------------------------------------------------------------------


def gac_by_hand(g, d, tau, mode):
    """(g', c, acted): GAC on one vector; c = 1 − γ is the share of g's part along d̂ that is removed."""
    d_norm, g_norm = np.linalg.norm(d), np.linalg.norm(g)
    cos = g @ d / (g_norm * d_norm) if d_norm > 0 and g_norm > 0 else 0.0
    if mode == "none" or not cos > tau:
        return g, 0.0, False
    along = (g @ d / d_norm**2) * d
    across = g - along
    gamma = 0.0 if mode == "project" else tau * np.linalg.norm(across) / (np.linalg.norm(along) * np.sqrt(1 - tau**2))
    return across + gamma * along, 1.0 - gamma, True


def direct_gac_sgd(curvatures, x0, wavy, eta, staleness, steps, noise_std, seeds, mode, tau=0.0, random=False,
                   seed=0):
    """run_gac_sgd's process per seed: θ_{t+1} = θ_t − η GAC(∇f(θ_{t−s_t}) + ξ_t, previous raw gradient)."""
    gen = torch.Generator().manual_seed(seed)
    delays, noises = [], []
    for _ in range(steps):
        delays.append(torch.randint(0, staleness + 1, (seeds,), generator=gen).numpy() if random
                      else np.full(seeds, staleness))
        noises.append(noise_std * torch.randn((seeds, len(x0)), generator=gen, dtype=torch.float64).numpy())
    lam = np.asarray(curvatures, dtype=float)

    def grad_f(x):  # ψ(x) = x²/2 + 3 sin²x: ψ' = x + 6 sin x cos x
        return lam * (x + 6 * np.sin(x) * np.cos(x)) if wavy else lam * x

    grad_sq, kept_sq, acted = np.zeros((steps, seeds)), np.zeros((steps, seeds)), np.zeros((steps, seeds))
    for j in range(seeds):
        thetas = [np.array(x0, dtype=float)]  # θ_0, θ_1, ...; θ_{t−k} = θ_0 for t < k
        previous = np.zeros(len(x0))
        for t in range(steps):
            true_grad = grad_f(thetas[t])
            g = grad_f(thetas[max(t - delays[t][j], 0)]) + noises[t][j]
            applied, c, act = gac_by_hand(g, previous, tau, mode)
            along = true_grad @ previous / np.linalg.norm(previous) if act else 0.0
            grad_sq[t, j], kept_sq[t, j], acted[t, j] = true_grad @ true_grad, true_grad @ true_grad - c * along**2, act
            previous = g
            thetas.append(thetas[t] - eta * applied)
    return {"grad_sq": grad_sq.mean(1), "kept_sq": kept_sq.mean(1), "acted": acted.mean(1)}


@pytest.mark.parametrize("kind,staleness,mode,tau,random", [
    ("quadratic", 0, "none", 0.0, False), ("quadratic", 2, "project", 0.0, False), ("wavy", 3, "cap", 0.3, True),
    ("wavy", 1, "project", 0.2, False)])
def test_run_gac_sgd_against_a_direct_loop(kind, staleness, mode, tau, random):
    curvatures = torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)
    x0 = torch.tensor([2.0, -1.5, 0.7], dtype=torch.float64)
    problem = convergence.Problem(kind, curvatures, x0)
    eta = 0.3 * convergence.max_step_size(problem.smoothness, staleness)
    run = convergence.run_gac_sgd(problem, eta, staleness, 30, 0.4, 3, mode, tau, random, seed=7)
    direct = direct_gac_sgd(curvatures.numpy(), x0.numpy(), kind == "wavy", eta, staleness, 30, 0.4, 3, mode, tau,
                            random, seed=7)
    for key in ("grad_sq", "kept_sq", "acted"):
        assert run[key].shape == (30,)
        np.testing.assert_allclose(run[key], direct[key], rtol=1e-9, atol=1e-12, err_msg=key)
    if mode != "none":
        assert 0 < run["acted"].mean() < 1  # the case exercises both regimes


def test_stationary_tightness_small_case_against_direct_loops():
    # the docstring's setup: λ evenly spaced in [0.5, 1], GAC project τ = 0, transient from θ_0 ~ U(−3, 3)^P over
    # transient_steps, stationary from θ_0 = 0 over max(min_steps, 5/(η λ_min)) steps, averaged over the second half
    dim, seeds, noise_std, seed = 3, 2, 0.6, 3
    rows = convergence.stationary_tightness(fractions=(0.5,), stalenesses=(0, 2), modes=("none", "project"),
                                            dim=dim, seeds=seeds, noise_std=noise_std, transient_steps=15,
                                            min_steps=40, seed=seed)
    curvatures = np.linspace(0.5, 1.0, dim)
    x0 = (6.0 * torch.rand(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) - 3.0).numpy()
    sigma2, sigma_par2 = dim * noise_std**2, noise_std**2
    expected = [(s, mode, fraction) for s in (0, 2) for mode in ("none", "project") for fraction in (0.5,)]
    assert [(r["staleness"], r["mode"], r["fraction"]) for r in rows] == expected
    lengths = set()
    for row in rows:
        s, mode, eta = row["staleness"], row["mode"], row["fraction"] * convergence.max_step_size(1.0, row["staleness"])
        steps = max(40, int(5 / (eta * 0.5)))
        lengths.add(steps)
        transient = direct_gac_sgd(curvatures, x0, False, eta, s, 15, noise_std, seeds, mode, seed=seed)
        stationary = direct_gac_sgd(curvatures, np.zeros(dim), False, eta, s, steps, noise_std, seeds, mode, seed=seed)
        f0 = 0.5 * curvatures @ x0**2
        want = {"eta": eta, "steps": steps, "transient_kept": transient["kept_sq"].mean(),
                "transient_bound": convergence.convergence_bound(1.0, f0, sigma2, eta, s, 15, mode, sigma_par2),
                "stationary_kept": stationary["kept_sq"][steps // 2:].mean(),
                "stationary_bound": convergence.convergence_bound(1.0, 0.0, sigma2, eta, s, steps, mode, sigma_par2)}
        want["transient_ratio"] = want["transient_bound"] / want["transient_kept"]
        want["stationary_ratio"] = want["stationary_bound"] / want["stationary_kept"]
        assert set(row) == {"staleness", "mode", "fraction", *want}
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-9), (key, row)
    assert len(lengths) == 2  # both branches of the max: min_steps (s = 0) and 5/(η λ_min) (s = 2)


def test_decision_bias_floor_small_case_against_a_direct_loop():
    # f = ½‖θ‖², θ_0 = 0, reference ∇f(θ_t) = θ_t, τ_t = ‖θ‖/√(‖θ‖² + Pσ_n²), project; plain SGD on the same noise
    etas, dim, steps, seeds, noise_std = (0.3, 0.05), 4, 40, 2, 0.8
    rows = convergence.decision_bias_floor_example(etas, dim, steps, seeds, noise_std=noise_std, seed=5)
    gen = torch.Generator().manual_seed(5)
    noise = [noise_std * torch.randn((len(etas), seeds, dim), generator=gen, dtype=torch.float64).numpy()
             for _ in range(steps)]
    for k, (eta, row) in enumerate(zip(etas, rows, strict=True)):
        kept, plain = [], []
        for j in range(seeds):
            theta, theta_plain = np.zeros(dim), np.zeros(dim)
            for t in range(steps):
                tau = np.linalg.norm(theta) / np.sqrt(theta @ theta + dim * noise_std**2)
                applied, _, acted = gac_by_hand(theta + noise[t][k, j], theta, tau, "project")
                if t >= steps // 2:
                    kept.append(0.0 if acted else theta @ theta)  # d̂ = ∇̂: acting removes all of ∇
                    plain.append(theta_plain @ theta_plain)
                theta, theta_plain = theta - eta * applied, theta_plain - eta * (theta_plain + noise[t][k, j])
        bound = convergence.convergence_bound(1.0, 0.0, dim * noise_std**2, eta, 0, steps, "project", noise_std**2)
        assert row == pytest.approx({"eta": eta, "kept": np.mean(kept), "plain": np.mean(plain), "bound": bound},
                                    rel=1e-9)
        assert 0 < row["kept"] and 0 < row["plain"]


def test_stationary_gradient_energy_series_at_its_default_order():
    # the exact SNR's series in a = ηλ: a/2 + (2s+1)a²/4 (docstring); at a small a it is the Lyapunov value
    a = sp.Symbol("a", positive=True)
    series = convergence.stationary_gradient_energy_series(2)
    assert sp.expand(series - (a / 2 + 5 * a**2 / 4)) == 0
    assert abs(float(series.subs(a, 1e-3)) / cosine.snr(1e-3, [1.0], 2) - 1) < 1e-5


def test_problem_gradient_is_the_derivative_of_its_value():
    x = torch.tensor([[0.3, -2.0, 2.613, 1.918], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    curvatures = torch.tensor([1.0, 0.4, 0.7, 0.2], dtype=torch.float64)
    for kind in ("quadratic", "wavy"):
        problem = convergence.Problem(kind, curvatures, x[0].detach())
        value = problem.value(x)
        assert value.shape == (2,) and value[1] == 0.0  # f* = 0 at x = 0
        (autograd,) = torch.autograd.grad(value.sum(), x)
        torch.testing.assert_close(problem.gradient(x.detach()), autograd, rtol=1e-12, atol=1e-12)
    # wavy ψ = x²/2 + 3 sin²x: ψ(π) = π²/2; stationary points at |x| ≈ 1.918 (local max) and 2.613 (local min)
    wavy = convergence.Problem("wavy", torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64))
    assert float(wavy.value(torch.tensor([np.pi], dtype=torch.float64))) == pytest.approx(np.pi**2 / 2, rel=1e-12)
    for point, sign in ((1.918, -1.0), (2.613, 1.0)):
        grads = [float(wavy.gradient(torch.tensor([point + h], dtype=torch.float64))) for h in (-1e-3, 1e-3)]
        assert sign * grads[0] < 0 < sign * grads[1]
    assert wavy.smoothness == 7.0  # ψ'' = 1 + 6 cos 2x ≤ 7
    assert convergence.Problem("quadratic", 2 * torch.ones(3), torch.zeros(3)).smoothness == 2


def test_make_problem_spectrum_and_start():
    problem = convergence.make_problem("wavy", 4000, seed=11)
    curvatures, x0 = problem.curvatures, problem.x0
    assert problem.kind == "wavy" and curvatures.shape == x0.shape == (4000,)
    assert curvatures.dtype == x0.dtype == torch.float64  # the runs are in float64
    assert float(curvatures.max()) == 1.0 and 0.05 <= float(curvatures.min()) < 0.06  # U(0.05, 1), λ_max set to 1
    assert -3.0 <= float(x0.min()) < -2.99 and 2.99 < float(x0.max()) < 3.0  # U(−3, 3)
    again, other = convergence.make_problem("wavy", 4000, seed=11), convergence.make_problem("wavy", 4000, seed=12)
    assert torch.equal(again.curvatures, curvatures) and torch.equal(again.x0, x0)
    assert not torch.equal(other.curvatures, curvatures) and not torch.equal(other.x0, x0)


def direct_assumption_case(case, mode, eta, dim, steps, seeds, noise_std, seed):
    """run_assumption_case's process per seed, from ASSUMPTION_CASES: f = ½‖θ‖² (∇f = θ), θ_0 = 0."""
    minibatches = 2 if case in ("minibatches", "epochs_minibatches") else 1
    rollout = {"minibatches": 2, "epochs": 4, "epochs_minibatches": 8}.get(case, 1)
    gen = torch.Generator().manual_seed(seed)
    draws = {t: noise_std * torch.randn((minibatches, seeds, dim), generator=gen, dtype=torch.float64).numpy()
             for t in range(0, steps, rollout)}
    kept = []
    for j in range(seeds):
        thetas, previous = [np.zeros(dim)], np.zeros(dim)
        for t in range(steps):
            theta, noise = thetas[t], draws[t - t % rollout][t % minibatches, j]
            reference = previous
            if case == "reference_uses_noise":  # d = ∇̂ + ξ̂⊥ (0 where ∇ = 0)
                if theta @ theta > 0:
                    unit = theta / np.linalg.norm(theta)
                    across = noise - (noise @ unit) * unit
                    reference = unit + across / np.linalg.norm(across)
                else:
                    reference = np.zeros(dim)
            if case == "delay_after_noise":  # the delay k ≤ 4 whose applied step descends least along ∇f(θ_t)
                candidates = [thetas[max(t - k, 0)] + noise for k in range(5)]
                grad = min(candidates, key=lambda g: gac_by_hand(g, reference, 0.0, mode)[0] @ theta)
            elif case == "minibatches":  # both minibatches at the rollout's θ
                grad = thetas[t - t % rollout] + noise
            else:
                grad = theta + noise
            applied, c, acted = gac_by_hand(grad, reference, 0.0, mode)
            along = theta @ reference / np.linalg.norm(reference) if acted else 0.0
            if t >= steps // 2:
                kept.append(theta @ theta - c * along**2)
            previous = grad
            thetas.append(theta - eta * applied)
    return float(np.mean(kept))


@pytest.mark.parametrize("case,mode", [("independent", "cap"), ("minibatches", "project"), ("epochs", "none"),
                                       ("epochs_minibatches", "cap"), ("delay_after_noise", "project"),
                                       ("delay_after_noise", "none"),
                                       ("reference_uses_noise", "project")])
def test_run_assumption_case_small_case_against_a_direct_loop(case, mode):
    eta, dim, steps, seeds, noise_std = 0.3, 3, 21, 2, 0.5  # odd steps: the second half starts at steps // 2
    row = convergence.run_assumption_case(case, mode, eta, dim, steps, seeds, noise_std, seed=4)
    kept = direct_assumption_case(case, mode, eta, dim, steps, seeds, noise_std, seed=4)
    staleness = {"minibatches": 1, "delay_after_noise": 4}.get(case, 0)
    bound = convergence.convergence_bound(1.0, 0.0, dim * noise_std**2, eta, staleness, steps, mode, noise_std**2)
    assert set(row) == {"case", "mode", "breaks", "staleness", "kept", "bound", "ratio"}
    assert (row["case"], row["mode"], row["breaks"]) == (case, mode, convergence.ASSUMPTION_CASES[case][0])
    assert {k: row[k] for k in ("staleness", "kept", "bound", "ratio")} == pytest.approx(
        {"staleness": staleness, "kept": kept, "bound": bound, "ratio": kept / bound}, rel=1e-9)


def test_check_bound_rows_are_the_runs_and_the_bound_the_docstring_names(monkeypatch):
    # each row: η = eta_fraction·η_max(L, s), the run of its setting (random staleness only where the setting asks),
    # the bound with σ² = P·noise_std², σ_∥² = noise_std², Δ = f(x0), T = steps, and the measured averages of that run
    calls = []

    def recorded(problem, *args, **kwargs):
        calls.append((problem, args, kwargs, original(problem, *args, **kwargs)))
        return calls[-1][-1]

    original = convergence.run_gac_sgd
    monkeypatch.setattr(convergence, "run_gac_sgd", recorded)
    settings = [{"kind": "quadratic", "staleness": 2, "eta_fraction": 0.3, "mode": "project", "threshold": 0.2,
                 "noise_std": 0.5, "random_staleness": True},
                {"kind": "wavy", "staleness": 1, "eta_fraction": 0.5, "mode": "cap", "threshold": 0.4,
                 "noise_std": 0.3}]
    rows = convergence.check_bound(settings, dim=4, steps=15, seeds=2)
    assert len(rows) == len(calls) == 2
    for setting, row, (problem, args, kwargs, run) in zip(settings, rows, calls, strict=True):
        L, s, noise = problem.smoothness, setting["staleness"], setting["noise_std"]
        eta = setting["eta_fraction"] * convergence.max_step_size(L, s)
        assert problem.kind == setting["kind"] and problem.x0.shape == (4,)
        passed = inspect.signature(original).bind(problem, *args, **kwargs).arguments
        assert {k: v for k, v in passed.items() if k not in ("problem", "seed")} == {
            "eta": eta, "staleness": s, "steps": 15, "noise_std": noise, "seeds": 2,
            "mode": setting["mode"], "threshold": setting["threshold"],
            "random_staleness": setting.get("random_staleness", False)}
        bound = convergence.convergence_bound(L, float(problem.value(problem.x0)), 4 * noise**2, eta, s, 15,
                                              setting["mode"], sigma_par2=noise**2)
        kept = float(run["kept_sq"].mean())
        want = {**setting, "eta": eta, "L": L, "bound": bound, "measured_kept": kept,
                "measured_min": float(run["grad_sq"].min()), "measured_avg": float(run["grad_sq"].mean()),
                "bound_over_kept": bound / kept, "retention": float(run["kept_sq"].sum() / run["grad_sq"].sum()),
                "acted": float(run["acted"].mean())}
        assert set(row) == set(want)
        assert {k: v for k, v in row.items() if k not in ("kind", "mode")} == pytest.approx(
            {k: v for k, v in want.items() if k not in ("kind", "mode")}, rel=1e-12)
        assert 0 < row["acted"] < 1 and 0 < row["retention"] < 1


@pytest.mark.parametrize("mode", ["project", "none"])
def test_one_step_inequality_is_attained_and_the_bias_share_is_at_most_one(mode):
    # not vacuous: without GAC some instance meets step 2 with equality (to rounding); with GAC it comes within
    # 1e-3 of it, and the bias term's share stays ≤ 1 (the docstring's bound), 0 where b = 0
    result = convergence.check_one_step(cases=300, mode=mode)
    if mode == "none":
        assert abs(result["max_excess"]) < 1e-12 and result["bias_used"] == 0.0, result
    else:
        assert -1e-3 < result["max_excess"] <= 1e-12 and 0.9 < result["bias_used"] < 1.0, result


def test_sampled_checks_repeat_exactly_for_one_seed():
    # same seed, same numbers (the reliability rule); another seed, other instances
    assert convergence.check_decision_bias(cases=12, seed=3) == convergence.check_decision_bias(cases=12, seed=3)
    assert convergence.check_one_step(cases=12, seed=3) == convergence.check_one_step(cases=12, seed=3)
    assert convergence.check_one_step(cases=12, seed=3) != convergence.check_one_step(cases=12, seed=4)
    for law in ("gac", "bias"):
        first = convergence.window_noise_energy(3, law, paths=50, dim=5, seed=2)
        assert first == convergence.window_noise_energy(3, law, paths=50, dim=5, seed=2)
        assert first != convergence.window_noise_energy(3, law, paths=50, dim=5, seed=5)


def test_window_noise_energy_against_a_direct_loop():
    # law "gac": signal u = 2·1, previous raw gradient u + ξ as reference, project τ = 0, E‖Σ_k D_k ξ_k‖² / P
    staleness, paths, dim, seed = 3, 6, 4, 9
    gen = torch.Generator().manual_seed(seed)
    first = torch.randn(paths, dim, generator=gen, dtype=torch.float64).numpy()
    noises = [torch.randn(paths, dim, generator=gen, dtype=torch.float64).numpy() for _ in range(staleness)]
    energies = []
    for j in range(paths):
        previous, total = 2.0 + first[j], np.zeros(dim)
        for noise in noises:
            _, c, _ = gac_by_hand(2.0 + noise[j], previous, 0.0, "project")
            unit = previous / np.linalg.norm(previous)
            total += noise[j] - c * (noise[j] @ unit) * unit  # D_k ξ_k = ξ_k − c_k⟨d̂, ξ_k⟩d̂
            previous = 2.0 + noise[j]
        energies.append(total @ total)
    measured = convergence.window_noise_energy(staleness, "gac", paths=paths, dim=dim, seed=seed)
    assert measured == pytest.approx(np.mean(energies) / dim, rel=1e-10)
