"""VCPO's pieces (sim.stabilizers): the effective sample size of importance weights, the ESS-scaled step factor and
the least-variance off-policy baseline, each against an independent computation."""

import math

import numpy as np
import pytest
import torch

from sim import stabilizers
from sim.stabilizers import effective_sample_size, vcpo_baseline, vcpo_step_factor


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


def test_vcpo_is_a_step_control_of_the_stale_data_model_that_the_toys_refuse():
    assert stabilizers.parse_method("vcpo").step == "vcpo"
    assert stabilizers.parse_method("gac+vcpo").name == "gac+vcpo"
    with pytest.raises(ValueError, match="does not apply"):
        stabilizers.parse_method("vcpo", stabilizers.STALE_GRADIENT)
    with pytest.raises(ValueError, match="two step controls"):
        stabilizers.parse_method("vcpo+kl_target")
    from sim.bandit import SoftmaxBandit, run_bandit
    from sim.grid import setting
    with pytest.raises(ValueError, match="LLM trainer only"):  # never silently run as naive
        run_bandit(SoftmaxBandit(arms=4, contexts=2), [setting("vcpo", 2, 0.1)], steps=2, seeds=1)


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
