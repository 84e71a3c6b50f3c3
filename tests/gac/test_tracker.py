"""GradientAlignmentControl on a model's parameters, and gac.wrap on real optimizers."""

import copy

import pytest
import torch

import gac
from tests.gac.helpers import batches, flat_grad, loss_fn, same, tiny_model


@pytest.mark.parametrize("cfg", [
    gac.GACConfig(threshold=0.0, mode="project"),
    gac.GACConfig(threshold=0.2, mode="cap", reference="ema", ema_decay=0.5),
    gac.GACConfig(threshold=0.0, skip_threshold=0.6),
])
def test_tracker_equals_pure_control_on_flat_vectors(cfg):
    model = tiny_model()
    tracker = gac.GradientAlignmentControl(model.parameters(), cfg)
    reference = torch.zeros(sum(p.numel() for p in model.parameters()))
    regimes = set()
    for batch in batches(12):
        model.zero_grad()
        loss_fn(model, batch).backward()
        raw = flat_grad(model).clone()
        expected = gac.control(raw.double(), reference.double(), cfg)
        report = tracker.apply()
        regimes.add(report.regime)
        assert report.cosine == pytest.approx(expected.cosine.item(), abs=1e-6, nan_ok=True)
        assert report.regime == gac.regime_name(expected.regime.item(), cfg.mode)
        assert torch.allclose(flat_grad(model), expected.grad.float(), atol=1e-6)
        assert report.grad_norm_after == pytest.approx(flat_grad(model).norm().item(), rel=1e-5, abs=1e-7)
        reference = gac.update_reference(reference, raw, cfg)
        if report.regime == "skip":  # a skip restarts the reference (as at init)
            assert all(r is None for r in tracker.reference)
            reference = torch.zeros_like(reference)
            continue
        # The reference takes the raw gradient, whatever was applied (exactly for "prev").
        stored = torch.cat([r.reshape(-1) for r in tracker.reference])
        if cfg.reference == "prev":
            assert torch.equal(stored, raw)
        else:
            assert torch.allclose(stored, reference, atol=1e-7)
        # Keep the params fixed: gradients of a fixed model on fresh data make every regime occur.
    assert len(regimes) >= 2


def test_bfloat16_reference_halves_memory_and_tracks_cosine():
    model = tiny_model()
    full = gac.GradientAlignmentControl(model.parameters(), gac.GACConfig(threshold=0.9))
    half = gac.GradientAlignmentControl(model.parameters(), gac.GACConfig(threshold=0.9,
                                                                           reference_dtype=torch.bfloat16))
    for batch in batches(5):
        model.zero_grad()
        loss_fn(model, batch).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        cos_full = full.apply().cosine
        for p, g in zip(model.parameters(), grads, strict=True):
            p.grad.copy_(g)
        cos_half = half.apply().cosine
        assert cos_half == pytest.approx(cos_full, abs=1e-2, nan_ok=True)
    assert half.reference_bytes() * 2 == full.reference_bytes()
    assert all(r.dtype == torch.bfloat16 for r in half.reference)


def test_nonfinite_gradient_raises_naming_step_and_changes_nothing():
    model = tiny_model()
    tracker = gac.GradientAlignmentControl(model.parameters(), gac.GACConfig())
    for batch in batches(2):
        model.zero_grad()
        loss_fn(model, batch).backward()
        tracker.apply()
    reference_before = [r.clone() for r in tracker.reference]
    model[0].weight.grad[0, 0] = float("nan")
    grad_before = flat_grad(model).clone()
    with pytest.raises(gac.NonFiniteGradientError, match="step 2"):
        tracker.apply()
    assert all(torch.equal(a, b) for a, b in zip(reference_before, tracker.reference, strict=True))
    assert torch.equal(flat_grad(model).nan_to_num(7.0), grad_before.nan_to_num(7.0))


def test_nonfinite_skip_policy_skips_and_counts_without_touching_params():
    model = tiny_model()
    opt = gac.wrap(torch.optim.SGD(model.parameters(), lr=0.1), gac.GACConfig(nonfinite="skip"))
    params_before = [p.detach().clone() for p in model.parameters()]
    loss_fn(model, batches(1)[0]).backward()
    model[2].bias.grad[0] = float("inf")
    opt.step()
    assert opt.gac.skipped_nonfinite == 1 and opt.skipped_steps == 1
    assert opt.last_report.nonfinite and opt.last_report.regime == "skip"
    assert all(torch.equal(a, b) for a, b in zip(params_before, model.parameters(), strict=True))
    assert all(r is None for r in opt.gac.reference)  # nothing non-finite ever enters the reference


def run_training(optimizer_cls, steps, cfg, state=None, **opt_kwargs):
    model = tiny_model()
    opt = gac.wrap(optimizer_cls(model.parameters(), **opt_kwargs), cfg)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        scheduler.load_state_dict(state["sched"])
    data = batches(steps[1])
    reports = []
    for step in range(*steps):
        opt.zero_grad()
        loss_fn(model, data[step]).backward()
        opt.step()
        scheduler.step()
        reports.append(opt.last_report)
    saved = {"model": copy.deepcopy(model.state_dict()), "opt": copy.deepcopy(opt.state_dict()),
             "sched": scheduler.state_dict()}
    return model, reports, saved


