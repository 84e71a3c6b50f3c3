import pytest
import torch

from sim.advantages import group_advantages
from sim.llm.train import policy_loss
from sim.stabilizers import method_params


def test_group_advantages_are_normalised_per_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards.reshape(-1, 4)).reshape(-1)
    assert torch.allclose(adv[:4], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
    assert torch.equal(adv[4:], torch.zeros(4))  # no signal from a group where all agree


def test_on_policy_loss_gradient_is_the_policy_gradient_and_clip_acts_off_policy():
    torch.manual_seed(0)
    logits = torch.randn(6, 3, requires_grad=True)
    logp = torch.log_softmax(logits, -1)[:, 0].reshape(3, 2)
    adv = torch.tensor([1.0, -0.5, 2.0])
    mask = torch.tensor([[True, True], [True, False], [True, True]])
    loss, stats = policy_loss("none", logp, logp.detach(), adv, mask, 0.2, {})
    (g,) = torch.autograd.grad(loss, logits, retain_graph=True)
    (expected,) = torch.autograd.grad(-(logp * adv[:, None] * mask).sum() / mask.sum(), logits)
    assert torch.allclose(g, expected, atol=1e-6) and stats["clip_frac"] == 0.0
    # Behaviour log-probs far below: ratio > 1 + ε for every token; positive advantages get clipped.
    _, stats = policy_loss("none", logp, logp.detach() - 1.0, adv, mask, 0.2, {})
    assert abs(stats["clip_frac"] - 4 / 5) < 1e-6  # the 4 valid tokens with A > 0


def test_m2po_and_tis_use_the_registry():
    logp = torch.zeros(2, 3)
    behaviour = torch.tensor([[0.0, -0.05, -2.0], [0.0, 0.1, 0.0]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    loss, _ = policy_loss("m2po", logp, behaviour, torch.ones(2), mask, 0.2, method_params("m2po"))
    kept = torch.exp(logp - behaviour) * torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the (log r)² = 4 token
    assert torch.allclose(loss, -kept.sum() / 6)  # is dropped, and counted in the token mean
    loss, _ = policy_loss("tis", logp, behaviour, torch.ones(2), mask, 0.2, method_params("tis"),
                               prox_logp=logp)
    weights = torch.exp(logp - behaviour).clamp(max=2.0)
    assert torch.allclose(loss, -weights.mean())


# BAPO on a hand-made batch: one token per response, so each token has its own advantage. With the
# parameters below the bounds are (c_low, c_high) = (0.7, 1.5), worked out step by step in
# tests/sim/test_bapo.py (same ratios and advantages); the last response is padding.
BAPO_PARAMS = {"rho_0": 0.4, "a_minus": 0.6, "b_minus": 0.8, "a_plus": 1.2, "b_plus": 1.5, "delta_1": 0.1,
               "delta_2": 0.1}
BAPO_RATIOS = [1.0, 1.35, 1.0, 0.65, 0.75, 1.0]
BAPO_ADV = [1.0, 1.0, -2.5, -2.0, -1.0, 5.0]


def test_bapo_loss_gradient_equals_the_hand_computation():
    behaviour = torch.tensor([[-1.0], [-2.0], [-0.5], [-1.5], [-3.0], [-1.0]], dtype=torch.float64)
    logp = (behaviour + torch.tensor(BAPO_RATIOS, dtype=torch.float64).log()[:, None]).requires_grad_()
    mask = torch.tensor([[True]] * 5 + [[False]])
    adv = torch.tensor(BAPO_ADV, dtype=torch.float64)
    loss, stats = policy_loss("bapo", logp, behaviour, adv, mask, 0.2, method_params("bapo", **BAPO_PARAMS))
    (grad,) = torch.autograd.grad(loss, logp)
    # d(−r·A/N)/d log π_θ = −r·A/N on an unclipped valid token (N = 5 valid tokens); the token r = 0.65,
    # A = −2 is below c_low = 0.7 (clipped, no gradient), and the padding token has none.
    expected = torch.tensor([-1.0 * 1.0, -1.35 * 1.0, 2.5 * 1.0, 0.0, 0.75 * 1.0, 0.0], dtype=torch.float64) / 5
    assert torch.allclose(grad[:, 0], expected)
    assert (stats["clip_low"], stats["clip_high"]) == (pytest.approx(0.7), pytest.approx(1.5))
    assert stats["clip_frac"] == pytest.approx(1 / 5)
    # The fixed clip [0.8, 1.2] would clip r = 1.35 (A > 0) and r = 0.65, 0.75 (A < 0): a different gradient.
    fixed, fixed_stats = policy_loss("none", logp, behaviour, adv, mask, 0.2, {})
    (fixed_grad,) = torch.autograd.grad(fixed, logp)
    assert not torch.allclose(fixed_grad[:, 0], expected) and fixed_stats["clip_frac"] == pytest.approx(3 / 5)
