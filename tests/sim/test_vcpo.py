"""VCPO's pieces (sim.stabilizers): the effective sample size of importance weights, the ESS-scaled step factor and
the least-variance off-policy baseline, each against an independent computation; and VCPO in the bandits (sim/bandit.py,
sim/grid.py): step sizes, ESS and rewards against a plain numpy loop, the softmax baseline against a group-by-group
loop with autograd scores, each with a mutation the comparison catches."""

import math

import numpy as np
import pytest
import torch

from sim import bandit, grid, stabilizers
from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit
from sim.grid import GridUpdater, setting
from sim.quadratic import QuadraticProblem, run_quadratic
from sim.stabilizers import effective_sample_size, vcpo_baseline, vcpo_step_factor

F64 = torch.float64


def kish_by_loop(weights: list[float]) -> float:
    total = 0.0
    squares = 0.0
    for w in weights:
        total += w
        squares += w * w
    return total * total / squares


def test_ess_matches_a_plain_loop_row_by_row_and_its_limits():
    generator = torch.Generator().manual_seed(0)
    log_ratio = 1.5 * torch.randn(6, 32, generator=generator, dtype=torch.float64)  # heavy-tailed w = e^{log r}
    ess, ratio = effective_sample_size(log_ratio.exp())
    for row in range(6):
        expected = kish_by_loop(log_ratio[row].exp().tolist())
        assert float(ess[row]) == pytest.approx(expected, rel=1e-12)
        assert float(ratio[row]) == pytest.approx(expected / 32, rel=1e-12)
    assert bool((ratio > 0).all() and (ratio <= 1).all())
    equal, one_hot = torch.ones(1, 16), torch.zeros(1, 16)
    one_hot[0, 3] = 5.0
    assert effective_sample_size(equal)[0].item() == pytest.approx(16)  # every sample counts
    assert effective_sample_size(one_hot)[1].item() == pytest.approx(1 / 16)  # one sample carries everything
    scaled = effective_sample_size(7.0 * log_ratio.exp())[0]
    assert torch.allclose(scaled, ess, rtol=1e-12)  # only relative weights matter


