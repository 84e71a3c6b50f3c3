"""The toys' new optimizer, GAC spaces, braking, KL-target step, K updates per batch and clipped ratio, each
against a hand-written float64 loop of one run, and a mutation of each that the comparison catches."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from sim import bandit, grid
from sim.bandit import GaussianBandit, run_bandit
from sim.grid import GridUpdater, setting
from sim.quadratic import NoiseStream, QuadraticProblem, run_quadratic

F64 = torch.float64


def project(g: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """GAC's one-directional projection at τ = 0, written out: remove g's part along d when cos(g, d) > 0."""
    gd, dd, gg = float(g @ d), float(d @ d), float(g @ g)
    if dd == 0 or gg == 0 or gd / math.sqrt(gg * dd) <= 0:
        return g
    return g - (gd / dd) * d


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    na, nb = float(a.norm()), float(b.norm())
    return 0.0 if na == 0 or nb == 0 else float(a @ b) / (na * nb)


class HandOptimizer:
    """One run's direction control and optimizer, written out step by step (torch.optim's conventions)."""

    def __init__(self, optimizer: str, dim: int, direction: str = "none", space: str = "gradient", alpha: float = 1.0):
        self.optimizer, self.direction, self.space, self.alpha = optimizer, direction, space, alpha
        self.m, self.v, self.t = torch.zeros(dim, dtype=F64), torch.zeros(dim, dtype=F64), 0
        self.reference = torch.zeros(dim, dtype=F64)  # previous uncontrolled vector of GAC's space

    def gac(self, vector: torch.Tensor, space: str) -> torch.Tensor:
        if self.direction != "gac" or self.space != space:
            return vector
        out, self.reference = project(vector, self.reference), vector
        return out

    def step(self, g: torch.Tensor) -> torch.Tensor:
        """The proposed step (x −= η·step) for gradient g."""
        g = self.gac(g, "gradient")
        if self.direction == "braking":  # Venigalla et al.: scale by 1 − α·cos(g, velocity before the step)
            g = (1 - self.alpha * cosine(g, self.m)) * g
        if self.optimizer == "sgd":
            return self.gac(g, "update")
        if self.optimizer == "sgd_momentum":
            self.m = self.gac(0.9 * self.m + g, "momentum")
            return self.gac(self.m, "update")
        self.t += 1
        self.m = self.gac(0.9 * self.m + 0.1 * g, "momentum")
        self.v = 0.999 * self.v + 0.001 * g * g
        return self.gac((self.m / (1 - 0.9 ** self.t)) / ((self.v / (1 - 0.999 ** self.t)).sqrt() + 1e-8), "update")


QUAD = QuadraticProblem(dim=6, condition_number=10.0, noise=0.3)


def hand_quadratic(staleness: int, lr: float, optimizer: str, direction: str, space: str, steps: int,
                   seed: int) -> torch.Tensor:
    curv = QUAD.curvatures()
    stream = NoiseStream(seed, 1, QUAD.dim)
    history = [torch.full((QUAD.dim,), QUAD.init_scale, dtype=F64)]
    opt, losses = HandOptimizer(optimizer, QUAD.dim, direction, space), []
    for t in range(steps):
        xi = stream.next()[1][0]
        g = curv * history[max(0, t - staleness)] + QUAD.noise * xi
        x = history[-1] - lr * opt.step(g)
        history.append(x)
        losses.append(0.5 * float((curv * x * x).sum()))
    return torch.tensor(losses, dtype=F64)


QUAD_CASES = [  # (optimizer, method, GAC space, lr)
    ("sgd_momentum", "naive", "gradient", 0.05),
    ("sgd_momentum", "gac", "gradient", 0.05),
    ("sgd_momentum", "gac", "momentum", 0.05),
    ("sgd_momentum", "gac", "update", 0.05),
    ("sgd_momentum", "braking", "gradient", 0.05),
    ("adam", "gac", "momentum", 0.05),
    ("adam", "gac", "update", 0.05),
    ("adam", "braking", "gradient", 0.05),
]


def quad_matches(optimizer, method, space, lr, staleness=3, steps=40, seed=2) -> bool:
    params = {"space": space} if method == "gac" else {}
    result = run_quadratic(QUAD, [setting(method, staleness, lr, optimizer=optimizer, **params)], steps, seeds=1,
                           seed=seed)
    expected = hand_quadratic(staleness, lr, optimizer, method, space, steps, seed)
    return torch.allclose(result.traces["objective"][:, 0], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("optimizer,method,space,lr", QUAD_CASES)
def test_quadratic_rows_equal_a_hand_written_loop(optimizer, method, space, lr):
    assert quad_matches(optimizer, method, space, lr)


def test_heavy_ball_mutation_is_caught(monkeypatch):
    monkeypatch.setattr(grid, "SGD_MOMENTUM", 0.8)
    assert not quad_matches("sgd_momentum", "naive", "gradient", 0.05)


@pytest.mark.parametrize("optimizer,space,wrong", [("sgd_momentum", "momentum", "update"),
                                                   ("adam", "momentum", "update"),
                                                   ("sgd_momentum", "update", "momentum"),
                                                   ("adam", "update", "gradient")])
def test_gac_placement_mutation_is_caught(monkeypatch, optimizer, space, wrong):
    """GAC acting in the wrong place (e.g. momentum → update: the removed part comes back via the stored m)."""
    built = GridUpdater._gac_groups
    monkeypatch.setattr(GridUpdater, "_gac_groups",
                        lambda self, like: [dataclasses.replace(g, space=wrong) for g in built(self, like)])
    assert not quad_matches(optimizer, "gac", space, 0.05)


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adam"])
def test_braking_mutation_is_caught(monkeypatch, optimizer):
    monkeypatch.setattr(grid.stabilizers, "braking_scale", lambda c, a: 1 + a * c)  # sign flipped
    assert not quad_matches(optimizer, "braking", "gradient", 0.05)


# -- the stale-data bandit: K updates per batch, the clipped ratio, TIS, KL-target --------------------------------
GAUSS = GaussianBandit(dim=3, condition_number=4.0, policy_std=0.5, reward_noise=0.1)
GROUPS, GROUP_SIZE, KAPPA, FLOOR = 4, 4, 0.02, 0.05


def hand_bandit(method: str, staleness: int, lr: float, optimizer: str, updates: int, clip: float | None,
                steps: int, seed: int, space: str = "gradient") -> torch.Tensor:
    """Expected reward after each step; gradients by autograd of the written-out surrogate."""
    sigma, h, cap = GAUSS.policy_std, GAUSS.curvatures(), 2.0
    parts = method.split("+")
    direction = "gac" if "gac" in parts else "braking" if "braking" in parts else "none"
    gen = torch.Generator().manual_seed(seed)
    history = [torch.zeros(GAUSS.dim, dtype=F64)]
    opt, rewards = HandOptimizer(optimizer, GAUSS.dim, direction, space), []
    for t in range(steps):
        torch.rand(1, generator=gen, dtype=F64)  # the staleness draw (fixed staleness ignores it)
        b = history[max(0, t - staleness)]
        eps = torch.randn(1, GROUPS, GROUP_SIZE, GAUSS.dim, generator=gen, dtype=F64)[0]
        noise = torch.randn(1, GROUPS, GROUP_SIZE, generator=gen, dtype=F64)[0]
        actions = b + sigma * eps
        reward = -0.5 * (h * (actions - GAUSS.target) ** 2).sum(-1) + GAUSS.reward_noise * noise
        mu = history[-1]
        proximal, per = mu.clone(), GROUPS // updates
        for k in range(updates):
            a, r = actions[k * per:(k + 1) * per], reward[k * per:(k + 1) * per]
            adv = (r - r.mean(-1, keepdim=True)) / (r.std(-1, unbiased=False, keepdim=True) + 1e-6)
            logp = lambda m, a=a: -((a - m) ** 2).sum(-1) / (2 * sigma ** 2)  # the normaliser cancels in ratios
            theta = mu.clone().requires_grad_(True)
            if clip is None:
                weight = (logp(mu) - logp(b)).exp().clamp(max=cap) if "tis" in parts else torch.ones_like(adv)
                surrogate = weight * adv * logp(theta)
            else:
                denominator = proximal if "tis" in parts else b
                weight = (logp(proximal) - logp(b)).exp().clamp(max=cap) if "tis" in parts else torch.ones_like(adv)
                ratio = (logp(theta) - logp(denominator)).exp()
                surrogate = weight * torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
            (grad,) = torch.autograd.grad(-surrogate.mean(), theta)
            step_lr = lr
            if "kl_target" in parts:
                kl = float(((b - mu) ** 2).sum()) / (2 * sigma ** 2)
                step_lr = lr * (1.0 if kl <= 0 else min(1.0, max(FLOOR, KAPPA / kl)))
            mu = mu - step_lr * opt.step(grad)
        history.append(mu)
        rewards.append(float(GAUSS.expected_reward(mu[None])[0]))
    return torch.tensor(rewards, dtype=F64)


BANDIT_CASES = [  # (method, optimizer, updates per batch, clip ε, GAC space)
    ("naive", "adam", 2, 0.2, "gradient"),
    ("naive", "sgd_momentum", 2, None, "gradient"),
    ("tis", "sgd_momentum", 2, 0.2, "gradient"),
    ("tis", "sgd", 1, None, "gradient"),
    ("kl_target", "adam", 1, None, "gradient"),
    ("kl_target", "sgd_momentum", 2, 0.2, "gradient"),
    ("gac+tis", "sgd_momentum", 2, 0.2, "momentum"),
    ("gac+kl_target", "adam", 2, 0.2, "update"),
    ("braking+tis", "adam", 1, 0.2, "gradient"),
]


def bandit_matches(method, optimizer, updates, clip, space, staleness=3, lr=0.05, steps=25, seed=4) -> bool:
    params = {"space": space} if "gac" in method.split("+") else {}
    if "kl_target" in method.split("+"):
        params.update(kl_target=KAPPA, kl_floor=FLOOR)
    result = run_bandit(GAUSS, [setting(method, staleness, lr, optimizer=optimizer, **params)], steps, seeds=1,
                        seed=seed, groups=GROUPS, group_size=GROUP_SIZE, updates_per_batch=updates,
                        ratio_clip_eps=clip)
    expected = hand_bandit(method, staleness, lr, optimizer, updates, clip, steps, seed, space)
    return torch.allclose(result.traces["objective"][:, 0], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method,optimizer,updates,clip,space", BANDIT_CASES)
def test_bandit_rows_equal_a_hand_written_loop(method, optimizer, updates, clip, space):
    assert bandit_matches(method, optimizer, updates, clip, space)


def test_ratio_clip_mutation_is_caught(monkeypatch):
    monkeypatch.setattr(bandit, "bapo_unclipped", lambda ratio, adv, low, high: torch.ones_like(ratio, dtype=bool))
    assert not bandit_matches("naive", "adam", 2, 0.2, "gradient")


def test_updates_per_batch_mutation_is_caught(monkeypatch):
    """Every update of a step fed the step's first minibatch instead of its own."""
    real, first = bandit._stale_gradient, {}

    def same_minibatch(problem, tables, theta, proximal, batch, advantage, weigh):
        if id(proximal) not in first:
            first.clear()
            first[id(proximal)] = batch
        return real(problem, tables, theta, proximal, first[id(proximal)], advantage, weigh)

    monkeypatch.setattr(bandit, "_stale_gradient", same_minibatch)
    assert not bandit_matches("naive", "sgd_momentum", 2, None, "gradient")


