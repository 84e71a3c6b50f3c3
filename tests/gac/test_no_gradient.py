"""No gradient is not an orthogonal gradient: the NaN cosine rule (DESIGN.md's GAC specification).

c = cos(g, d) is NaN where either norm is 0; the regime is then "keep"; the reference keeps its last nonzero
direction (a zero gradient never becomes it) and an adaptive threshold observes nothing. Checked on the pure
``gac.update`` (prev and EMA references, adaptive threshold) and on ``gac.wrap`` against hand computations.
"""

from __future__ import annotations

import math

import pytest
import torch

import gac
from tests.gac.helpers import same

RULE = gac.EMAThreshold(margin=0.05, decay=0.5, floor=0.1, ceiling=0.8, warmup=0)


@pytest.mark.parametrize("reference", ["prev", "ema"])
def test_pure_update_a_zero_gradient_reads_nan_keeps_and_changes_no_state(reference):
    cfg = gac.GACConfig(threshold=RULE, reference=reference, ema_decay=0.5)
    gen = torch.Generator().manual_seed(0)
    first, second = torch.randn(2, 6, generator=gen, dtype=torch.float64)
    state = gac.init(first.expand(2, 6), cfg)
    _, state, report = gac.update(torch.stack([first, first]), state, cfg)
    assert torch.isnan(report.cosine).all()  # no reference yet: nothing measured, not "orthogonal"
    assert state.threshold_stats[1].tolist() == [0, 0]
    zero = torch.stack([torch.zeros(6, dtype=torch.float64), second])  # row 0: a zero gradient
    out, after, report = gac.update(zero, state, cfg)
    assert math.isnan(report.cosine[0]) and int(report.regime[0]) == gac.KEEP
    assert torch.equal(out[0], zero[0])
    assert torch.equal(after.reference[0], state.reference[0])  # the zero gradient did not become the reference
    assert after.threshold_stats[1].tolist() == [0, 1]  # and the rule did not observe it
    assert torch.equal(after.threshold_stats[0][0], state.threshold_stats[0][0])
    # The next gradient is measured against the last nonzero one (prev) or the EMA as it was before the zero step.
    _, _, report = gac.update(torch.stack([second, second]), after, cfg)
    expected = torch.nn.functional.cosine_similarity(second, state.reference[0], dim=0)
    assert float(report.cosine[0]) == pytest.approx(float(expected), abs=1e-12)


def sgd_run(space: str, grads: list[torch.Tensor], lr: float = 0.1):
    """θ after each step and the reports of gac.wrap(SGD) with GAC (project, τ = 0) on the given gradients."""
    param = torch.nn.Parameter(torch.zeros(grads[0].shape, dtype=torch.float64))
    opt = gac.wrap(torch.optim.SGD([param], lr=lr), gac.GACConfig(threshold=0.0, space=space))
    thetas, reports = [], []
    for g in grads:
        param.grad = g.clone()
        opt.step()
        thetas.append(param.detach().clone())
        reports.append(opt.last_report)
    return thetas, reports


@pytest.mark.parametrize("space", ["gradient", "update"])
def test_wrap_a_zero_gradient_reads_nan_keeps_and_the_next_step_is_measured_against_the_last_nonzero_one(space):
    gen = torch.Generator().manual_seed(1)
    first = torch.randn(8, generator=gen, dtype=torch.float64)
    third = first + 0.5 * torch.randn(8, generator=gen, dtype=torch.float64)  # aligned with the first: GAC acts
    thetas, reports = sgd_run(space, [first, torch.zeros(8, dtype=torch.float64), third])
    assert math.isnan(reports[0].cosine) and math.isnan(reports[1].cosine)
    assert [r.regime for r in reports] == ["keep", "keep", "project"]
    assert torch.equal(thetas[1], thetas[0])  # plain SGD does not move on a zero gradient, and neither does GAC
    # By hand: the third step projects out its part along the first gradient (the last nonzero one).
    assert reports[2].cosine == pytest.approx(float(third @ first / (third.norm() * first.norm())), abs=1e-12)
    projected = third - (third @ first) / (first @ first) * first
    torch.testing.assert_close(thetas[2], thetas[1] - 0.1 * projected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_wrap_first_step_has_no_reference_and_reads_nan_not_zero(space):
    param = torch.nn.Parameter(torch.ones(4))
    opt = gac.wrap(torch.optim.SGD([param], lr=0.1, momentum=0.9), gac.GACConfig(threshold=RULE, space=space))
    param.grad = torch.tensor([1.0, -2.0, 0.5, 3.0])
    opt.step()
    assert math.isnan(opt.last_report.cosine) and opt.last_report.regime == "keep"
    assert int(opt.gac.threshold_stats[1]) == 0  # the rule observed nothing
    param.grad = torch.tensor([1.0, 2.0, -0.5, 3.0])
    opt.step()
    assert math.isfinite(opt.last_report.cosine) and int(opt.gac.threshold_stats[1]) == 1


def test_tracker_zero_gradient_under_the_ema_reference_keeps_the_reference_as_it_was():
    params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]
    tracker = gac.GradientAlignmentControl(params, gac.GACConfig(reference="ema", ema_decay=0.5))
    params[0].grad, params[1].grad = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0])
    tracker.apply()
    before = [r.clone() for r in tracker.reference]
    params[0].grad, params[1].grad = torch.zeros(3), torch.zeros(2)
    report = tracker.apply()
    assert math.isnan(report.cosine) and report.regime == "keep"
    assert all(torch.equal(a, b) for a, b in zip(tracker.reference, before, strict=True))  # not decayed towards 0