def test_ess_leaves_padding_out_of_the_sums_and_the_count():
    weights = torch.tensor([[0.5, 2.0, 1.0, 9.0, 9.0], [1.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    valid = torch.tensor([[True, True, True, False, False], [False] * 5])
    ess, ratio = effective_sample_size(weights, valid)
    assert float(ess[0]) == pytest.approx(kish_by_loop([0.5, 2.0, 1.0]))
    assert float(ratio[0]) == pytest.approx(kish_by_loop([0.5, 2.0, 1.0]) / 3)
    assert float(ess[1]) == 0.0 and float(ratio[1]) == 0.0  # nothing valid: no information, no NaN


@pytest.mark.parametrize("ratio, reference, power", [(0.25, 1.0, 0.5), (0.25, 1.0, 1.0), (0.3, 0.6, 0.5),
                                                     (0.9, 0.6, 0.5), (1.0, 1.0, 0.5), (0.0, 1.0, 0.5)])
def test_step_factor_is_the_clipped_power_of_the_ess_ratio(ratio, reference, power):
    expected = math.pow(min(1.0, ratio / reference), power)
    assert vcpo_step_factor(ratio, reference, power) == pytest.approx(expected)
    as_tensor = torch.tensor(ratio, dtype=torch.float64)
    assert float(vcpo_step_factor(as_tensor, reference, power)) == pytest.approx(expected)


def test_step_factor_square_root_rule_quarter_ess_halves_the_step():
    assert vcpo_step_factor(0.25) == pytest.approx(0.5)  # defaults: ρ_ref = 1, power ½ (Adam-like)
    assert vcpo_step_factor(0.25, power=1.0) == pytest.approx(0.25)  # SGD: linear in ESS


@pytest.mark.parametrize("reference, power", [(0.0, 0.5), (1.5, 0.5), (1.0, 0.0), (1.0, -1.0)])
def test_step_factor_refuses_bad_parameters(reference, power):
    with pytest.raises(ValueError, match="reference_ratio|power"):
        vcpo_step_factor(0.5, reference, power)


def test_baseline_minimizes_the_weighted_estimators_second_moment():
    """Independent check: Σ_i ‖w_i (R_i − b) s_i‖² is a parabola in b; fit it at five b values (numpy) and take its
    vertex; VCPO's closed form must sit there, and moving off it must raise the second moment."""
    generator = torch.Generator().manual_seed(3)
    groups, size, dim = 4, 8, 5
    rewards = torch.rand(groups, size, generator=generator, dtype=torch.float64)
    weights = (0.8 * torch.randn(groups, size, generator=generator, dtype=torch.float64)).exp()
    scores = torch.randn(groups, size, dim, generator=generator, dtype=torch.float64) * \
        torch.rand(groups, size, 1, generator=generator, dtype=torch.float64)
    baseline = vcpo_baseline(rewards, weights, (scores * scores).sum(-1))

    def second_moment(group: int, b: float) -> float:
        terms = (weights[group] * (rewards[group] - b))[:, None] * scores[group]
        return float((terms * terms).sum())

    for group in range(groups):
        probes = np.linspace(-1.0, 2.0, 5)
        a2, a1, _ = np.polyfit(probes, [second_moment(group, b) for b in probes], 2)
        assert float(baseline[group]) == pytest.approx(-a1 / (2 * a2), rel=1e-9)
        best = second_moment(group, float(baseline[group]))
        assert best < second_moment(group, float(baseline[group]) + 0.01)
        assert best < second_moment(group, float(rewards[group].mean()))  # better than the plain group mean here


def test_baseline_with_equal_weights_and_norms_is_the_mean_and_with_none_falls_back_to_it():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    ones = torch.ones_like(rewards)
    assert float(vcpo_baseline(rewards, ones, 3.0 * ones)) == pytest.approx(0.6)
    assert float(vcpo_baseline(rewards, torch.zeros_like(rewards), ones)) == pytest.approx(0.6)


def test_vcpo_is_a_step_control_of_the_stale_data_model_that_the_quadratic_refuses():
    assert stabilizers.parse_method("vcpo").step == "vcpo"
    assert stabilizers.parse_method("gac+vcpo").name == "gac+vcpo"
    with pytest.raises(ValueError, match="does not apply"):
        stabilizers.parse_method("vcpo", stabilizers.STALE_GRADIENT)
    with pytest.raises(ValueError, match="two step controls"):
        stabilizers.parse_method("vcpo+kl_target")
    with pytest.raises(ValueError, match="does not apply to the stale-gradient model") as err:  # never run as naive
        run_quadratic(QuadraticProblem(dim=3), [setting("vcpo", 2, 0.1)], 2, seeds=1)
    assert "\n" not in str(err.value)
    updater = GridUpdater([setting("vcpo", 2, 0.1)], seeds=1, dim=3)
    zeros = torch.zeros(1, 3, dtype=F64)
    with pytest.raises(ValueError, match="vcpo needs the ESS") as err:  # a caller without weights: refused, not naive
        updater.update(zeros, zeros, zeros, torch.tensor([2]), torch.tensor([True]))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs", [dict(vcpo_reference_ratio=0.0), dict(vcpo_reference_ratio=1.5),
                                    dict(vcpo_power=0.0)])
def test_vcpo_config_refuses_bad_values(kwargs):
    with pytest.raises(ValueError, match="vcpo_"):
        stabilizers.VCPOConfig(**kwargs)


def test_sequence_weights_are_the_exponentiated_sums_of_valid_token_log_ratios_up_to_one_scale():
    generator = torch.Generator().manual_seed(1)
    log_ratio = torch.randn(3, 6, 4, generator=generator, dtype=torch.float64)
    mask = torch.rand(3, 6, 4, generator=generator) < 0.7
    weights = stabilizers.sequence_weights(log_ratio, mask.double())
    for row in range(3):
        direct = [math.exp(sum(log_ratio[row, i, t].item() for t in range(4) if mask[row, i, t])) for i in range(6)]
        assert weights[row].tolist() == pytest.approx([d / max(direct) for d in direct], rel=1e-12)
    huge = stabilizers.sequence_weights(torch.full((1, 2, 3), 400.0, dtype=torch.float64), torch.ones(1, 2, 3))
    assert huge.tolist() == [[1.0, 1.0]]  # exp(1200) would overflow; the common scale is divided out


def test_logit_score_norm_equals_autograd_of_the_log_softmax():
    """Σ_t ‖∇_z log softmax(z_t)[y_t]‖² over valid tokens, against autograd on random logits (independent)."""
    generator = torch.Generator().manual_seed(2)
    logits = torch.randn(5, 3, 7, generator=generator, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 7, (5, 3), generator=generator)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1]], dtype=torch.float64)
    expected = torch.zeros(5, dtype=torch.float64)
    for i in range(5):
        for t in range(3):
            if mask[i, t]:
                (grad,) = torch.autograd.grad(torch.log_softmax(logits[i, t], -1)[tokens[i, t]], logits)
                expected[i] += (grad * grad).sum()
    logp_all = torch.log_softmax(logits.detach(), -1)
    token_logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
    got = stabilizers.logit_score_sq(logp_all, token_logp, mask)
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-15)


