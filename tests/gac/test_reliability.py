"""Issue 22's library defects, one regression test each: checkpoint paths, half precision, bad overrides,
non-finite references, and the misuses (sparse gradients, wrapping twice, LBFGS, autograd graphs)."""

import copy

import numpy as np
import pytest
import torch

import gac
from tests.gac.helpers import batches, loss_fn, tiny_model

RULE_CFG = gac.GACConfig(threshold=gac.EMAThreshold(margin=0.05, warmup=2), mode="cap")


def train(model, opt, data):
    for batch in data:
        opt.zero_grad()
        loss_fn(model, batch).backward()
        opt.step()
    return opt.last_report


# -- torch distributed-checkpoint state-dict API --------------------------------------------------------
@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_dcp_state_dict_api_resumes_bit_identically(space):
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    cfg = gac.GACConfig(**{**RULE_CFG.__dict__, "space": space})
    data = batches(8)
    straight_model = tiny_model()
    straight = gac.wrap(torch.optim.AdamW(straight_model.parameters(), lr=0.05), cfg)
    train(straight_model, straight, data)

    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), cfg)
    train(model, opt, data[:4])
    saved_optimizer = copy.deepcopy(get_optimizer_state_dict(model, opt))
    saved_model = copy.deepcopy(model.state_dict())

    resumed_model = tiny_model(seed=5)  # other weights, so the load has to bring them
    resumed = gac.wrap(torch.optim.AdamW(resumed_model.parameters(), lr=0.05), cfg)
    resumed_model.load_state_dict(saved_model)
    set_optimizer_state_dict(resumed_model, resumed, saved_optimizer)
    assert resumed.gac.step == 4 and int(resumed.gac.threshold_stats[1]) == 3  # step 1's cosine is NaN
    train(resumed_model, resumed, data[4:])
    assert resumed.gac.step == straight.gac.step == 8
    assert all(torch.equal(a, b) for a, b in zip(straight_model.parameters(), resumed_model.parameters(), strict=True))
    assert float(resumed.gac.threshold_stats[0]) == float(straight.gac.threshold_stats[0])


