"""gac.wrap in each space (gradient, update, momentum) against AdamW / Adam / SGD written out by hand in float64.

The hand versions below re-derive every optimizer step and every projection from the formulas in
``gac.optim``'s docstring; they share no code with the library. A wrong placement (projecting the gradient
instead of the momentum, not shifting the buffer, not restoring θ on a skip) is patched in and must fail.
"""

import io
import math

import pytest
import torch

import gac
import gac.tracker
from gac.optim import GACOptimizer

DIM, SPLIT, STEPS = 12, 5, 12
LR, BETAS, EPS, WD = 0.05, (0.9, 0.999), 1e-8, 0.01
MOMENTUM, DAMPENING = 0.9, 0.1
NOISE = 1.0


def problem():
    """A diagonal quadratic with per-step noise: g_t(θ) = a ⊙ θ − b + ξ_t (float64, seeded)."""
    gen = torch.Generator().manual_seed(7)
    curvature = torch.rand(DIM, generator=gen, dtype=torch.float64) + 0.5
    target = torch.randn(DIM, generator=gen, dtype=torch.float64)
    noise = NOISE * torch.randn(STEPS, DIM, generator=gen, dtype=torch.float64)
    start = torch.randn(DIM, generator=gen, dtype=torch.float64)
    return curvature, target, noise, start


def gradient(theta, step, lo=0, hi=DIM):
    curvature, target, noise, _ = problem()
    return curvature[lo:hi] * theta - target[lo:hi] + noise[step, lo:hi]


# -- by hand --------------------------------------------------------------------------------------------
def control_by_hand(v, d, cfg):
    """(v', regime) for vector v against reference d: the DESIGN.md rules, written out."""
    v_norm, d_norm = v.norm(), d.norm()
    c = 0.0 if v_norm == 0 or d_norm == 0 else float(v @ d / (v_norm * d_norm))
    if cfg.skip_threshold is not None and c > cfg.skip_threshold:
        return torch.zeros_like(v), "skip"
    if c <= cfg.threshold:
        return v, "keep"
    parallel = (v @ d) / (d @ d) * d
    if cfg.mode == "project":
        return v - parallel, "project"
    tau = cfg.threshold  # cap: keep v⊥, scale v∥ by γ so that cos(v', d) = τ
    gamma = tau * math.sqrt(1 - c * c) / (c * math.sqrt(1 - tau * tau))
    return (v - parallel) + gamma * parallel, "cap"


def next_reference(d, v, cfg):
    return v.clone() if cfg.reference == "prev" else cfg.ema_decay * d + (1 - cfg.ema_decay) * v


def run_by_hand(space, optimizer, cfg):
    """Final θ and the regimes of ``STEPS`` steps of ``optimizer`` ("adamw", "adam" or "sgd") with GAC in ``space``."""
    theta = problem()[3].clone()
    m, v, buf, t = torch.zeros(DIM, dtype=torch.float64), torch.zeros(DIM, dtype=torch.float64), None, 0
    d = torch.zeros(DIM, dtype=torch.float64)
    regimes = []
    coupled = WD if optimizer in ("adam", "sgd") else 0.0

    def first_moment(g_eff):
        if optimizer == "sgd":
            return g_eff.clone() if buf is None else MOMENTUM * buf + (1 - DAMPENING) * g_eff
        return BETAS[0] * m + (1 - BETAS[0]) * g_eff

    def apply_step(theta, m_used, g_eff, t):
        """θ after the optimizer's step with first moment m_used; returns (θ, m, v, buf, t)."""
        if optimizer == "sgd":
            return theta - LR * m_used, m, v, m_used, t
        v_new = BETAS[1] * v + (1 - BETAS[1]) * g_eff * g_eff
        t += 1
        decayed = theta * (1 - LR * WD) if optimizer == "adamw" else theta
        denom = (v_new.sqrt() / math.sqrt(1 - BETAS[1] ** t)) + EPS
        return decayed - LR / (1 - BETAS[0] ** t) * m_used / denom, m_used, v_new, buf, t

    for step in range(STEPS):
        g = gradient(theta, step)
        if space == "gradient":
            g, regime = control_by_hand(g, d, cfg)
            d = next_reference(d, gradient(theta, step), cfg)
            if regime == "skip":  # a skip restarts the reference (as at init), in every space
                d = torch.zeros_like(d)
            else:
                g_eff = g + coupled * theta
                theta, m, v, buf, t = apply_step(theta, first_moment(g_eff), g_eff, t)
        elif space == "update":
            g_eff = g + coupled * theta
            proposed, m, v, buf, t = apply_step(theta, first_moment(g_eff), g_eff, t)
            delta, regime = control_by_hand(proposed - theta, d, cfg)
            d = next_reference(d, proposed - theta, cfg)
            if regime == "skip":
                d = torch.zeros_like(d)
            theta = theta + delta
        else:
            g_eff = g + coupled * theta
            moment = first_moment(g_eff)
            has_moment = buf is not None if optimizer == "sgd" else t > 0
            controlled, regime = control_by_hand(moment, d, cfg) if has_moment else (moment, "keep")
            d = next_reference(d, moment, cfg)
            if regime == "skip":
                d = torch.zeros_like(d)
            else:
                theta, m, v, buf, t = apply_step(theta, controlled, g_eff, t)
        regimes.append(regime)
    return theta, regimes