GAUSS = GaussianBandit(dim=3, condition_number=4.0, policy_std=0.5, reward_noise=0.1)
GROUPS, GROUP_SIZE = 4, 4


def hand_gaussian_vcpo(staleness: int, lr: float, updates: int, reference: float, power: float, baseline: bool,
                       steps: int, seed: int) -> dict[str, np.ndarray]:
    """One Gaussian-bandit run of vcpo (plain SGD, objective none), written out in numpy: per update the weights
    w_i = π_μ(a_i)/π_b(a_i) of its samples, Kish's ESS by a loop, η·min(1, (ESS/N)/ρ_ref)^power, and, with the
    baseline, b = Σ c_i r_i / Σ c_i per group, c_i = (π_prox/π_b)² ‖(a_i − μ_prox)/σ²‖². Per step: the mean step size
    and ESS/N over its updates, and the expected reward after it (what run_bandit records)."""
    sigma, h = GAUSS.policy_std, GAUSS.curvatures().numpy()
    gen = torch.Generator().manual_seed(seed)
    history = [np.zeros(GAUSS.dim)]
    out = {"lr": [], "ess_ratio": [], "objective": []}
    for t in range(steps):
        torch.rand(1, generator=gen, dtype=F64)  # the staleness draw (fixed staleness ignores it)
        eps = torch.randn(1, GROUPS, GROUP_SIZE, GAUSS.dim, generator=gen, dtype=F64)[0].numpy()
        noise = torch.randn(1, GROUPS, GROUP_SIZE, generator=gen, dtype=F64)[0].numpy()
        b = history[max(0, t - staleness)]
        actions = b + sigma * eps
        rewards = -0.5 * (h * (actions - GAUSS.target) ** 2).sum(-1) + GAUSS.reward_noise * noise
        mu, per, lrs, ratios = history[-1].copy(), GROUPS // updates, [], []
        proximal = mu.copy()
        for k in range(updates):
            a, r = actions[k * per:(k + 1) * per], rewards[k * per:(k + 1) * per]
            log_density = lambda m, a=a: -((a - m) ** 2).sum(-1) / (2 * sigma ** 2)  # normaliser cancels
            total = squares = 0.0
            for w in np.exp(log_density(mu) - log_density(b)).ravel():
                total, squares = total + w, squares + w * w
            ratio = total * total / squares / a[..., 0].size
            step_lr = lr * min(1.0, ratio / reference) ** power
            prox_weight = np.exp(log_density(proximal) - log_density(b))
            advantages = np.empty_like(r)
            for g in range(per):
                centre = r[g].mean()
                if baseline:
                    num = den = 0.0
                    for i in range(GROUP_SIZE):
                        score = (a[g, i] - proximal) / sigma ** 2
                        c = prox_weight[g, i] ** 2 * float(score @ score)
                        num, den = num + c * r[g, i], den + c
                    centre = num / den
                advantages[g] = (r[g] - centre) / (r[g].std() + 1e-6)
            grad = -(advantages[..., None] * (a - mu) / sigma ** 2).mean(axis=(0, 1))
            mu = mu - step_lr * grad
            lrs.append(step_lr)
            ratios.append(ratio)
        history.append(mu)
        out["lr"].append(np.mean(lrs))
        out["ess_ratio"].append(np.mean(ratios))
        out["objective"].append(float(GAUSS.expected_reward(torch.tensor(mu)[None])[0]))
    return {name: np.array(values) for name, values in out.items()}