@pytest.mark.parametrize("optimizer_cls, kwargs", [(torch.optim.SGD, {"lr": 0.2, "momentum": 0.9}),
                                                   (torch.optim.AdamW, {"lr": 0.05})])
def test_wrap_state_dict_resume_is_bit_identical(optimizer_cls, kwargs):
    cfg = gac.GACConfig(threshold=0.1, mode="cap", skip_threshold=0.95)
    straight, straight_reports, _ = run_training(optimizer_cls, (0, 10), cfg, **kwargs)
    _, first_half, saved = run_training(optimizer_cls, (0, 5), cfg, **kwargs)
    resumed, second_half, _ = run_training(optimizer_cls, (5, 10), cfg, state=saved, **kwargs)
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert same([r.cosine for r in straight_reports], [r.cosine for r in first_half + second_half])
    assert any(r.regime != "keep" for r in straight_reports)


def test_wrap_behaves_like_an_optimizer():
    model = tiny_model()
    inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt = gac.wrap(inner, gac.GACConfig())
    assert isinstance(opt, torch.optim.Optimizer)
    assert opt.param_groups is inner.param_groups
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)
    calls = []
    opt.register_step_pre_hook(lambda *_: calls.append("pre"))
    for batch in batches(3):
        opt.zero_grad()
        loss_fn(model, batch).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        scheduler.step()
    assert inner.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.5 ** 3)
    assert calls == ["pre"] * 3
    assert len(inner.state) == len(list(model.parameters()))
    assert all(p.grad is None for p in model.parameters()) is False
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_skip_regime_does_not_step_inner_optimizer():
    model = tiny_model()
    opt = gac.wrap(torch.optim.SGD(model.parameters(), lr=0.1), gac.GACConfig(threshold=0.0, skip_threshold=0.5))
    batch = batches(1)[0]
    for _ in range(2):  # the same batch twice (after one small step): cosine near 1 > skip_threshold
        opt.zero_grad()
        loss_fn(model, batch).backward()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
    assert opt.last_report.regime == "skip" and opt.last_report.cosine > 0.99
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_adaptive_threshold_rule_state_resumes():
    rule = gac.EMAThreshold(margin=0.05, warmup=2)
    model = tiny_model()
    tracker = gac.GradientAlignmentControl(model.parameters(), gac.GACConfig(threshold=rule))
    for batch in batches(4):
        model.zero_grad()
        loss_fn(model, batch).backward()
        tracker.apply()
    state = copy.deepcopy(tracker.state_dict())
    other = gac.GradientAlignmentControl(model.parameters(), gac.GACConfig(threshold=gac.EMAThreshold(margin=0.05,
                                                                                                     warmup=2)))
    other.load_state_dict(state)
    assert float(rule.current(other.threshold_stats)) == float(rule.current(tracker.threshold_stats))
    assert int(other.threshold_stats[1]) == 3 and other.step == 4  # the first cosine (no reference) is NaN


def test_no_gradient_is_a_clear_error():
    model = tiny_model()
    tracker = gac.GradientAlignmentControl(model.parameters())
    with pytest.raises(ValueError, match="no parameter has a gradient"):
        tracker.apply()


@pytest.mark.parametrize("reference_dtype", [None, torch.bfloat16])
def test_chunked_and_noncontiguous_gradients_match_pure_control(monkeypatch, reference_dtype):
    import gac.tracker

    monkeypatch.setattr(gac.tracker, "CHUNK_NUMEL", 7)  # many chunks per tensor, ragged last chunk
    gen = torch.Generator().manual_seed(3)
    params = [torch.zeros(5, 9, requires_grad=True), torch.zeros(4, 6, requires_grad=True)]
    cfg = gac.GACConfig(threshold=0.1, mode="cap", reference_dtype=reference_dtype)
    tracker = gac.GradientAlignmentControl(params, cfg)
    reference = torch.zeros(45 + 24, dtype=torch.float64)
    base = torch.randn(45 + 24, generator=gen)
    acted = 0
    for _ in range(5):
        flat = base + 0.5 * torch.randn(45 + 24, generator=gen)
        params[0].grad = flat[:45].reshape(5, 9).clone()
        params[1].grad = flat[45:].reshape(6, 4).clone().t()  # non-contiguous gradient
        assert not params[1].grad.is_contiguous()
        expected = gac.control(flat.double(), reference, cfg)
        report = tracker.apply()
        acted += report.regime == "cap"
        got = torch.cat([params[0].grad.reshape(-1), params[1].grad.t().reshape(-1)])
        tol = 1e-6 if reference_dtype is None else 2e-2
        assert report.cosine == pytest.approx(expected.cosine.item(), abs=tol, nan_ok=True)
        if report.regime == gac.regime_name(int(expected.regime), "cap"):
            assert torch.allclose(got.double(), expected.grad, atol=tol * 10)
        stored = torch.cat([tracker.reference[0].reshape(-1), tracker.reference[1].t().reshape(-1)])
        assert torch.equal(stored, flat.to(stored.dtype))  # the raw gradient, whatever was applied
        reference = flat.to(stored.dtype).double()
    assert acted >= 3


