"""The LLM trainer's composable stabilizers against direct computations: Adaptive Braking's factor on the gradient,
the KL-target step size, and GAC combined with TIS (each with a mutation that the check must catch)."""

import math

import numpy as np
import pytest
import torch

from sim import stabilizers
from sim.llm import controls
from sim.llm.train import rl_step, run_records, setup

QUIET = dict(log=lambda *a: None)


def flat(rows: torch.Tensor) -> np.ndarray:
    """The run's row of a (1, P) tensor (one run: K = 1) as float64 numpy."""
    return rows[0].detach().double().numpy().copy()


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def relative(error: np.ndarray, reference: np.ndarray) -> float:
    """max |error| / max |reference|; where the reference is all zero (an update whose groups all tied, so no
    gradient), max |error| itself: nothing may have moved then."""
    scale = np.abs(reference).max()
    return float(np.abs(error).max() / scale) if scale else float(np.abs(error).max())


def braking_error(args, adamw_hooks) -> float:
    """Largest |applied − (1 − α·cos(raw, v)) raw| / |raw| over every update of a short run, where raw is the gradient
    of the backward pass, v AdamW's first moment before the step, applied the gradient AdamW receives."""
    state = setup(args, **QUIET)
    raws, seen = [], []
    state.theta.register_post_accumulate_grad_hook(lambda theta: raws.append(flat(theta.grad)))

    def pre_step(theta, grad, adam, lr):
        velocity = None if adam.steps[0] == 0 else flat(adam.exp_avg)
        seen.append((raws[-1], velocity, flat(grad)))

    adamw_hooks(pre_step)
    for _ in range(args.steps):
        rl_step(state)
    errors, checked = [], 0
    for raw, velocity, applied in seen:
        moving = velocity is not None and bool(np.linalg.norm(velocity))
        factor = 1 - args.braking.braking_alpha * cos(raw, velocity) if moving else 1.0
        checked += moving
        errors.append(relative(applied - factor * raw, raw))
    assert len(seen) == args.steps * args.minibatches and checked, "no update had both a gradient and a velocity"
    return max(errors)