VCPO_CASES = [  # (updates per batch, ρ_ref, power, baseline)
    (1, 1.0, 0.5, True),
    (2, 0.8, 1.0, True),
    (1, 1.0, 0.5, False),
]


def gaussian_vcpo_mismatches(updates, reference, power, baseline, staleness=3, lr=0.15, steps=12,
                             seed=4) -> list[str]:
    """The recorded traces that differ from the numpy loop (empty: all agree to 1e-9)."""
    run = run_bandit(GAUSS, [setting("vcpo", staleness, lr, vcpo_reference_ratio=reference, vcpo_power=power,
                                     vcpo_baseline=baseline)],
                     steps, seeds=1, seed=seed, groups=GROUPS, group_size=GROUP_SIZE, updates_per_batch=updates)
    expected = hand_gaussian_vcpo(staleness, lr, updates, reference, power, baseline, steps, seed)
    assert expected["ess_ratio"].min() < 0.8 * reference  # the factor cuts the step in this run: the check can fail
    return [name for name, values in expected.items()
            if not np.allclose(run.traces[name][:, 0].numpy(), values, rtol=1e-9, atol=1e-12)]


@pytest.mark.parametrize("updates, reference, power, baseline", VCPO_CASES)
def test_gaussian_bandit_vcpo_steps_ess_and_rewards_equal_a_numpy_loop(updates, reference, power, baseline):
    assert gaussian_vcpo_mismatches(updates, reference, power, baseline) == []


def test_a_wrong_step_factor_is_caught(monkeypatch):
    """The factor's power ignored (ESS/N itself, capped at 1): the recorded step sizes no longer match."""
    monkeypatch.setattr(grid.stabilizers, "vcpo_step_factor", lambda ratio, reference, power: ratio.clamp(max=1.0))
    assert "lr" in gaussian_vcpo_mismatches(*VCPO_CASES[0])


@pytest.mark.parametrize("wrong", [lambda rewards, weights, norms: rewards.mean(-1),
                                   lambda rewards, weights, norms: (weights * norms * rewards).sum(-1)
                                   / (weights * norms).sum(-1)], ids=["group_mean", "weight_not_squared"])
def test_a_wrong_baseline_is_caught(monkeypatch, wrong):
    monkeypatch.setattr(bandit, "vcpo_baseline", wrong)
    assert "objective" in gaussian_vcpo_mismatches(*VCPO_CASES[0])


SOFTMAX = SoftmaxBandit(arms=4, contexts=3, features="linear", feature_dim=3)


def softmax_vcpo_gradient(theta, proximal, behaviour, batch_seed=0, groups=3, group_size=5):
    """(the simulator's gradient for a vcpo row, the same from a group-by-group loop with autograd scores)."""
    feats, probs = SOFTMAX.tables()
    weigh = bandit._SampleWeights(GridUpdater([setting("vcpo", 2, 0.1)], seeds=1, dim=SOFTMAX.param_dim))
    batch = bandit._softmax_batch(SOFTMAX, feats, probs, behaviour, torch.Generator().manual_seed(batch_seed), 1,
                                  torch.zeros(1, dtype=torch.long), groups, group_size)
    got = bandit._softmax_gradient(SOFTMAX, theta, proximal, batch, "grpo", weigh)[0][0]
    _, phi, actions, rewards, _ = batch

    def log_pi(params: torch.Tensor, g: int, i: int) -> torch.Tensor:
        logits = phi[0, g] @ params.reshape(SOFTMAX.n_features, SOFTMAX.arms)
        return torch.log_softmax(logits, -1)[actions[0, g, i]]

    surrogate = torch.zeros((), dtype=F64)
    at = theta[0].clone().requires_grad_(True)
    for g in range(groups):
        r = rewards[0, g]
        num = den = 0.0
        for i in range(group_size):
            prox = proximal[0].clone().requires_grad_(True)
            (score,) = torch.autograd.grad(log_pi(prox, g, i), prox)  # the real ∇_θ log π_prox(a_i), all of θ
            weight = math.exp(float(log_pi(proximal[0], g, i) - log_pi(behaviour[0], g, i)))
            c = weight ** 2 * float(score @ score)
            num, den = num + c * float(r[i]), den + c
        advantages = (r - num / den) / (r.std(unbiased=False) + 1e-6)
        for i in range(group_size):
            surrogate = surrogate + advantages[i] * log_pi(at, g, i)
    (expected,) = torch.autograd.grad(-surrogate / (groups * group_size), at)
    return got, expected


