"""The LLM trainer's composable stabilizers against direct computations: Adaptive Braking's factor on the gradient,
the KL-target step size, and GAC combined with TIS (each with a mutation that the check must catch)."""

import math

import numpy as np
import pytest
import torch

from sim import stabilizers
from sim.llm import controls
from sim.llm import train as train_module
from sim.llm.train import rl_step, run_records, setup

QUIET = dict(log=lambda *a: None)


def flat(tensors) -> np.ndarray:
    return torch.cat([t.reshape(-1) for t in tensors]).double().numpy().copy()


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def braking_error(args) -> float:
    """Largest |applied − (1 − α·cos(raw, v)) raw| / |raw| over every update of a short run, where raw is the gradient
    of the backward pass, v AdamW's first moment before the step, applied the gradient AdamW receives."""
    state = setup(args, **QUIET)
    params, raws, seen = state.params, [], []
    pending = {}

    def grad_hook(i, p):
        pending[i] = p.grad.detach().clone()
        if len(pending) == len(params):
            raws.append(flat(pending[j] for j in range(len(params))))
            pending.clear()

    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(lambda p, i=i: grad_hook(i, p))

    def pre_step(*_):
        moments = [state.optimizer.state.get(p, {}).get("exp_avg") for p in params]
        velocity = None if moments[0] is None else flat(moments)
        seen.append((raws[-1], velocity, flat(p.grad for p in params)))

    state.optimizer.register_step_pre_hook(pre_step)
    for _ in range(args.steps):
        rl_step(state)
    errors = []
    for raw, velocity, applied in seen:
        factor = 1.0 if velocity is None else 1 - args.braking.braking_alpha * cos(raw, velocity)
        errors.append(np.abs(applied - factor * raw).max() / np.abs(raw).max())
    assert len(seen) == args.steps * args.minibatches and any(v is not None for _, v, _ in seen)
    return max(errors)


