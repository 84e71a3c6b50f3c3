"""Invariants of the pure GAC core (gac.control), property-based."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gac
from gac import ACT, KEEP, SKIP
from gac.control import cosine_from_stats, decide_and_apply, decide_scalar, pow2_scale

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.load_profile("ci")


@st.composite
def pairs(draw, max_rows=4, max_dim=24):
    """Random (g, d) float64 batches with mixed scales, sometimes aligned by construction."""
    rows = draw(st.integers(1, max_rows))
    dim = draw(st.integers(2, max_dim))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    d = torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    mix = draw(st.floats(-3.0, 3.0))
    d = d + mix * g  # any alignment from strongly anti-aligned to strongly aligned
    scale_g = 10.0 ** draw(st.integers(-6, 6))
    scale_d = 10.0 ** draw(st.integers(-6, 6))
    return g * scale_g, d * scale_d


def parallel_part(g, d):
    d_hat = d / d.norm(dim=-1, keepdim=True)
    return (g * d_hat).sum(-1, keepdim=True) * d_hat


@given(pairs(), st.floats(0.0, 0.95))
def test_keep_regime_is_bit_identical(gd, tau):
    g, d = gd
    out = gac.control(g, d, gac.GACConfig(threshold=tau))
    keep = out.regime == KEEP
    assert torch.equal(out.grad[keep], g[keep])
    assert torch.all(out.cosine[keep] <= tau)


@given(pairs(), st.floats(0.0, 0.95))
def test_project_removes_parallel_part_and_keeps_orthogonal(gd, tau):
    g, d = gd
    out = gac.control(g, d, gac.GACConfig(threshold=tau, mode="project"))
    act = out.regime == ACT
    if not act.any():
        return
    g_a, d_a, new = g[act], d[act], out.grad[act]
    d_hat = d_a / d_a.norm(dim=-1, keepdim=True)
    assert torch.allclose((new * d_hat).sum(-1), torch.zeros(len(new), dtype=new.dtype),
                          atol=1e-9 * g_a.norm(dim=-1).max().item())
    orthogonal = g_a - parallel_part(g_a, d_a)
    assert torch.allclose(new, orthogonal, rtol=1e-9, atol=1e-9 * g_a.abs().max().item())
    assert torch.all(out.parallel_scale[act] == 0)


@given(pairs(), st.floats(0.0, 0.95))
def test_cap_sets_cosine_to_threshold_and_keeps_orthogonal(gd, tau):
    g, d = gd
    out = gac.control(g, d, gac.GACConfig(threshold=tau, mode="cap"))
    act = out.regime == ACT
    if not act.any():
        return
    g_a, d_a, new = g[act], d[act], out.grad[act]
    # Where g is (numerically) parallel to d there is no orthogonal part to keep the cosine at tau.
    sin = (1 - out.cosine[act] ** 2).clamp_min(0).sqrt()
    ok = sin > 1e-6
    assert torch.allclose(gac.alignment(new, d_a)[ok].double(), torch.full_like(sin[ok], tau), atol=1e-6)
    ortho_before = g_a - parallel_part(g_a, d_a)
    ortho_after = new - parallel_part(new, d_a)
    assert torch.allclose(ortho_after, ortho_before, rtol=1e-8, atol=1e-9 * g_a.abs().max().item())
    assert torch.all((out.parallel_scale[act] >= 0) & (out.parallel_scale[act] < 1))


@given(pairs(), st.floats(0.0, 0.9))
def test_anti_aligned_and_orthogonal_untouched(gd, tau):
    g, d = gd
    for mode in ("project", "cap"):
        out = gac.control(g, -d.abs() * g.sign(), gac.GACConfig(threshold=tau, mode=mode))
        assert torch.all(out.cosine <= 0)
        assert torch.equal(out.grad, g)


@given(pairs(max_rows=6), st.floats(0.0, 0.9), st.sampled_from(["project", "cap"]))
def test_batched_equals_per_row_loop(gd, tau, mode):
    g, d = gd
    cfg = gac.GACConfig(threshold=tau, mode=mode, skip_threshold=0.97)
    batched = gac.control(g, d, cfg)
    for row in range(len(g)):
        single = gac.control(g[row], d[row], cfg)
        assert torch.equal(batched.grad[row], single.grad)
        assert batched.cosine[row] == single.cosine
        assert batched.regime[row] == single.regime


def test_skip_regime_gives_zero_update():
    g = torch.tensor([[1.0, 0.01], [1.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    out = gac.control(g, d, gac.GACConfig(threshold=0.5, skip_threshold=0.99))
    assert out.regime.tolist() == [SKIP, ACT]
    assert torch.equal(out.grad[0], torch.zeros(2))
    assert torch.allclose(out.grad[1], torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_zero_norms_give_nan_and_tiny_or_huge_norms_a_number(dtype):
    tiny = torch.finfo(dtype).tiny
    g = torch.tensor([[0.0, 0.0], [tiny, tiny], [1.0, 2.0], [3e38 if dtype != torch.float64 else 1e300, 1.0]],
                     dtype=dtype)
    d = torch.tensor([[1.0, 1.0], [tiny, 0.0], [0.0, 0.0], [3e38 if dtype != torch.float64 else 1e300, 1.0]],
                     dtype=dtype)
    cos = gac.alignment(g, d)
    assert torch.isnan(cos[0]) and torch.isnan(cos[2])  # a zero vector has no direction: not "orthogonal" (0)
    assert not torch.isnan(cos[[1, 3]]).any()
    assert cos[1] > 0.7  # direction of tiny vectors is still measured
    assert math.isclose(cos[3].item(), 1.0, abs_tol=1e-3)
    out = gac.control(g, d, gac.GACConfig(threshold=0.1))
    assert torch.isfinite(out.grad.double()).all()
    assert out.regime[0] == KEEP and out.regime[2] == KEEP and torch.equal(out.grad[[0, 2]], g[[0, 2]])  # NaN: keep


def test_alignment_matches_cosine_similarity():
    gen = torch.Generator().manual_seed(0)
    g, d = torch.randn(3, 5, 100, generator=gen), torch.randn(3, 5, 100, generator=gen)
    d = d + 0.5 * g
    assert torch.allclose(gac.alignment(g, d), torch.nn.functional.cosine_similarity(g, d, dim=-1), atol=1e-6)


def test_alignment_rejects_mismatched_shapes_naming_both():
    with pytest.raises(ValueError, match=r"^alignment needs g and d of the same shape, got \(2, 3\) and \(2, 4\)$"):
        gac.alignment(torch.ones(2, 3), torch.ones(2, 4))


def test_tensor_threshold_per_row():
    g = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # cos = 0.707 in both rows
    out = gac.control(g, d, gac.GACConfig(), threshold=torch.tensor([0.5, 0.8]))
    assert out.regime.tolist() == [ACT, KEEP]


def test_update_reference():
    d, g = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    assert torch.equal(gac.update_reference(d, g, gac.GACConfig(reference="prev")), g)
    ema = gac.update_reference(d, g, gac.GACConfig(reference="ema", ema_decay=0.75))
    assert torch.allclose(ema, torch.tensor([0.75, 0.5]))
    # a float64 reference (GACConfig.reference_dtype) takes a float32 gradient: the EMA is formed in d's dtype
    d64 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    ema64 = gac.update_reference(d64, torch.tensor([0.0, 2.0], dtype=torch.float32),
                                 gac.GACConfig(reference="ema", ema_decay=0.75))
    assert ema64.dtype == torch.float64 and torch.equal(ema64, torch.tensor([0.75, 0.5], dtype=torch.float64))


@pytest.mark.parametrize("kwargs, message", [
    ({"threshold": 1.0}, "threshold must be in [0, 1)"),
    ({"threshold": -0.1}, "threshold must be in [0, 1)"),
    ({"threshold": 0.5, "skip_threshold": 0.5}, "must be greater than threshold"),
    ({"mode": "clip"}, "mode must be one of"),
    ({"reference": "momentum"}, "reference must be one of"),
    ({"ema_decay": 1.0}, "ema_decay must be in [0, 1)"),
    ({"nonfinite": "ignore"}, "nonfinite must be one of"),
    ({"reference_dtype": torch.int8}, "reference_dtype"),
    ({"threshold": "high"}, "threshold must be a float"),
])
def test_config_rejects_bad_values_with_one_line(kwargs, message):
    with pytest.raises(ValueError) as info:
        gac.GACConfig(**kwargs)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_ema_threshold_rule():
    rule = gac.EMAThreshold(margin=0.1, decay=0.5, floor=0.0, ceiling=0.9, warmup=2)
    stats = rule.init()
    assert float(rule.current(stats)) == 0.9
    stats = rule.observe(stats, torch.tensor(0.2, dtype=torch.float64))
    stats = rule.observe(stats, torch.tensor(0.4, dtype=torch.float64))  # mean = 0.5*0.2 + 0.5*0.4 = 0.3
    assert math.isclose(float(rule.current(stats)), 0.4)
    cfg = gac.GACConfig(threshold=rule)
    assert isinstance(cfg.threshold, gac.ThresholdRule)


def test_eps_is_an_absolute_norm_level():
    g = torch.tensor([[1e-3, 1e-3], [1.0, 1.0]])
    d = torch.tensor([[1e-3, 0.0], [1.0, 0.0]])
    out = gac.control(g, d, gac.GACConfig(threshold=0.1, eps=1e-2))
    assert torch.isnan(out.cosine[0]) and out.regime.tolist() == [KEEP, ACT]  # the tiny row counts as zero
    assert torch.equal(out.grad[0], g[0]) and torch.allclose(out.grad[1], torch.tensor([0.0, 1.0]))
    assert torch.isnan(gac.alignment(g, d, eps=1e-2)[0]) and gac.alignment(g, d, eps=1e-2)[1] > 0.7


@given(pairs(), st.floats(0.0, 0.9), st.sampled_from(["project", "cap"]))
def test_decision_norms_are_the_norms_of_g_and_the_new_gradient(gd, tau, mode):
    g, d = gd
    cfg = gac.GACConfig(threshold=tau, mode=mode, skip_threshold=0.97)
    new, decision = decide_and_apply(g, d, cfg, tau)
    assert torch.allclose(decision.norm_before, g.norm(dim=-1), rtol=1e-12)
    assert torch.allclose(decision.norm_after, new.norm(dim=-1), rtol=1e-9, atol=1e-12 * float(g.abs().max()))
    acting = decision.regime == ACT
    expected_scale = gac.cap_scale(decision.cosine, tau) if mode == "cap" else torch.zeros_like(decision.cosine)
    assert torch.equal(decision.parallel_scale[acting], expected_scale[acting])
    assert torch.all(decision.parallel_scale[decision.regime == KEEP] == 1)
    assert torch.all(decision.parallel_scale[decision.regime == SKIP] == 0)


def test_pow2_scale_is_a_power_of_two_just_below_the_peak():
    x = torch.tensor([[3.0, -5.0, 1.0], [0.0, 0.0, 0.0], [0.25, 0.0, -0.1], [1e300, 1.0, 0.0]], dtype=torch.float64)
    scale = pow2_scale(x).squeeze(-1)
    peak = x.abs().amax(-1)
    assert scale.tolist()[:3] == [4.0, 1.0, 0.25]
    assert torch.all(torch.log2(scale) == torch.round(torch.log2(scale)))
    nonzero = peak > 0
    assert torch.all(scale[nonzero] <= peak[nonzero]) and torch.all(peak[nonzero] < 2 * scale[nonzero])


def test_regime_names():
    assert [gac.regime_name(code, "cap") for code in (KEEP, ACT, SKIP)] == ["keep", "cap", "skip"]
    assert gac.regime_name(ACT, "project") == "project"


def test_bad_shapes_and_non_finite_gradients_fail_or_skip_as_configured():
    g, d = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="same shape"):
        gac.control(g, torch.ones(2, 4), gac.GACConfig())
    with pytest.raises(ValueError, match="non-empty last dimension"):
        gac.control(torch.ones(2, 0), torch.ones(2, 0), gac.GACConfig())
    bad = g.clone()
    bad[1, 0] = float("nan")
    with pytest.raises(gac.NonFiniteGradientError, match="non-finite"):
        gac.control(bad, d, gac.GACConfig())
    out = gac.control(bad, d, gac.GACConfig(nonfinite="skip", threshold=0.5))
    assert torch.equal(out.grad[1], torch.zeros(3)) and int(out.regime[1]) == SKIP and math.isnan(out.cosine[1])
    assert int(out.regime[0]) == ACT and torch.allclose(out.grad[0], torch.zeros(3), atol=1e-7)  # g ∥ d: all removed


def test_huge_finite_inputs_give_finite_exact_decisions():
    g = torch.tensor([[1e300, 1e300, 0.0]], dtype=torch.float64)
    d = torch.tensor([[1e300, 0.0, 0.0]], dtype=torch.float64)
    out = gac.control(g, d, gac.GACConfig(threshold=0.5, mode="project"))
    assert math.isclose(float(out.cosine), 1 / math.sqrt(2), rel_tol=1e-12)
    assert torch.equal(out.grad, torch.tensor([[0.0, 1e300, 0.0]], dtype=torch.float64))


def test_cosine_equal_to_a_threshold_is_not_past_it():
    # one-directional: only c > tau acts and only c > tau_skip skips; (3, 4) vs (1, 0) has cos = 3/5 exactly
    g, d = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([1.0, 0.0], dtype=torch.float64)
    out = gac.control(g, d, gac.GACConfig(threshold=0.6))
    assert float(out.cosine) == 0.6 and int(out.regime) == KEEP and torch.equal(out.grad, g)
    out = gac.control(g, d, gac.GACConfig(threshold=0.3, skip_threshold=0.6))
    assert int(out.regime) == ACT and torch.equal(out.grad, torch.tensor([0.0, 4.0], dtype=torch.float64))
    out = gac.control(torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.0]), gac.GACConfig(threshold=0.0))
    assert float(out.cosine) == 0.0 and int(out.regime) == KEEP  # orthogonal at tau = 0: untouched


def test_cosine_from_stats_on_sub_unit_norms_and_its_clamp():
    # the sums need not be >= 1 (eps > 0 leaves them unscaled): 0.01 / (0.2 * 0.1) = 0.5
    stats = gac.AlignmentStats(*(torch.tensor(v, dtype=torch.float64) for v in (0.01, 0.04, 0.01)))
    assert math.isclose(float(cosine_from_stats(stats)), 0.5, rel_tol=1e-15)
    for dot, expected in ((3.0, 1.0), (-3.0, -1.0)):  # rounding past Cauchy-Schwarz is clamped to [-1, 1]
        stats = gac.AlignmentStats(*(torch.tensor(v, dtype=torch.float64) for v in (dot, 1.0, 1.0)))
        assert float(cosine_from_stats(stats)) == expected


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_absolute_eps_path_matches_the_rescaled_path_on_any_batch_shape(shape):
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(shape, generator=gen, dtype=torch.float64)
    d = 0.3 * (g + 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64))  # small, aligned references
    for mode in ("project", "cap"):
        plain = gac.control(g, d, gac.GACConfig(threshold=0.2, mode=mode))
        absolute = gac.control(g, d, gac.GACConfig(threshold=0.2, mode=mode, eps=1e-9))
        assert absolute.grad.shape == g.shape and torch.allclose(absolute.grad, plain.grad, rtol=1e-12, atol=1e-14)
        assert torch.equal(absolute.regime, plain.regime) and bool((plain.regime == ACT).any())
        expected = g - parallel_part(g, d) if mode == "project" else None
        if expected is not None:
            acting = (plain.regime == ACT).unsqueeze(-1)
            assert torch.allclose(torch.where(acting, absolute.grad, expected), expected, atol=1e-12)


def test_float32_in_float32_out_and_zero_gradient_reports_zero_norm():
    g, d = torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    out = gac.control(g, d, gac.GACConfig(threshold=0.5))
    assert out.grad.dtype == torch.float32 and out.regime.tolist() == [ACT, KEEP]
    _, decision = decide_and_apply(g, d, gac.GACConfig(threshold=0.5), 0.5)
    assert math.isclose(float(decision.norm_before[0]), math.sqrt(2.0), rel_tol=1e-15)
    assert float(decision.norm_before[1]) == 0.0


def test_scalar_gradients_count_as_p_equal_one():
    out = gac.control(torch.tensor(2.0), torch.tensor(-1.0), gac.GACConfig(threshold=0.5))
    assert out.grad.shape == () and float(out.grad) == 2.0 and int(out.regime) == KEEP and float(out.cosine) == -1.0
    out = gac.control(torch.tensor(2.0), torch.tensor(1.0), gac.GACConfig(threshold=0.5))
    assert float(out.grad) == 0.0 and int(out.regime) == ACT


def test_error_messages_name_the_function_and_the_fix():
    with pytest.raises(ValueError, match=r"^control needs a non-empty last dimension \(P >= 1\), got shape \(0,\)$"):
        gac.control(torch.ones(0), torch.ones(0), gac.GACConfig())
    d = torch.ones(2, 3)
    d[0, 1] = float("inf")
    with pytest.raises(gac.NonFiniteGradientError, match=r"^control: non-finite GAC reference \(NaN or inf\); "
                                                         r"nothing was changed \(GACConfig\(nonfinite='skip'\)"):
        gac.control(torch.ones(2, 3), d, gac.GACConfig())
    out = gac.control(torch.ones(2, 3), d, gac.GACConfig(nonfinite="skip", threshold=0.5))
    assert out.regime.tolist() == [SKIP, ACT]  # only the row with the bad reference is skipped
    with pytest.raises(ValueError, match=r"^control: threshold must be in \[0, 1\)"):
        gac.control(torch.ones(3), torch.ones(3), gac.GACConfig(), threshold=torch.tensor(1.5))
    rule = gac.GACConfig(threshold=gac.EMAThreshold(margin=0.1, decay=0.5, floor=0.0, ceiling=0.9, warmup=2))
    with pytest.raises(ValueError, match=r"^control with an adaptive threshold rule needs threshold=τ; use gac.update, "
                                         r"which keeps the rule's statistics in GACState$"):
        gac.control(torch.ones(3), torch.ones(3), rule)
    stats = gac.alignment_stats(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^decide with an adaptive threshold rule needs threshold=τ \(from the rule's "
                                         r"statistics\)$"):
        gac.decide(stats, rule)
    assert int(gac.decide(stats, gac.GACConfig(threshold=0.5)).regime) == ACT  # a float cfg.threshold is used as is


def test_non_finite_row_is_skipped_alone_in_a_two_dimensional_batch():
    g = torch.ones(2, 3, 4, dtype=torch.float64)
    g[1, 2, 0] = float("nan")
    out = gac.control(g, torch.ones(2, 3, 4, dtype=torch.float64), gac.GACConfig(nonfinite="skip", threshold=0.5))
    expected = torch.full((2, 3), ACT)
    expected[1, 2] = SKIP
    assert torch.equal(out.regime, expected) and torch.equal(out.grad, torch.zeros_like(g))  # g ∥ d: all removed


@given(pairs(max_rows=1), st.floats(0.0, 0.95), st.sampled_from(["project", "cap"]),
       st.sampled_from([None, 0.97, -0.5]), st.sampled_from([0.0, 1e-3]))
def test_decide_scalar_has_the_bits_of_decide(gd, tau, mode, skip, eps):
    """The tracker's float decision against the tensor one: every field equal bit for bit (NaN where NaN), on
    sums of random pairs, zero vectors and a cosine of exactly ±1 included."""
    g, d = gd[0], gd[1]
    cases = [(g, d), (g, g), (g, -g), (torch.zeros_like(g), d), (g, torch.zeros_like(d)), (g * 1e-4, d * 1e-4)]
    skip = None if skip is not None and skip <= tau else skip
    cfg = gac.GACConfig(threshold=tau, mode=mode, skip_threshold=skip, eps=eps)
    for a, b in cases:
        stats = gac.alignment_stats(a, b)
        expected = gac.decide(stats, cfg)
        got = decide_scalar(*(float(s) for s in stats), cfg, tau, skip)
        assert isinstance(got.regime, int) and got.regime == int(expected.regime)
        for name in ("cosine", "parallel_scale", "grad_scale", "ref_coef", "norm_before", "norm_after"):
            want, have = float(getattr(expected, name)), getattr(got, name)
            assert (math.isnan(want) and math.isnan(have)) or (have == want and math.copysign(1, have) == math.copysign(
                1, want)), (name, have, want)
