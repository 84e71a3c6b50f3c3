"""gac.update / GACState (pure, batched, one threshold implementation), saved-state checks and
the reliability checks of the config and the control (bad values, edge shapes, extreme floats)."""

import copy
import dataclasses
import math

import pytest
import torch

import gac
from tests.gac.helpers import batches, flat_grad, loss_fn, tiny_model

RULE = gac.EMAThreshold(margin=0.05, decay=0.7, floor=0.1, ceiling=0.8, warmup=2)


def correlated_gradients(steps: int, rows: int, dim: int, seed: int = 0) -> list[torch.Tensor]:
    """Gradients with a shared slowly moving drift, so consecutive cosines vary around 0.3–0.9."""
    gen = torch.Generator().manual_seed(seed)
    drift = torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    out = []
    for _ in range(steps):
        drift = drift + 0.3 * torch.randn(rows, dim, generator=gen, dtype=torch.float64)
        out.append(drift + torch.randn(rows, dim, generator=gen, dtype=torch.float64))
    return out


def scalar_ema_thresholds(cosines: list[float], rule: gac.EMAThreshold) -> list[float]:
    """τ sequence written out independently with Python floats (the rule's formula; a NaN cosine, measured against
    no reference, is not an observation)."""
    taus, mean, count = [], 0.0, 0
    for c in cosines:
        taus.append(rule.ceiling if count < rule.warmup else min(max(mean + rule.margin, rule.floor), rule.ceiling))
        if math.isnan(c):
            continue
        mean = c if count == 0 else rule.decay * mean + (1 - rule.decay) * c
        count += 1
    return taus


@pytest.mark.parametrize("cfg", [gac.GACConfig(threshold=RULE, mode="cap"),
                                 gac.GACConfig(threshold=RULE, reference="ema", skip_threshold=0.85),
                                 gac.GACConfig(threshold=0.3)])
def test_update_is_pure_and_batched_equals_per_row(cfg):
    grads = correlated_gradients(12, rows=3, dim=7)
    state = gac.init(grads[0], cfg)
    rows = [gac.init(grads[0][r], cfg) for r in range(3)]
    regimes = set()
    for g in grads:
        g_copy, state_copy = g.clone(), copy.deepcopy(state)
        new, next_state, report = gac.update(g, state, cfg)
        assert torch.equal(g, g_copy)  # inputs are not mutated
        assert all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(state),
                                                     torch.utils._pytree.tree_leaves(state_copy), strict=True))
        for r in range(3):
            row_new, rows[r], row_report = gac.update(g[r], rows[r], cfg)
            assert torch.allclose(row_new, new[r], rtol=1e-12, atol=1e-12)
            assert row_report.regime == report.regime[r] and row_report.threshold == report.threshold[r]
        assert torch.allclose(report.grad_norm_before, g.norm(dim=-1), rtol=1e-12)
        assert torch.allclose(report.grad_norm_after, new.norm(dim=-1), rtol=1e-9, atol=1e-12)
        regimes.update(report.regime.tolist())
        state = next_state
    assert int(state.step[0]) == len(grads) and len(regimes) >= 2


def test_adaptive_threshold_follows_the_rule_formula():
    cfg = gac.GACConfig(threshold=RULE)
    grads = correlated_gradients(15, rows=2, dim=5, seed=4)
    state = gac.init(grads[0], cfg)
    cosines, taus = [], []
    for g in grads:
        _, state, report = gac.update(g, state, cfg)
        cosines.append(report.cosine[1].item())
        taus.append(report.threshold[1].item())
    assert taus == pytest.approx(scalar_ema_thresholds(cosines, RULE), abs=1e-12)
    assert len(set(taus)) > 3  # the threshold really adapts


