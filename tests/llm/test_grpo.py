import torch

from sim.advantages import group_advantages
from sim.llm import grpo
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
    loss, stats = grpo.policy_loss("none", logp, logp.detach(), adv, mask, 0.2, {})
    (g,) = torch.autograd.grad(loss, logits, retain_graph=True)
    (expected,) = torch.autograd.grad(-(logp * adv[:, None] * mask).sum() / mask.sum(), logits)
    assert torch.allclose(g, expected, atol=1e-6) and stats["clip_frac"] == 0.0
    # Behaviour log-probs far below: ratio > 1 + ε for every token; positive advantages get clipped.
    _, stats = grpo.policy_loss("none", logp, logp.detach() - 1.0, adv, mask, 0.2, {})
    assert abs(stats["clip_frac"] - 4 / 5) < 1e-6  # the 4 valid tokens with A > 0


def test_m2po_and_tis_use_the_registry():
    logp = torch.zeros(2, 3)
    behaviour = torch.tensor([[0.0, -0.05, -2.0], [0.0, 0.1, 0.0]])
    mask = torch.ones(2, 3, dtype=torch.bool)
    _, stats = grpo.policy_loss("m2po", logp, behaviour, torch.ones(2), mask, 0.2, method_params("m2po"))
    assert abs(stats["kept_frac"] - 5 / 6) < 1e-6  # the (log r)² = 4 token is dropped
    loss, _ = grpo.policy_loss("tis", logp, behaviour, torch.ones(2), mask, 0.2, method_params("tis"),
                               prox_logp=logp)
    weights = torch.exp(logp - behaviour).clamp(max=2.0)
    assert torch.allclose(loss, -weights.mean())