def test_braking_scales_the_gradient_by_its_alignment_with_adamw_velocity(tiny_args, adamw_hooks):
    args = tiny_args(method="braking", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert braking_error(args, adamw_hooks) < 1e-5


def test_braking_check_catches_a_wrong_sign(tiny_args, monkeypatch, adamw_hooks):
    monkeypatch.setattr(controls, "braking_scale", lambda c, alpha: 1 + alpha * c)
    args = tiny_args(method="braking", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert braking_error(args, adamw_hooks) > 1e-3


def kl_target_lrs(args, adamw_hooks) -> tuple[list, list]:
    """(learning rate AdamW used at each update, the lr the KL-target rule gives from that update's measured KL)."""
    state = setup(args, **QUIET)
    used = []
    adamw_hooks(lambda theta, grad, adam, lr: used.append(lr[0]))
    records = [rl_step(state) for _ in range(args.steps)]
    cfg = args.kl_target
    expected = [args.lr * min(1.0, max(cfg.kl_floor, cfg.kl_target / r["kl_behaviour"])) if r["kl_behaviour"] > 0
                else args.lr for r in records]
    return used, expected


def test_kl_target_cuts_the_step_in_proportion_to_the_measured_kl(tiny_args, adamw_hooks):
    # one update per step: the record's kl_behaviour is the KL that update measured before its step
    args = tiny_args(method="kl_target", staleness=2, minibatches=1, lr=1e-2, snr_every=1000,
                     kl_target=stabilizers.KLTargetConfig(kl_target=1e-4, kl_floor=0.05))
    used, expected = kl_target_lrs(args, adamw_hooks)
    assert used == pytest.approx(expected, rel=1e-12)
    assert min(used) < args.lr  # the rule did act
    assert min(used) >= 0.05 * args.lr - 1e-15  # never below the floor


def test_kl_target_check_catches_an_ignored_kl(tiny_args, monkeypatch, adamw_hooks):
    monkeypatch.setattr(controls, "kl_target_factor", lambda kl, target, floor: 1.0)
    args = tiny_args(method="kl_target", staleness=2, minibatches=1, lr=1e-2, snr_every=1000,
                     kl_target=stabilizers.KLTargetConfig(kl_target=1e-4, kl_floor=0.05))
    used, expected = kl_target_lrs(args, adamw_hooks)
    assert used != pytest.approx(expected, rel=1e-12)


def vcpo_lrs(args, adamw_hooks) -> tuple[list, list, list]:
    """(lr AdamW used at each update, the lr VCPO's rule gives from that update's recorded ESS ratio, records)."""
    state = setup(args, **QUIET)
    used = []
    adamw_hooks(lambda theta, grad, adam, lr: used.append(lr[0]))
    records = [rl_step(state) for _ in range(args.steps)]
    cfg = args.vcpo
    expected = [args.lr * min(1.0, r["ess_ratio"] / cfg.vcpo_reference_ratio) ** cfg.vcpo_power for r in records]
    return used, expected, records


def test_vcpo_scales_the_step_by_the_square_root_of_the_updates_ess(tiny_args, adamw_hooks):
    # one update per step: the record's ess_ratio is the one that update measured before its step
    args = tiny_args(method="vcpo", staleness=3, minibatches=1, lr=1e-2, steps=8, snr_every=1000)
    used, expected, records = vcpo_lrs(args, adamw_hooks)
    assert used == pytest.approx(expected, rel=1e-12)
    assert min(used) < 0.999 * args.lr  # the rule did act (stale samples: ESS/N < 1)
    assert all(0 < r["ess_ratio"] <= 1 + 1e-12 for r in records)


def test_vcpo_check_catches_an_ignored_ess(tiny_args, monkeypatch, adamw_hooks):
    monkeypatch.setattr(controls, "vcpo_step_factor", lambda ratio, reference, power: 1.0)
    args = tiny_args(method="vcpo", staleness=3, minibatches=1, lr=1e-2, steps=8, snr_every=1000)
    used, expected, _ = vcpo_lrs(args, adamw_hooks)
    assert used != pytest.approx(expected, rel=1e-12)


def test_ess_ratio_is_one_on_policy_and_drops_with_staleness(tiny_args):
    """Sync samples from the learner itself: every weight π_θ/π_b is 1 up to the sampler's float32 log-probs (1e-4
    per token, tests/llm/test_sampling), so ESS/N is 1 to ~1e-7; stale samples give ESS/N < 1."""
    sync = run_records(tiny_args(method="sync", minibatches=1, steps=6, snr_every=1000), **QUIET)["records"]
    stale = run_records(tiny_args(method="naive", staleness=3, minibatches=1, lr=3e-2, steps=6, snr_every=1000),
                        **QUIET)["records"]
    assert all(abs(r["ess_ratio"] - 1) < 1e-6 for r in sync)
    assert min(r["ess_ratio"] for r in stale[3:]) < 0.99


def explicit_vcpo_advantages(state, data) -> torch.Tensor:
    """VCPO's advantages by loops over groups: w_i = exp(Σ_t log π_θ − log π_b) from the trainer's plain log-prob
    function, c_i = w_i² ‖score_i‖², b = Σ c_i R_i / Σ c_i, A_i = (R_i − b)/(std + ε)."""
    from sim.advantages import ADVANTAGE_EPS
    from sim.llm import stacked

    args = state.args
    with torch.no_grad():
        logp, _ = stacked.token_logprobs(state.layout, state.theta, data["prompts"], data["responses"])
        logp_all = stacked.response_logp_all(state.layout, state.theta, data["prompts"], data["responses"])
    mask = data["mask"][0].double()
    log_w = ((logp[0] - data["behaviour_logp"][0]).double() * mask).sum(-1)
    norms = stabilizers.logit_score_sq(logp_all[0].double(), logp[0].double(), mask)
    rewards = data["reward"][0].double()
    out = torch.zeros_like(rewards)
    for g in range(args.prompts_per_step):
        rows = slice(g * args.group_size, (g + 1) * args.group_size)
        c = torch.exp(2 * (log_w[rows] - log_w[rows].max())) * norms[rows]
        b = float((c * rewards[rows]).sum() / c.sum()) if c.sum() > 0 else float(rewards[rows].mean())
        out[rows] = (rewards[rows] - b) / (rewards[rows].std(unbiased=False) + ADVANTAGE_EPS)
    return out


def test_vcpo_advantages_use_the_off_policy_least_variance_baseline(tiny_args):
    from sim.advantages import group_advantages
    from sim.llm import batched

    args = tiny_args(method="vcpo", staleness=3, minibatches=1, lr=3e-2, steps=5, snr_every=1000)
    state = setup(args, **QUIET)
    for _ in range(4):
        rl_step(state)
    data = batched.sample_batch(state)
    expected = explicit_vcpo_advantages(state, data)
    assert torch.allclose(data["advantages"][0].double(), expected, rtol=1e-5, atol=1e-5)
    grpo = group_advantages(data["reward"][0].reshape(-1, args.group_size)).reshape(-1)
    assert not torch.allclose(data["advantages"][0], grpo, atol=1e-3)  # the baseline moved something
    off = setup(tiny_args(method="vcpo", staleness=3, minibatches=1, lr=3e-2, steps=5, snr_every=1000,
                          vcpo=stabilizers.VCPOConfig(vcpo_baseline=False)), **QUIET)
    for _ in range(4):
        rl_step(off)
    plain = batched.sample_batch(off)
    plain_grpo = group_advantages(plain["reward"][0].reshape(-1, args.group_size)).reshape(-1)
    assert torch.equal(plain["advantages"][0], plain_grpo)  # without it: GRPO's group mean


def test_gac_with_tis_uses_the_tis_loss_and_projects_its_gradient(tiny_args):
    """gac+tis: the first raw gradient is TIS's (equal to a tis-only run's, and with the importance weight capped at
    C = 0.5 exactly half of the plain loss's, as π_prox = π_b at step 0), and GAC (τ = 0) then leaves the applied
    gradient with no positive alignment to the previous raw gradient."""
    runs = {}
    for method in ("tis", "tis+gac", "gac"):
        args = tiny_args(method=method, staleness=2, max_grad_norm=1e9, snr_every=1000, minibatches=1, steps=8,
                         tis=stabilizers.TISConfig(tis_cap=0.5))
        result = run_records(args, **QUIET)
        runs[method] = result["records"]
    both = runs["tis+gac"]
    # float32 losses of two different graphs (capped weight × log-prob vs log-prob): their norms agree to a few
    # float32 roundings summed over ~2·10^4 parameters (seen: 1.4e-6 relative), far from any other factor than 0.5
    assert both[0]["grad_norm"] == runs["tis"][0]["grad_norm"] == pytest.approx(0.5 * runs["gac"][0]["grad_norm"],
                                                                                 rel=1e-5)
    # GAC's discrete decision at every step, against the cosine the same run recorded (whether a given step of this
    # short run is aligned depends on float bits; the rule may not): project exactly where cos(g_t, g_{t−1}) > τ = 0
    assert both[0]["regime"] == "keep" and math.isnan(both[0]["cos_prev"])
    assert [r["regime"] for r in both[1:]] == ["project" if r["cos_prev"] > 0 else "keep" for r in both[1:]]
    assert all(r["regime"] == "n/a" for r in runs["tis"])
    assert (both[0]["objective_fn"], both[0]["direction_control"], both[0]["step_control"]) == ("tis", "gac", "none")
    assert both[0]["method"] == "tis+gac"
    # project mode removes the whole parallel part; a kept step is applied whole
    assert all(r["parallel_scale"] == (0.0 if r["regime"] == "project" else 1.0) for r in both[1:])


def test_method_names_compose_and_bad_combinations_fail_before_work(tiny_args):
    assert tiny_args(method="gac+tis").run_method == "tis+gac" and tiny_args(method="naive").run_method == "sync"
    for bad, message in [("gac+braking", "two direction"), ("tis+bapo", "two objective"), ("dc", "does not apply"),
                         ("naive+gac", "cannot be combined"), ("none", "unknown method"),
                         ("gac+wat", "unknown method")]:
        with pytest.raises(ValueError, match=message):
            tiny_args(method=bad).validate()


def projected(v: np.ndarray, d: np.ndarray | None) -> np.ndarray:
    """GAC τ = 0, project mode, computed directly: v's part along d removed when cos(v, d) > 0."""
    if d is None or np.dot(v, d) <= 0:
        return v
    return v - np.dot(v, d) / np.dot(d, d) * d


def update_space_error(args, adamw_hooks) -> tuple[float, int]:
    """Largest relative distance between each applied Δθ and the direct projection of AdamW's proposed Δθ against
    the previous proposed one, and how many updates were projected."""
    state = setup(args, **QUIET)
    before, proposed = [], []
    adamw_hooks(lambda theta, grad, adam, lr: before.append(flat(theta)),
                lambda theta, adam: proposed.append(flat(theta)))
    for _ in range(args.steps):
        rl_step(state)
    after = before[1:] + [flat(state.theta)]  # θ changes only in the updates
    errors, previous, projections = [], None, 0
    for b, prop, a in zip(before, proposed, after, strict=True):
        delta = prop - b
        expected = projected(delta, previous)
        projections += int(expected is not delta)
        errors.append(relative((a - b) - expected, delta))
        previous = delta
    return max(errors), projections


def test_gac_update_space_projects_adamw_proposed_step(tiny_args, adamw_hooks):
    args = tiny_args(method="gac", gac_space="update", staleness=2, max_grad_norm=1e9, snr_every=1000)
    error, projections = update_space_error(args, adamw_hooks)
    assert projections >= 2 and error < 1e-4


def test_update_space_check_catches_gac_left_out(tiny_args, monkeypatch, adamw_hooks):
    monkeypatch.setattr(controls, "gac_on_update", lambda batch, *a: (["keep"] * len(batch.runs), [1.0]))
    args = tiny_args(method="gac", gac_space="update", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert update_space_error(args, adamw_hooks)[0] > 1e-2


def momentum_space_error(args, adamw_hooks) -> tuple[float, int]:
    """Largest relative distance between AdamW's stored first moment after each step and the direct computation:
    m_t = β1·m'_{t−1} + (1 − β1)·g_t projected against the previous uncontrolled m_{t−1}."""
    state = setup(args, **QUIET)
    grads, stored = [], []
    adamw_hooks(lambda theta, grad, adam, lr: grads.append(flat(grad)),
                lambda theta, adam: stored.append(flat(adam.exp_avg)))
    for _ in range(args.steps):
        rl_step(state)
    beta1 = state.adam.betas[0]
    errors, kept_moment, previous, projections = [], np.zeros_like(grads[0]), None, 0
    for g, m_stored in zip(grads, stored, strict=True):
        formed = beta1 * kept_moment + (1 - beta1) * g
        expected = projected(formed, previous)
        projections += int(expected is not formed)
        errors.append(relative(m_stored - expected, formed))
        previous, kept_moment = formed, m_stored
    return max(errors), projections


def test_gac_momentum_space_controls_the_moment_adamw_keeps(tiny_args, adamw_hooks):
    args = tiny_args(method="gac", gac_space="momentum", staleness=2, max_grad_norm=1e9, snr_every=1000)
    error, projections = momentum_space_error(args, adamw_hooks)
    assert projections >= 2 and error < 1e-4


def test_momentum_space_check_catches_projecting_the_gradient_instead(tiny_args, adamw_hooks):
    """The wrong placement: GAC on the raw gradient (the removed part comes back through AdamW's moment)."""
    args = tiny_args(method="gac", gac_space="gradient", staleness=2, max_grad_norm=1e9, snr_every=1000)
    assert momentum_space_error(args, adamw_hooks)[0] > 1e-2
