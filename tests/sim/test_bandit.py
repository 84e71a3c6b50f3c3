"""Bandits: determinism, grid = separate runs, closed-form rewards, the group-baseline reduction."""

import torch

from sim import bandit
from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit
from sim.grid import GridUpdater, setting
from tests.records import same_records

GRID = [setting("naive", 0, 0.2), setting("naive", 3, 0.2), setting("gac", 3, 0.2), setting("tis", 3, 0.2),
        setting("m2po", 3, 0.2), setting("lr_scale", 3, 0.2, staleness_kind="random")]


def test_determinism_and_grid_equals_alone():
    for problem in (GaussianBandit(dim=3), SoftmaxBandit(arms=4, contexts=3, features="linear", feature_dim=2)):
        a = run_bandit(problem, GRID, 15, seeds=2, seed=4, groups=2, group_size=4)
        assert same_records(a.records(), run_bandit(problem, GRID, 15, seeds=2, seed=4, groups=2,
                                                    group_size=4).records())
        for i, s in enumerate(GRID):
            alone = run_bandit(problem, [s], 15, seeds=2, seed=4, groups=2, group_size=4)
            assert torch.equal(a.traces["objective"][:, a.rows_of(i)], alone.traces["objective"]), (problem, s)


def test_gaussian_group_baseline_gives_gradient_at_behaviour_policy():
    """With group-mean advantages Σ_group A = 0, so the (μ_b − μ_t) part of the score cancels exactly."""
    problem = GaussianBandit(dim=3)
    updater = GridUpdater([setting("naive", 2, 0.1)], 1, problem.dim)
    weigh = bandit._SampleWeights(updater)
    mu, behaviour = torch.tensor([[0.3, -0.2, 0.5]], dtype=torch.float64), torch.tensor([[0.1, 0.0, 0.2]],
                                                                                          dtype=torch.float64)
    batch = bandit._gaussian_batch(problem, behaviour, torch.Generator().manual_seed(0), 1,
                                   torch.zeros(1, dtype=torch.long), 3, 8)
    stale = bandit._gaussian_gradient(problem, mu, mu, batch, "grpo", weigh)[0]
    onpolicy = bandit._gaussian_gradient(problem, behaviour, behaviour, batch, "grpo", weigh)[0]
    assert torch.allclose(stale, onpolicy, atol=1e-12)


def test_expected_rewards_match_monte_carlo():
    gen = torch.Generator().manual_seed(0)
    g = GaussianBandit(dim=3, policy_std=0.4)
    mu = torch.tensor([0.2, -0.5, 1.3], dtype=torch.float64)
    a = mu + 0.4 * torch.randn(200000, 3, generator=gen, dtype=torch.float64)
    mc = (-0.5 * (g.curvatures() * (a - g.target) ** 2).sum(-1)).mean()
    assert abs(float(g.expected_reward(mu[None])[0]) - float(mc)) < 0.01
    s = SoftmaxBandit(arms=4, contexts=2)
    theta = torch.randn(1, s.param_dim, generator=gen, dtype=torch.float64)
    feats, probs = s.tables()
    pi = s.logits(theta, feats).softmax(-1)[0]
    exact = float((pi * probs).sum(-1).mean())
    assert abs(float(s.expected_reward(theta)[0]) - exact) < 1e-12
    assert s.optimal_reward() >= exact


def test_full_importance_correction_at_sync_equals_none():
    problem = GaussianBandit(dim=3)
    settings = [setting("naive", 0, 0.2), setting("tis", 0, 0.2, tis_cap=1e9), setting("m2po", 0, 0.2)]
    r = run_bandit(problem, settings, 20, seeds=2, groups=2, group_size=4)
    for i in (1, 2):  # at s = 0 the ratio is exactly 1: nothing truncated or masked
        assert torch.allclose(r.traces["objective"][:, r.rows_of(0)], r.traces["objective"][:, r.rows_of(i)])