# -- a parameter without a gradient (issue 51, item 4) ----------------------------------------------------------
# A parameter whose gradient is None or an all-zero tensor at a step takes no part in GAC's step: it is not counted in
# the cosine (neither its gradient nor its reference), GAC does not move it (the inner optimizer does with it what it
# does unwrapped), and its reference keeps its last value. So zero_grad(set_to_none=False) trains as set_to_none=True.
STEPS = 8


def absent_gradients(seed: int = 3) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(gradient of A, gradient of B or None): B gets a gradient at even steps only (a branch used every other step);
    the gradients stay aligned, so GAC acts."""
    gen = torch.Generator().manual_seed(seed)
    base_a, base_b = torch.randn(4, 3, generator=gen, dtype=torch.float64), torch.randn(5, generator=gen,
                                                                                       dtype=torch.float64)
    return [(base_a + 0.5 * torch.randn(4, 3, generator=gen, dtype=torch.float64),
             base_b + 0.5 * torch.randn(5, generator=gen, dtype=torch.float64) if step % 2 == 0 else None)
            for step in range(STEPS)]


def two_parameter_run(space: str, absent_as: str, optimizer=lambda params: torch.optim.SGD(params, lr=0.1)):
    """Per step: (θ_A, θ_B, references before the step, vectors' inputs, report) of gac.wrap in ``space`` with B's
    missing gradient given as None or as a zero tensor (what zero_grad(set_to_none=False) leaves)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.nn.Parameter(torch.randn(4, 3, generator=gen, dtype=torch.float64))
    b = torch.nn.Parameter(torch.randn(5, generator=gen, dtype=torch.float64))
    opt = gac.wrap(optimizer([a, b]), gac.GACConfig(threshold=0.0, space=space))
    out = []
    for grad_a, grad_b in absent_gradients():
        references = [None if r is None else r.clone() for r in opt.gac.reference]
        buffers = [None if "momentum_buffer" not in opt.state.get(p, {}) else opt.state[p]["momentum_buffer"].clone()
                   for p in (a, b)]
        a.grad = grad_a.clone()
        b.grad = (None if absent_as == "none" else torch.zeros(5, dtype=torch.float64)) if grad_b is None else \
            grad_b.clone()
        before = (a.detach().clone(), b.detach().clone())
        opt.step()
        out.append(dict(a=a.detach().clone(), b=b.detach().clone(), before=before, references=references,
                        buffers=buffers, grad_a=grad_a, absent=grad_b is None, report=opt.last_report,
                        b_buffer=None if "momentum_buffer" not in opt.state.get(b, {})
                        else opt.state[b]["momentum_buffer"].clone()))
    return out


@pytest.mark.parametrize("space", ["gradient", "update"])
def test_zero_grad_set_to_none_false_trains_as_set_to_none_true(space):
    """Plain SGD moves neither a None nor a zero gradient's parameter; GAC used to move the zero one (g' = −α·d_B)."""
    none, zero = two_parameter_run(space, "none"), two_parameter_run(space, "zero")
    for n, z in zip(none, zero, strict=True):
        assert torch.equal(n["a"], z["a"]) and torch.equal(n["b"], z["b"])
        assert same([n["report"].cosine, n["report"].regime], [z["report"].cosine, z["report"].regime])
        if n["absent"]:
            assert torch.equal(z["b"], z["before"][1])  # B not moved at a step where it has no gradient
    assert sum(s["report"].regime == "project" for s in zero) >= STEPS // 2  # GAC acted


def hand_cosine(vector_a: torch.Tensor, reference_a: torch.Tensor) -> float:
    return float(vector_a.flatten() @ reference_a.flatten() / (vector_a.norm() * reference_a.norm()))


@pytest.mark.parametrize("absent_as", ["none", "zero"])
@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_an_absent_parameter_is_not_counted_moved_or_forgotten(space, absent_as):
    """At a step where B has no gradient, the cosine is A's alone (vector against A's reference), B's reference keeps
    its value, and in momentum space B's stored moment is what SGD-momentum makes of a zero gradient (not shifted)."""
    run = two_parameter_run(space, absent_as, lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
    checked = 0
    for step, s in enumerate(run):
        if not s["absent"] or s["references"][0] is None or step + 1 == len(run):
            continue
        if space == "gradient":
            vector_a = s["grad_a"]
        elif space == "update":
            vector_a = s["a"] - s["before"][0] if s["report"].regime == "keep" else None
        else:
            vector_a = 0.9 * s["buffers"][0] + s["grad_a"]
        if vector_a is not None:
            assert s["report"].cosine == pytest.approx(hand_cosine(vector_a, s["references"][0]), abs=1e-12)
        following = run[step + 1]["references"][1]
        assert following is not None and torch.equal(following, s["references"][1])  # B's reference kept
        if space == "momentum" and absent_as == "zero":
            torch.testing.assert_close(s["b_buffer"], 0.9 * s["buffers"][1], rtol=0, atol=0)
        checked += 1
    assert checked >= 2
    assert sum(s["report"].regime == "project" for s in run) >= 2  # GAC acted
