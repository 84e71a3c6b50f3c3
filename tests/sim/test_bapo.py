"""BAPO's adaptive clip bounds against a hand-computed batch and a plain-loop re-implementation; method configs."""

import pytest
import torch

from sim import stabilizers
from sim.bandit import GaussianBandit, SoftmaxBandit, _SampleWeights, run_bandit
from sim.grid import GridUpdater, setting
from sim.stabilizers import BAPOConfig, bapo_clip_bounds, bapo_clip_bounds_rows

SMALL = BAPOConfig(rho_0=0.4, a_minus=0.6, b_minus=0.8, a_plus=1.2, b_plus=1.5, delta_1=0.1, delta_2=0.1)
# (r, A, valid). The paper's candidates in order (c_high first), ρ = Σpos / (Σpos + Σneg) over unclipped tokens:
#   (0.6, 1.2): pos 1.0 (r=1.35 > 1.2 clipped); neg 2.5 + 1.3 + 0.75 = 4.55 → ρ = 1.0/5.55 = 0.180
#   (0.6, 1.3): the same                                                     → ρ = 0.180
#   (0.6, 1.4): r=1.35 unclipped: pos 2.35                                  → ρ = 2.35/6.9 = 0.341
#   (0.6, 1.5): the same; c_high + δ1 > b⁺ now, so c_low moves next        → ρ = 0.341
#   (0.7, 1.5): r=0.65 (A<0) clipped: neg 3.25                             → ρ = 2.35/5.6 = 0.420 ≥ 0.4: stop.
# The padding token (A = +5) would give ρ = 6/10.55 ≥ 0.4 at the start if it were counted; raising c_low
# first (the verl order) would stop at (0.8, 1.4) with ρ = 2.35/4.85.
HAND = [(1.0, 1.0, 1), (1.35, 1.0, 1), (1.0, -2.5, 1), (0.65, -2.0, 1), (0.75, -1.0, 1), (1.0, 5.0, 0)]


def _hand_batch(dtype=torch.float64):
    r, a, m = (torch.tensor([t[i] for t in HAND], dtype=dtype) for i in range(3))
    return r, a, m


def test_bounds_on_hand_computed_batch():
    r, a, m = _hand_batch()
    c_low, c_high = bapo_clip_bounds(r, a, m, SMALL)
    assert c_low == pytest.approx(0.7) and c_high == pytest.approx(1.5)
    assert float(stabilizers.bapo_positive_share(r, a, m, 0.7, 1.5)) == pytest.approx(2.35 / 5.6)
    assert float(stabilizers.bapo_positive_share(r, a, m, 0.6, 1.2)) == pytest.approx(1.0 / 5.55)


def test_hand_check_fails_when_clipped_tokens_are_counted(monkeypatch):
    # Mutation: counting every token (no clipping in ρ) keeps ρ = 2.35/6.9 < 0.4; the search runs to (b⁻, b⁺).
    monkeypatch.setattr(stabilizers, "bapo_unclipped", lambda r, a, lo, hi: torch.ones_like(r, dtype=torch.bool))
    r, a, m = _hand_batch()
    assert bapo_clip_bounds(r, a, m, SMALL) != pytest.approx((0.7, 1.5))


def _loop_bounds(ratio, adv, mask, cfg):
    """The paper's Algorithm 1 as a plain loop over tokens (independent of the vectorized code)."""
    def share(lo, hi):
        pos = neg = 0.0
        for r, a, m in zip(ratio.tolist(), adv.tolist(), mask.tolist(), strict=True):
            if m and a > 0 and r <= hi:
                pos += r * a
            elif m and a < 0 and r >= lo:
                neg -= r * a
        return 1.0 if pos + neg == 0 else pos / (pos + neg)
    lo, hi = cfg.a_minus, cfg.a_plus
    while share(lo, hi) < cfg.rho_0 and lo + cfg.delta_2 <= cfg.b_minus + 1e-12:
        if hi + cfg.delta_1 <= cfg.b_plus + 1e-12:
            hi += cfg.delta_1
        else:
            lo += cfg.delta_2
    return lo, hi


def test_rows_match_plain_loop_on_random_batches():
    gen = torch.Generator().manual_seed(3)
    configs = [BAPOConfig(), SMALL, BAPOConfig(rho_0=0.3, delta_1=0.07, delta_2=0.03), BAPOConfig(rho_0=0.9),
               BAPOConfig(b_plus=1.4, delta_1=0.3), BAPOConfig(a_minus=0.88)] * 4  # the last: a⁻ + δ2 > b⁻
    ratio = torch.exp(0.4 * torch.randn(len(configs), 40, generator=gen, dtype=torch.float64))
    shift = 0.6 * torch.rand(len(configs), 1, generator=gen, dtype=torch.float64)  # mostly negative, as in the paper
    adv = torch.randn(len(configs), 40, generator=gen, dtype=torch.float64) - shift
    mask = torch.rand(len(configs), 40, generator=gen) < 0.8
    c_low, c_high = bapo_clip_bounds_rows(ratio, adv, mask, configs)
    for i, cfg in enumerate(configs):
        lo, hi = _loop_bounds(ratio[i], adv[i], mask[i], cfg)
        assert (float(c_low[i]), float(c_high[i])) == pytest.approx((lo, hi), abs=1e-9)
        assert cfg.a_minus <= c_low[i] <= cfg.b_minus and cfg.a_plus <= c_high[i] <= cfg.b_plus