# -- through gac.wrap -----------------------------------------------------------------------------------
def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, dampening=DAMPENING, weight_decay=WD)
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    return cls(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)


def make_run(optimizer, cfg):
    start = problem()[3]
    params = [torch.nn.Parameter(start[:SPLIT].clone()), torch.nn.Parameter(start[SPLIT:].clone())]
    return params, gac.wrap(make_optimizer(optimizer, params), cfg)


def run_steps(params, opt, steps):
    regimes = []
    for step in steps:
        theta = torch.cat([p.detach() for p in params])
        g = gradient(theta, step)
        params[0].grad, params[1].grad = g[:SPLIT].clone(), g[SPLIT:].clone()
        opt.step()
        opt.zero_grad()
        regimes.append(opt.last_report.regime)
    return regimes


def run_wrapped(space, optimizer, cfg):
    params, opt = make_run(optimizer, gac.GACConfig(**{**cfg.__dict__, "space": space}))
    regimes = run_steps(params, opt, range(STEPS))
    return torch.cat([p.detach() for p in params]), regimes


CONFIGS = {
    "project": gac.GACConfig(threshold=0.2),
    "cap_ema": gac.GACConfig(threshold=0.3, mode="cap", reference="ema", ema_decay=0.5),
    "cap_ema_skip": gac.GACConfig(threshold=0.3, mode="cap", reference="ema", ema_decay=0.5, skip_threshold=0.9),
}


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_wrap_matches_the_hand_computation(space, optimizer, config):
    cfg = CONFIGS[config]
    expected, expected_regimes = run_by_hand(space, optimizer, cfg)
    got, regimes = run_wrapped(space, optimizer, cfg)
    assert regimes == expected_regimes
    assert sum(r not in ("keep",) for r in regimes) >= 2  # GAC acted, so the comparison tests the placement
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd", "sgd_without_dampening"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_wrap_matches_the_hand_computation_chunk_by_chunk(monkeypatch, space, optimizer, config):
    """With chunks of 3 elements the 5- and 7-element parameters take the paths of large tensors: sums as float64
    dots of reused chunk buffers, update space's Δ formed and applied chunk by chunk, momentum space's m_t in a buffer
    kept between steps (SGD without dampening forms it without temporaries). Same hand computation, same tolerance."""
    monkeypatch.setattr(gac.tracker, "CHUNK_NUMEL", 3)
    if optimizer == "sgd_without_dampening":
        monkeypatch.setitem(globals(), "DAMPENING", 0.0)
        optimizer = "sgd"
    cfg = CONFIGS[config]
    expected, expected_regimes = run_by_hand(space, optimizer, cfg)
    got, regimes = run_wrapped(space, optimizer, cfg)
    assert regimes == expected_regimes
    assert sum(r not in ("keep",) for r in regimes) >= 2
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_update_space_refuses_a_nonfinite_gradient_before_the_inner_step(bad):
    """The cheap finiteness check before the inner step (min and max of each gradient) sees NaN, +inf and -inf: the
    error leaves θ and the optimizer's state untouched."""
    params, opt = make_run("adamw", gac.GACConfig(threshold=0.0, space="update"))
    run_steps(params, opt, range(2))
    before = [p.detach().clone() for p in params]
    moments = [opt.state[p]["exp_avg"].clone() for p in params]
    for p in params:
        p.grad = torch.ones_like(p)
    params[1].grad[3] = bad
    with pytest.raises(gac.NonFiniteGradientError):
        opt.step()
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before, strict=True))
    assert all(torch.equal(opt.state[p]["exp_avg"], m) for p, m in zip(params, moments, strict=True))