@pytest.mark.parametrize("cfg", [gac.GACConfig(threshold=0.0, mode="cap"),
                                 gac.GACConfig(threshold=0.2, reference="ema"),
                                 gac.GACConfig(threshold=0.0, reference_dtype=torch.bfloat16)])
def test_cached_reference_norm_gives_the_same_numbers_as_recomputing_it(monkeypatch, cfg):
    """‖d‖² is taken from last step's ‖g‖² when d is that raw g; a step where one parameter has no
    gradient (so the cache must not be used) is included."""

    def run(use_cache: bool) -> list[tuple]:
        tracker_cls = gac.GradientAlignmentControl
        if not use_cache:
            monkeypatch.setattr(tracker_cls, "_cached_d_sq", lambda self, indices, grads: None)
        model = tiny_model()
        tracker = tracker_cls(model.parameters(), cfg)
        out = []
        for step, batch in enumerate(batches(8)):
            model.zero_grad()
            loss_fn(model, batch).backward()
            if step in (3, 5):
                model[0].bias.grad = None
            report = tracker.apply()
            out.append((report.cosine, report.regime, report.grad_norm_after, flat_grad_or_none(model)))
        monkeypatch.undo()
        return out

    cached, recomputed = run(True), run(False)
    assert same([c[:3] for c in cached], [r[:3] for r in recomputed])
    assert all(torch.equal(c[3], r[3]) for c, r in zip(cached, recomputed, strict=True))


def flat_grad_or_none(model) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


def _wrapped_run(swap: bool, steps: int = 8, zero_to_none: bool = True, cfg=None):
    """Parameters, reports and whether any step replaced a .grad, for gac.wrap(AdamW) in gradient space."""
    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), cfg or gac.GACConfig(threshold=0.0, mode="cap"))
    opt.swap_grads = swap
    reports, replaced = [], False
    for step, batch in enumerate(batches(steps)):
        opt.zero_grad(set_to_none=zero_to_none)
        loss_fn(model, batch).backward()
        if step == 4:
            model[0].bias.grad = None  # a parameter without a gradient this step
        before = [p.grad for p in model.parameters()]
        opt.step()
        replaced |= any(a is not None and a is not p.grad for a, p in zip(before, model.parameters(), strict=True))
        reports.append((opt.last_report.cosine, opt.last_report.regime, opt.last_report.grad_norm_after,
                        flat_grad_or_none(model)))
    return [p.detach().clone() for p in model.parameters()], reports, replaced


@pytest.mark.parametrize("zero_to_none", [True, False])
@pytest.mark.parametrize("cfg", [gac.GACConfig(threshold=0.0, mode="cap"), gac.GACConfig(threshold=0.0),
                                 gac.GACConfig(threshold=0.2, skip_threshold=0.9)])
def test_swapping_grad_buffers_gives_the_in_place_path_bits(zero_to_none, cfg):
    """gac.wrap in gradient space swaps .grad with the reference instead of copying (one pass instead of three):
    parameters, reports and the g' left in .grad equal the in-place path bit for bit, and a swap did happen."""
    swapped, swapped_reports, replaced = _wrapped_run(True, zero_to_none=zero_to_none, cfg=cfg)
    in_place, in_place_reports, unchanged = _wrapped_run(False, zero_to_none=zero_to_none, cfg=cfg)
    assert replaced and not unchanged
    assert sum(r[1] in ("project", "cap") for r in swapped_reports) >= 2
    assert all(torch.equal(a, b) for a, b in zip(swapped, in_place, strict=True))
    assert same([r[:3] for r in swapped_reports], [r[:3] for r in in_place_reports])
    assert all(torch.equal(a[3], b[3]) for a, b in zip(swapped_reports, in_place_reports, strict=True))


def test_writing_into_a_kept_gradient_tensor_after_a_swap_is_a_clear_error():
    """A loop that keeps the tensor it got from .grad and writes the next gradient into it would overwrite the
    reference it became: the next step says so instead of measuring against a corrupted reference."""
    model = tiny_model()
    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05), gac.GACConfig(threshold=0.0, mode="cap"))
    kept = None
    for batch in batches(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        if kept is not None:
            kept.copy_(model[0].weight.grad)  # the loop writes into the tensor it kept from last step
        kept = model[0].weight.grad
        if opt.gac.step == 2:
            with pytest.raises(ValueError, match="re-read p.grad each step"):
                opt.step()
            return
        opt.step()
    raise AssertionError("the third step should have raised")