def test_llm_shaped_batch_and_surrogate_gradient():
    gen = torch.Generator().manual_seed(0)
    log_ratio = (0.3 * torch.randn(4, 7, generator=gen, dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([[1.0], [-0.5], [-1.0], [2.0]], dtype=torch.float64)  # one advantage per response
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 5:] = False
    c_low, c_high = bapo_clip_bounds(log_ratio.detach().exp(), adv, mask, BAPOConfig())
    rows = bapo_clip_bounds_rows(log_ratio.detach().exp().reshape(1, -1), adv.expand(4, 7).reshape(1, -1),
                                 mask.reshape(1, -1), [BAPOConfig()])
    assert (c_low, c_high) == (float(rows[0][0]), float(rows[1][0]))
    ratio = log_ratio.exp()
    torch.minimum(ratio * adv, ratio.clamp(c_low, c_high) * adv).sum().backward()  # the clipped surrogate
    # d/d log r of min(r·A, clip(r)·A) is r·A on unclipped tokens and 0 on clipped ones.
    expected = ratio.detach() * adv * stabilizers.bapo_unclipped(ratio.detach(), adv, c_low, c_high)
    assert torch.allclose(log_ratio.grad, expected)


def test_bapo_on_gaussian_bandit_stays_finite_at_s8_and_learns():
    settings = [setting("bapo", 8, lr=0.1), setting("bapo", 8, lr=0.1, rho_0=0.3, b_plus=2.0)]
    result = run_bandit(GaussianBandit(), settings, steps=80, seeds=2, seed=0)
    objective, diverged = result.traces["objective"], result.traces["diverged"]
    assert torch.isfinite(objective).all() and not diverged.bool().any()
    assert (objective[-1] > result.meta["initial_reward"]).all()  # every run improved on its start


def test_bapo_on_softmax_bandit_learns_and_equals_none_without_staleness():
    settings = [setting("bapo", 4, lr=0.5), setting("bapo", 0, lr=0.5), setting("naive", 0, lr=0.5)]
    result = run_bandit(SoftmaxBandit(arms=5, contexts=3), settings, steps=40, seeds=2, seed=1)
    objective = result.traces["objective"]
    assert torch.isfinite(objective).all() and (objective[-1] > result.meta["initial_reward"]).all()
    # s = 0: every ratio is 1, nothing is clipped, so BAPO's update is naive GRPO's, step for step.
    assert torch.allclose(objective[:, 2:4], objective[:, 4:6])


def test_bandit_weights_use_each_rows_bounds():
    settings = [setting("bapo", 8, rho_0=0.5), setting("tis", 8)]
    weigh = _SampleWeights(GridUpdater(settings, seeds=1, dim=2))
    gen = torch.Generator().manual_seed(1)
    log_ratio = 0.5 * torch.randn(2, 30, generator=gen, dtype=torch.float64)
    adv = torch.randn(2, 30, generator=gen, dtype=torch.float64)
    weights = weigh(log_ratio, adv)
    lo, hi = bapo_clip_bounds(log_ratio[0].exp(), adv[0], torch.ones(30), BAPOConfig())
    expected = log_ratio[0].exp() * stabilizers.bapo_unclipped(log_ratio[0].exp(), adv[0], lo, hi)
    assert torch.allclose(weights[0], expected)
    assert torch.allclose(weights[1], stabilizers.tis_weights(log_ratio[1], 2.0))


def test_method_params_validated_and_in_registry():
    assert stabilizers.method_params("bapo")["rho_0"] == 0.5
    for name, bad in [("tis", {"tis_cap": 0.0}), ("m2po", {"m2_threshold": -1.0}), ("dc", {"dc_lambda": -0.1}),
                      ("bapo", {"rho_0": 0.0}), ("bapo", {"a_minus": 0.95}), ("bapo", {"b_plus": 1.1}),
                      ("bapo", {"delta_1": 0.0})]:
        with pytest.raises(ValueError):
            stabilizers.method_params(name, **bad)
    with pytest.raises(ValueError):
        setting("bapo", 4, rho_0=2.0)  # the grid fails before any run
    with pytest.raises(ValueError):
        run_bandit(GaussianBandit(), [setting("bapo", 4)] + [setting("dc", 4)], steps=2)