def test_softmax_bandit_vcpo_baseline_equals_a_group_by_group_loop_with_autograd_scores():
    generator = torch.Generator().manual_seed(7)
    theta, proximal, behaviour = (torch.randn(1, SOFTMAX.param_dim, generator=generator, dtype=F64)
                                  for _ in range(3))
    got, expected = softmax_vcpo_gradient(theta, proximal, behaviour)
    assert torch.allclose(got, expected, rtol=1e-10, atol=1e-13)
    plain = bandit._softmax_gradient  # and the baseline matters here: GRPO's group mean gives another gradient
    feats, probs = SOFTMAX.tables()
    batch = bandit._softmax_batch(SOFTMAX, feats, probs, behaviour, torch.Generator().manual_seed(0), 1,
                                  torch.zeros(1, dtype=torch.long), 3, 5)
    naive = plain(SOFTMAX, theta, proximal, batch, "grpo",
                  bandit._SampleWeights(GridUpdater([setting("naive", 2, 0.1)], seeds=1, dim=SOFTMAX.param_dim)))[0]
    assert not torch.allclose(naive[0], expected, rtol=1e-6)


def test_softmax_baseline_with_the_score_at_theta_instead_of_proximal_is_caught(monkeypatch):
    """Mutation: the baseline's weights and scores taken at the update's θ instead of the step's start."""
    real = bandit._softmax_gradient
    monkeypatch.setattr(bandit, "_softmax_gradient", lambda problem, theta, proximal, *rest:
                        real(problem, theta, theta, *rest))
    generator = torch.Generator().manual_seed(7)
    theta, proximal, behaviour = (torch.randn(1, SOFTMAX.param_dim, generator=generator, dtype=F64)
                                  for _ in range(3))
    got, expected = softmax_vcpo_gradient(theta, proximal, behaviour)
    assert not torch.allclose(got, expected, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("problem", [GAUSS, SOFTMAX], ids=["gaussian", "contextual"])
def test_ess_ratio_is_one_on_policy_and_below_one_on_stale_data(problem):
    """At s = 0 with one update per batch every weight π_θ/π_b is 1: ESS/N = 1 exactly, VCPO's step is η, and
    vcpo without its baseline is sync bit for bit. Stale rows record ESS/N < 1 (so the check can fail)."""
    settings = [setting("naive", 0, 0.2), setting("vcpo", 0, 0.2, vcpo_baseline=False), setting("tis", 0, 0.2),
                setting("naive", 3, 0.2), setting("vcpo", 3, 0.2)]
    run = run_bandit(problem, settings, 15, seeds=2, seed=1, groups=GROUPS, group_size=GROUP_SIZE)
    ess = run.traces["ess_ratio"]
    for i in range(3):
        assert bool((ess[:, run.rows_of(i)] == 1.0).all()), settings[i]
    assert bool((run.traces["lr"][:, run.rows_of(1)] == 0.2).all())
    assert torch.equal(run.traces["objective"][:, run.rows_of(0)], run.traces["objective"][:, run.rows_of(1)])
    for i in (3, 4):
        assert float(ess[1:, run.rows_of(i)].max()) <= 1.0 and float(ess[3:, run.rows_of(i)].min()) < 1.0
    records = run.records()
    assert {r["ess_ratio"] for r in records if r["staleness"] == 0} == {1.0}