def test_braking_scales_the_gradient_by_its_alignment_with_adamw_velocity(tiny_args):
    args = tiny_args(method="braking", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert braking_error(args) < 1e-5


def test_braking_check_catches_a_wrong_sign(tiny_args, monkeypatch):
    monkeypatch.setattr(controls, "braking_scale", lambda c, alpha: 1 + alpha * c)
    args = tiny_args(method="braking", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert braking_error(args) > 1e-3


def kl_target_lrs(args) -> tuple[list, list]:
    """(learning rate AdamW used at each update, the lr the KL-target rule gives from that update's measured KL)."""
    state = setup(args, **QUIET)
    used = []
    state.optimizer.register_step_pre_hook(lambda opt, *_: used.append(opt.param_groups[0]["lr"]))
    records = [rl_step(state) for _ in range(args.steps)]
    cfg = args.kl_target
    expected = [args.lr * min(1.0, max(cfg.kl_floor, cfg.kl_target / r["kl_behaviour"])) if r["kl_behaviour"] > 0
                else args.lr for r in records]
    return used, expected


def test_kl_target_cuts_the_step_in_proportion_to_the_measured_kl(tiny_args):
    # one update per step: the record's kl_behaviour is the KL that update measured before its step
    args = tiny_args(method="kl_target", staleness=2, minibatches=1, lr=1e-2, snr_every=1000,
                     kl_target=stabilizers.KLTargetConfig(kl_target=1e-4, kl_floor=0.05))
    used, expected = kl_target_lrs(args)
    assert used == pytest.approx(expected, rel=1e-12)
    assert min(used) < args.lr  # the rule did act
    assert min(used) >= 0.05 * args.lr - 1e-15  # never below the floor


def test_kl_target_check_catches_an_ignored_kl(tiny_args, monkeypatch):
    monkeypatch.setattr(controls, "kl_target_factor", lambda kl, target, floor: 1.0)
    args = tiny_args(method="kl_target", staleness=2, minibatches=1, lr=1e-2, snr_every=1000,
                     kl_target=stabilizers.KLTargetConfig(kl_target=1e-4, kl_floor=0.05))
    used, expected = kl_target_lrs(args)
    assert used != pytest.approx(expected, rel=1e-12)


def test_gac_with_tis_uses_the_tis_loss_and_projects_its_gradient(tiny_args):
    """gac+tis: the first raw gradient is TIS's (equal to a tis-only run's), and GAC (τ = 0) then leaves the applied
    gradient with no positive alignment to the previous raw gradient."""
    runs = {}
    for method in ("tis", "tis+gac", "gac"):
        args = tiny_args(method=method, staleness=2, max_grad_norm=1e9, snr_every=1000)
        result = run_records(args, **QUIET)
        runs[method] = result["records"]
    both = runs["tis+gac"]
    assert both[0]["grad_norm"] == runs["tis"][0]["grad_norm"] != runs["gac"][0]["grad_norm"]
    assert all(r["regime"] in ("keep", "project") for r in both) and any(r["regime"] == "project" for r in both)
    assert all(r["regime"] == "n/a" for r in runs["tis"])
    assert (both[0]["objective_fn"], both[0]["direction_control"], both[0]["step_control"]) == ("tis", "gac", "none")
    assert both[0]["method"] == "tis+gac"
    assert all(r["cos_applied"] <= r["cos_prev"] + 1e-9 for r in both[1:] if not math.isnan(r["cos_prev"]))


def test_method_names_compose_and_bad_combinations_fail_before_work(tiny_args):
    assert tiny_args(method="gac+tis").registry_method == "tis+gac"
    for bad, message in [("gac+braking", "two direction"), ("tis+bapo", "two objective"), ("dc", "does not apply"),
                         ("none+gac", "cannot be combined"), ("gac+wat", "unknown method")]:
        with pytest.raises(ValueError, match=message):
            tiny_args(method=bad).validate()


def projected(v: np.ndarray, d: np.ndarray | None) -> np.ndarray:
    """GAC τ = 0, project mode, computed directly: v's part along d removed when cos(v, d) > 0."""
    if d is None or np.dot(v, d) <= 0:
        return v
    return v - np.dot(v, d) / np.dot(d, d) * d


def update_space_error(args) -> tuple[float, int]:
    """Largest relative distance between each applied Δθ and the direct projection of AdamW's proposed Δθ against
    the previous proposed one, and how many updates were projected."""
    state = setup(args, **QUIET)
    adamw = getattr(state.optimizer, "optimizer", state.optimizer)  # the optimizer gac.wrap wraps: its own step
    before, proposed = [], []
    adamw.register_step_pre_hook(lambda *a: before.append(flat(p.detach() for p in state.params)))
    adamw.register_step_post_hook(lambda *a: proposed.append(flat(p.detach() for p in state.params)))
    for _ in range(args.steps):
        rl_step(state)
    after = before[1:] + [flat(p.detach() for p in state.params)]  # θ changes only in the updates
    errors, previous, projections = [], None, 0
    for b, prop, a in zip(before, proposed, after, strict=True):
        delta = prop - b
        expected = projected(delta, previous)
        projections += int(expected is not delta)
        errors.append(np.abs((a - b) - expected).max() / np.abs(delta).max())
        previous = delta
    return max(errors), projections


def test_gac_update_space_projects_adamw_proposed_step(tiny_args):
    args = tiny_args(method="gac", gac_space="update", staleness=2, max_grad_norm=1e9, snr_every=1000)
    error, projections = update_space_error(args)
    assert projections >= 2 and error < 1e-4


def test_update_space_check_catches_gac_left_out(tiny_args, monkeypatch):
    adamw_alone = lambda params, args: (torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0), None)  # noqa: E731
    monkeypatch.setattr(train_module, "build_optimizer", adamw_alone)
    monkeypatch.setattr(train_module, "space_report", lambda state: ("keep", 1.0))
    args = tiny_args(method="gac", gac_space="update", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert update_space_error(args)[0] > 1e-2


def momentum_space_error(args) -> tuple[float, int]:
    """Largest relative distance between AdamW's stored first moment after each step and the direct computation:
    m_t = β1·m'_{t−1} + (1 − β1)·g_t projected against the previous uncontrolled m_{t−1}."""
    state = setup(args, **QUIET)
    params, grads, stored = state.params, [], []
    state.optimizer.register_step_pre_hook(lambda *a: grads.append(flat(p.grad for p in params)))
    state.optimizer.register_step_post_hook(
        lambda opt, *a: stored.append(flat(opt.state[p]["exp_avg"] for p in params)))
    for _ in range(args.steps):
        rl_step(state)
    beta1 = state.optimizer.param_groups[0]["betas"][0]
    errors, kept_moment, previous, projections = [], np.zeros_like(grads[0]), None, 0
    for g, m_stored in zip(grads, stored, strict=True):
        formed = beta1 * kept_moment + (1 - beta1) * g
        expected = projected(formed, previous)
        projections += int(expected is not formed)
        errors.append(np.abs(m_stored - expected).max() / np.abs(formed).max())
        previous, kept_moment = formed, m_stored
    return max(errors), projections


def test_gac_momentum_space_controls_the_moment_adamw_keeps(tiny_args):
    args = tiny_args(method="gac", gac_space="momentum", staleness=2, max_grad_norm=1e9, snr_every=1000)
    error, projections = momentum_space_error(args)
    assert projections >= 2 and error < 1e-4


def test_momentum_space_check_catches_projecting_the_gradient_instead(tiny_args):
    """The wrong placement: GAC on the raw gradient (the removed part comes back through AdamW's moment)."""
    args = tiny_args(method="gac", gac_space="gradient", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert momentum_space_error(args)[0] > 1e-2