def test_tis_proximal_mutation_is_caught(monkeypatch):
    """TIS under the clip with π_prox taken as the current θ instead of θ at the step's start."""
    real = bandit._stale_gradient
    monkeypatch.setattr(bandit, "_stale_gradient", lambda problem, tables, theta, proximal, *rest:
                        real(problem, tables, theta, theta, *rest))
    assert not bandit_matches("tis", "sgd_momentum", 2, 0.2, "gradient")


def test_kl_target_mutation_is_caught(monkeypatch):
    """The factor not capped at 1 (the step grows when the KL is below target)."""
    monkeypatch.setattr(grid.stabilizers, "kl_target_factor",
                        lambda kl, target, floor: (target / kl.clamp_min(1e-3)).clamp_min(floor))
    assert not bandit_matches("kl_target", "adam", 1, None, "gradient")


def test_one_update_no_clip_is_the_default_run_bit_for_bit():
    settings = [setting("naive", 3, 0.1, optimizer="adam"), setting("tis", 2, 0.1)]
    plain = run_bandit(GAUSS, settings, 20, seeds=2, seed=1, groups=GROUPS, group_size=GROUP_SIZE)
    explicit = run_bandit(GAUSS, settings, 20, seeds=2, seed=1, groups=GROUPS, group_size=GROUP_SIZE,
                          updates_per_batch=1, ratio_clip_eps=None)
    for name, trace in plain.traces.items():
        assert torch.equal(trace.nan_to_num(), explicit.traces[name].nan_to_num()), name


@pytest.mark.parametrize("build,match", [
    (lambda: setting("braking", 2, 0.1), "braking needs optimizer sgd_momentum or adam"),
    (lambda: setting("gac", 2, 0.1, space="momentum"), "needs optimizer sgd_momentum or adam"),
    (lambda: setting("gac", 2, 0.1, optimizer="sgd_momentum", space="sideways"), "space"),
    (lambda: setting("gac+braking", 2, 0.1, optimizer="adam"), "two direction"),
    (lambda: setting("tis", 2, 0.1, braking_alpha=0.5), "no parameter"),
    (lambda: run_quadratic(QUAD, [setting("kl_target", 2, 0.1)], 5), "stale-gradient"),
    (lambda: run_bandit(GAUSS, [setting("naive", 2, 0.1)], 5, groups=3, updates_per_batch=2), "updates_per_batch"),
    (lambda: run_bandit(GAUSS, [setting("naive", 2, 0.1)], 5, ratio_clip_eps=1.5), "ratio_clip_eps"),
])
def test_bad_configuration_fails_in_one_line(build, match):
    with pytest.raises(ValueError, match=match) as err:
        build()
    assert "\n" not in str(err.value)