def test_dcp_state_dict_api_runs_no_gac_step():
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), RULE_CFG)
    before = [p.detach().clone() for p in model.parameters()]
    get_optimizer_state_dict(model, opt)  # on empty state torch steps the optimizer with zero gradients, lr 0
    assert opt.gac.step == 0 and int(opt.gac.threshold_stats[1]) == 0 and opt.last_report is None
    assert all(r is None for r in opt.gac.reference)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    train(model, opt, batches(3))
    state = copy.deepcopy((opt.gac.step, [t.clone() for t in opt.gac.threshold_stats], opt.gac.reference))
    set_optimizer_state_dict(model, opt, get_optimizer_state_dict(model, opt))
    assert opt.gac.step == state[0] == 3
    assert all(torch.equal(a, b) for a, b in zip(opt.gac.threshold_stats, state[1], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(opt.gac.reference, state[2], strict=True))


# -- half precision -------------------------------------------------------------------------------------
def fp16_gradients(steps=3, size=4096, seed=0):
    """Finite fp16 gradients with ‖g‖ ≈ 8e4 (entries ≈ 1250): their fp16 norm and dot overflow at 65504."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.full((size,), 1250.0)
    return [(base + 300.0 * torch.randn(size, generator=gen)).half() for _ in range(steps)]


@pytest.mark.parametrize("nonfinite", ["raise", "skip"])
def test_fp16_gradients_with_a_large_finite_norm_are_controlled_not_rejected(nonfinite):
    cfg = gac.GACConfig(threshold=0.5, nonfinite=nonfinite)
    grads = fp16_gradients()
    assert all(bool(torch.isfinite(g).all()) for g in grads) and 7e4 < grads[0].float().norm() < 9e4
    param = torch.nn.Parameter(torch.zeros(grads[0].numel(), dtype=torch.float16))
    opt = gac.wrap(torch.optim.SGD([param], lr=1e-9), cfg)
    state = gac.init(grads[0].float(), cfg)
    for g in grads:
        param.grad = g.clone()
        opt.step()
        report = opt.last_report
        expected, state, pure = gac.update(g, state if state.reference.dtype == g.dtype else gac.init(g, cfg), cfg)
        assert not report.nonfinite and report.regime != "skip"
        assert report.cosine == pytest.approx(float(pure.cosine), abs=1e-6, nan_ok=True)
        assert report.regime == gac.regime_name(int(pure.regime), cfg.mode)
        assert report.grad_norm_before == pytest.approx(float(pure.grad_norm_before), rel=1e-6)
    assert report.regime == "project"  # the gradients are aligned: GAC acted on the fp16 input


# -- reference_dtype in the pure update -----------------------------------------------------------------
def test_pure_update_keeps_the_requested_reference_dtype_and_matches_the_tracker():
    cfg = gac.GACConfig(threshold=0.1, reference_dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(2)
    grads = [torch.linspace(-1, 1, 64) + 0.7 * torch.randn(64, generator=gen) for _ in range(5)]
    param = torch.nn.Parameter(torch.zeros(64))
    tracker = gac.GradientAlignmentControl([param], cfg)
    state = gac.init(grads[0], cfg)
    for g in grads:
        _, state, pure = gac.update(g, state, cfg)
        assert state.reference.dtype == torch.bfloat16
        param.grad = g.clone()
        report = tracker.apply()
        assert report.cosine == pytest.approx(float(pure.cosine), abs=1e-6, nan_ok=True)


# -- overrides and configs ------------------------------------------------------------------------------
@pytest.mark.parametrize("tau", [-0.5, 1.5, float("nan"), float("inf"), torch.tensor([0.2, -0.1])])
def test_threshold_override_outside_its_range_is_one_line(tau):
    cfg = gac.GACConfig(threshold=0.3, mode="cap")
    g = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    state = gac.init(g, cfg)
    _, state, _ = gac.update(g, state, cfg)
    for call in (lambda: gac.update(g, state, cfg, threshold=tau), lambda: gac.control(g, state.reference, cfg, tau)):
        with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\)") as info:
            call()
        assert "\n" not in str(info.value)


def test_numpy_threshold_is_accepted_as_a_float():
    cfg = gac.GACConfig(threshold=np.float32(0.25), skip_threshold=np.float64(0.9))
    assert type(cfg.threshold) is float and cfg.threshold == float(np.float32(0.25))
    with pytest.raises(ValueError, match=r"threshold must be in \[0, 1\), got 1.5"):
        gac.GACConfig(threshold=np.float32(1.5))


# -- non-finite reference -------------------------------------------------------------------------------
def test_nonfinite_reference_is_reported_like_a_nonfinite_gradient():
    g = torch.ones(2, 4)
    state = gac.init(g, gac.GACConfig())
    broken = state._replace(reference=torch.tensor([[1.0, float("nan"), 0, 0], [1.0, 0, 0, 0]]))
    with pytest.raises(gac.NonFiniteGradientError, match="non-finite GAC reference"):
        gac.update(g, broken, gac.GACConfig())
    new, after, report = gac.update(g, broken, gac.GACConfig(nonfinite="skip"))
    assert report.nonfinite.tolist() == [True, False] and report.regime.tolist() == [gac.SKIP, gac.ACT]
    assert torch.equal(new[0], torch.zeros(4)) and bool(torch.isfinite(after.reference).all())

    param = torch.nn.Parameter(torch.zeros(4))
    opt = gac.wrap(torch.optim.SGD([param], lr=0.1), gac.GACConfig())
    param.grad = torch.ones(4)
    opt.step()
    opt.state[param]["gac_reference"][1] = float("inf")
    param.grad = torch.ones(4)
    with pytest.raises(gac.NonFiniteGradientError, match="non-finite GAC reference") as info:
        opt.step()
    assert "\n" not in str(info.value)


def test_nonfinite_reference_under_skip_restarts_the_tracker():
    param = torch.nn.Parameter(torch.zeros(4))
    opt = gac.wrap(torch.optim.SGD([param], lr=0.1), gac.GACConfig(nonfinite="skip"))
    param.grad = torch.ones(4)
    opt.step()
    opt.state[param]["gac_reference"][1] = float("nan")
    param.grad = torch.ones(4)
    before = param.detach().clone()
    opt.step()
    assert opt.last_report.regime == "skip" and opt.last_report.nonfinite and torch.equal(param.detach(), before)
    param.grad = torch.ones(4)
    opt.step()  # the reference started anew: a normal step, cosine 0 against a zero reference
    assert opt.last_report.regime == "keep" and not opt.last_report.nonfinite


# -- misuse -------------------------------------------------------------------------------------------
def test_sparse_gradients_are_a_clear_error():
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    opt = gac.wrap(torch.optim.SGD(embedding.parameters(), lr=0.1), gac.GACConfig())
    embedding(torch.tensor([1, 2])).sum().backward()
    before = embedding.weight.detach().clone()
    with pytest.raises(ValueError, match="sparse gradients") as info:
        opt.step()
    assert "\n" not in str(info.value) and torch.equal(embedding.weight.detach(), before)


def test_wrapping_twice_is_a_clear_error():
    inner = torch.optim.AdamW(tiny_model().parameters(), lr=0.1)
    once = gac.wrap(inner, gac.GACConfig())
    for again in (once, inner):
        with pytest.raises(ValueError, match="already wrapped"):
            gac.wrap(again, gac.GACConfig())


def test_lbfgs_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="LBFGS re-evaluates its closure"):
        gac.wrap(torch.optim.LBFGS(tiny_model().parameters()), gac.GACConfig())


def test_pure_update_does_not_keep_the_autograd_graph():
    weight = torch.randn(8, requires_grad=True)
    g = (weight * 3).unsqueeze(0)  # a tensor with a graph behind it
    cfg = gac.GACConfig()
    new, state, _ = gac.update(g, gac.init(g, cfg), cfg)
    assert state.reference.grad_fn is None and not state.reference.requires_grad
    assert new.grad_fn is None


# -- wrapped <-> plain state ----------------------------------------------------------------------------
def test_plain_state_loaded_into_a_wrapped_optimizer_starts_gac_anew():
    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), RULE_CFG)
    train(model, opt, batches(3))
    plain = torch.optim.AdamW(tiny_model().parameters(), lr=0.05)
    plain.load_state_dict(gac.strip_gac_state(opt.state_dict()))
    assert all(not any(key.startswith("gac") for key in s) for s in plain.state.values())  # no dead reference
    assert set(plain.state_dict()["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    opt.load_state_dict(plain.state_dict())  # a plain state: GAC has no saved reference or statistics
    assert opt.gac.step == 0 and int(opt.gac.threshold_stats[1]) == 0
    assert all(r is None for r in opt.gac.reference)


def test_wrapped_state_loaded_into_the_plain_optimizer_is_adopted_by_wrap():
    """The transformers Trainer's path: the saved state goes into the plain optimizer, which is wrapped after."""
    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), RULE_CFG)
    train(model, opt, batches(3))
    inner = torch.optim.AdamW(tiny_model().parameters(), lr=0.05)
    inner.load_state_dict(opt.state_dict())
    adopted = gac.wrap(inner, RULE_CFG)
    assert adopted.gac.step == 3 and int(adopted.gac.threshold_stats[1]) == 2  # step 1's cosine is NaN
    assert float(adopted.gac.threshold_stats[0]) == float(opt.gac.threshold_stats[0])  # exact: saved as a float
    assert all(torch.equal(a, b) for a, b in zip(adopted.gac.reference, opt.gac.reference, strict=True))
    assert all("gac_counters" not in s for s in inner.state.values())