def test_every_regime_is_exercised_somewhere():
    seen = set()
    for space in ("gradient", "update", "momentum"):
        for optimizer in ("adamw", "sgd"):
            seen |= set(run_by_hand(space, optimizer, CONFIGS["cap_ema_skip"])[1])
    assert seen == {"keep", "cap", "skip"}


def momentum_step_without_shift(self):
    """Wrong: measures and projects the momentum but never shifts the stored buffer."""
    moments, _ = self._first_moments()
    report = self.gac.apply([moments.get(p) for p in self.gac.params])
    if report.regime != "skip":
        self._inner_step()
    return report


@pytest.mark.parametrize("space, wrong", [
    ("momentum", GACOptimizer._gradient_step),  # projects the gradient instead of the momentum
    ("momentum", momentum_step_without_shift),
    ("update", GACOptimizer._gradient_step),  # projects the gradient instead of the proposed step
    ("update", "no_restore"),  # a skip keeps the inner optimizer's step
])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_wrong_placement_fails_the_comparison(monkeypatch, space, wrong, optimizer):
    cfg = CONFIGS["cap_ema_skip"] if wrong == "no_restore" else CONFIGS["project"]
    expected, expected_regimes = run_by_hand(space, optimizer, cfg)
    if wrong == "no_restore":
        assert "skip" in expected_regimes
        monkeypatch.setattr(GACOptimizer, "_restore", staticmethod(lambda stepped, values: None))
    else:
        monkeypatch.setattr(GACOptimizer, f"_{space}_step", wrong)
    got, _ = run_wrapped(space, optimizer, cfg)
    assert not torch.allclose(got, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_state_dict_resume_through_torch_save_is_bit_identical(space, optimizer):
    cfg = gac.GACConfig(threshold=gac.EMAThreshold(margin=0.05, warmup=2), mode="cap", space=space,
                        skip_threshold=0.97)
    params, opt = make_run(optimizer, cfg)
    straight_regimes = run_steps(params, opt, range(STEPS))
    straight = torch.cat([p.detach() for p in params])

    params, opt = make_run(optimizer, cfg)
    first_regimes = run_steps(params, opt, range(STEPS // 2))
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in params], "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    params, opt = make_run(optimizer, cfg)
    with torch.no_grad():
        for p, value in zip(params, saved["params"], strict=True):
            p.copy_(value)
    opt.load_state_dict(saved["opt"])
    assert opt.gac.step == STEPS // 2
    second_regimes = run_steps(params, opt, range(STEPS // 2, STEPS))
    assert first_regimes + second_regimes == straight_regimes
    assert torch.equal(torch.cat([p.detach() for p in params]), straight)
    assert any(r != "keep" for r in straight_regimes)


def test_state_of_another_space_is_refused_in_one_line():
    params, opt = make_run("adamw", gac.GACConfig(space="update"))
    run_steps(params, opt, range(3))
    _, other = make_run("adamw", gac.GACConfig(space="momentum"))
    with pytest.raises(ValueError, match="space='update'") as info:
        other.load_state_dict(opt.state_dict())
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("space", ["update", "momentum"])
def test_report_has_norms_of_the_controlled_vector(space):
    params, opt = make_run("sgd", gac.GACConfig(threshold=0.0, space=space))
    run_steps(params, opt, range(4))
    report = opt.last_report
    assert report.regime == "project" and 0 < report.cosine <= 1
    # project removes the parallel part: ‖v'‖ = ‖v‖·√(1 − c²)
    assert report.grad_norm_after == pytest.approx(report.grad_norm_before * math.sqrt(1 - report.cosine**2))
    assert report.parallel_scale == 0.0


def test_space_is_validated_in_one_line():
    with pytest.raises(ValueError, match="GACConfig.space must be one of") as info:
        gac.GACConfig(space="moment")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1),  # no momentum
    lambda p: torch.optim.Adagrad(p, lr=0.1),
    lambda p: torch.optim.RMSprop(p, lr=0.1),
])
def test_momentum_space_needs_a_first_moment(make):
    params = [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match="needs an optimizer with a first moment .*Adam") as info:
        gac.wrap(make(params), gac.GACConfig(space="momentum"))
    assert "\n" not in str(info.value)


def test_update_space_memory_is_one_previous_step_per_parameter():
    params, opt = make_run("adamw", gac.GACConfig(space="update", reference_dtype=torch.float32))
    run_steps(params, opt, range(2))
    assert opt.gac.reference_bytes() == DIM * 4  # the reference only; θ_before and Δ are freed after step()
    assert set(opt.state[params[0]]) == {"step", "exp_avg", "exp_avg_sq", "gac_reference"}