def test_tracker_and_update_take_the_same_decisions_with_an_adaptive_rule():
    cfg = gac.GACConfig(threshold=RULE, mode="cap")
    model = tiny_model()
    tracker = gac.GradientAlignmentControl(model.parameters(), cfg)
    state, regimes = None, set()
    for batch in batches(10):
        model.zero_grad()
        loss_fn(model, batch).backward()
        raw = flat_grad(model).clone()
        state = state or gac.init(raw, cfg)
        expected, state, report = gac.update(raw, state, cfg)
        tracked = tracker.apply()  # float32 sums per tensor vs one float64 sum: equal to ~1e-7
        assert tracked.threshold == pytest.approx(report.threshold.item(), abs=1e-6)
        assert tracked.regime == gac.regime_name(report.regime.item(), cfg.mode)
        assert torch.allclose(flat_grad(model), expected, atol=1e-6)
        regimes.add(tracked.regime)
    assert regimes >= {"keep", "cap"}  # the model is fixed and the data fresh: both regimes occur


def test_config_and_rule_are_immutable():
    cfg = gac.GACConfig(threshold=RULE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.mode = "cap"
    with pytest.raises(dataclasses.FrozenInstanceError):
        RULE.margin = 0.3


@pytest.mark.parametrize("build, message", [
    (lambda: gac.GACConfig(eps=float("nan")), "eps must be finite"),
    (lambda: gac.GACConfig(eps=float("inf")), "eps must be finite"),
    (lambda: gac.GACConfig(eps="0.1"), "eps must be a number"),
    (lambda: gac.GACConfig(skip_threshold="0.9"), "skip_threshold must be a number"),
    (lambda: gac.GACConfig(skip_threshold=float("nan")), "skip_threshold must be finite"),
    (lambda: gac.EMAThreshold(margin=float("nan")), "margin must be finite"),
    (lambda: gac.EMAThreshold(warmup=-1), "warmup"),
    (lambda: gac.GACConfig(threshold=gac.EMAThreshold(floor=0.3), skip_threshold=0.2), "lowest value"),
])
def test_bad_values_are_one_line_value_errors(build, message):
    with pytest.raises(ValueError, match=message) as info:
        build()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_raise_in_control_and_update(bad):
    g = torch.tensor([[1.0, 2.0], [bad, 1.0]])
    d = torch.ones(2, 2)
    with pytest.raises(gac.NonFiniteGradientError):
        gac.control(g, d, gac.GACConfig())
    state = gac.init(g, gac.GACConfig())
    with pytest.raises(gac.NonFiniteGradientError):
        gac.update(g, state, gac.GACConfig())


def test_nonfinite_skip_in_update_skips_only_that_row_and_keeps_its_state():
    cfg = gac.GACConfig(threshold=RULE, nonfinite="skip")
    first = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    _, state, _ = gac.update(first, gac.init(first, cfg), cfg)
    g = torch.tensor([[1.0, 1.0], [float("nan"), 1.0]], dtype=torch.float64)
    new, after, report = gac.update(g, state, cfg)
    assert report.nonfinite.tolist() == [False, True] and report.regime[1] == gac.SKIP
    assert torch.equal(new[1], torch.zeros(2, dtype=torch.float64)) and torch.isfinite(new).all()
    assert torch.equal(after.reference[1], state.reference[1]) and torch.equal(after.reference[0], g[0])
    mean, count = after.threshold_stats
    assert count.tolist() == [1, 0] and torch.equal(mean[1], state.threshold_stats[0][1])  # step 1: no reference


def test_empty_last_dimension_is_a_clear_error():
    with pytest.raises(ValueError, match="non-empty last dimension"):
        gac.control(torch.zeros(3, 0), torch.zeros(3, 0), gac.GACConfig())
    with pytest.raises(ValueError, match="non-empty last dimension"):
        gac.update(torch.zeros(3, 0), gac.init(torch.zeros(3, 0), gac.GACConfig()), gac.GACConfig())


def test_zero_dim_input_keeps_its_shape():
    out = gac.control(torch.tensor(2.0), torch.tensor(1.0), gac.GACConfig(threshold=0.5))
    assert out.grad.shape == () and out.grad.item() == 0.0  # cos = 1 > τ: the only direction is removed
    kept = gac.control(torch.tensor(2.0), torch.tensor(-1.0), gac.GACConfig(threshold=0.5))
    assert kept.grad.shape == () and kept.grad.item() == 2.0


@pytest.mark.parametrize("exponent", [1000, 1022, 1023])
def test_float64_near_its_largest_value(exponent):
    big = 2.0**exponent
    g = torch.tensor([big, big, 0.0], dtype=torch.float64)
    d = torch.tensor([big, 0.0, 0.0], dtype=torch.float64)
    assert gac.alignment(g, d).item() == pytest.approx(1 / math.sqrt(2), rel=1e-12)
    out = gac.control(g, d, gac.GACConfig(threshold=0.1))
    assert out.cosine.item() == pytest.approx(1 / math.sqrt(2), rel=1e-12)
    assert out.grad.tolist() == [0.0, big, 0.0]  # the parallel part is removed exactly
    top = torch.tensor([torch.finfo(torch.float64).max, 1.0], dtype=torch.float64)
    assert gac.alignment(top, top).item() == pytest.approx(1.0, rel=1e-12)


def test_process_group_without_initialised_distributed_is_an_error():
    model = tiny_model()
    with pytest.raises(ValueError, match="not initialised"):
        gac.GradientAlignmentControl(model.parameters(), process_group=object())
    with pytest.raises(ValueError, match="not initialised"):
        gac.wrap(torch.optim.SGD(model.parameters(), lr=0.1), process_group=object())


def reshaped_model() -> torch.nn.Module:
    """tiny_model's parameter count and sizes (8·6, 8, 3·8, 3) with the matrices transposed."""
    model = torch.nn.Module()
    model.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(shape))
                                            for shape in ((6, 8), (8,), (8, 3), (3,))])
    return model


def trained_wrap(steps: int = 3):
    cfg = gac.GACConfig(threshold=0.0)
    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), cfg)
    for batch in batches(steps):
        opt.zero_grad()
        loss_fn(model, batch).backward()
        opt.step()
    return model, opt


def test_state_from_another_model_shape_is_rejected_at_load():
    model, opt = trained_wrap()
    other = reshaped_model()
    assert sum(p.numel() for p in other.parameters()) == sum(p.numel() for p in model.parameters())
    assert len(list(other.parameters())) == len(list(model.parameters()))
    tracker = gac.GradientAlignmentControl(other.parameters())
    with pytest.raises(ValueError, match="does not fit this model") as info:
        tracker.load_state_dict(opt.gac.state_dict())
    assert "\n" not in str(info.value)
    other_opt = gac.wrap(torch.optim.AdamW(other.parameters(), lr=0.05), gac.GACConfig(threshold=0.0))
    with pytest.raises(ValueError, match="does not fit this model"):
        other_opt.load_state_dict(opt.state_dict())
    assert len(other_opt.state) == 0  # nothing was half-loaded


def test_wrap_keeps_the_reference_in_optimizer_state():
    model, opt = trained_wrap()
    raw = [p.grad for p in model.parameters()]  # the last step was "project" or "keep"; the reference is raw g
    for p in model.parameters():
        assert set(opt.state[p]) >= {"gac_reference", "exp_avg", "exp_avg_sq", "step"}
    saved = opt.state_dict()
    assert all("gac_reference" in s for s in saved["state"].values())
    assert "reference" not in saved["state"][0]["gac_counters"]
    assert all(r is not None for r in raw)


def test_rule_state_loaded_with_a_fixed_threshold_config_says_what_to_do():
    tracker = gac.GradientAlignmentControl(tiny_model().parameters(), gac.GACConfig(threshold=0.2))
    saved = {"step": 3, "skipped_nonfinite": 0, "reference": [None] * 4,
             "threshold_stats": [torch.tensor(0.4, dtype=torch.float64), torch.tensor(3)]}  # an adaptive rule's
    with pytest.raises(ValueError, match="load it with the GACConfig it was saved with"):
        tracker.load_state_dict(saved)
