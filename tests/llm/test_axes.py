"""The LLM trainer's composable stabilizers against direct computations: Adaptive Braking's factor on the gradient,
the KL-target and VCPO step sizes, VCPO's baseline, GAC with TIS, and GAC in the update space through gac.wrap."""

import math

import numpy as np
import pytest
import torch

from sim import stabilizers
from sim.llm import train as train_module
from sim.llm.model import token_logprobs
from sim.llm.train import rl_step, run_records, setup

QUIET = dict(log=lambda *a: None)


def flat(tensors) -> np.ndarray:
    return torch.cat([t.detach().reshape(-1) for t in tensors]).double().numpy().copy()


def cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_braking_scales_the_gradient_by_its_alignment_with_adamw_velocity(tiny_args, monkeypatch):
    """The gradient AdamW receives is (1 − α·cos(raw, m)) raw, m AdamW's first moment before the step (factor 1
    before the first step); no clip (max_grad_norm huge) so the factor is all that changes it."""
    args = tiny_args(method="braking", staleness=2, max_grad_norm=1e9, snr_every=1000, temperature=2.0)
    run = setup(args, **QUIET)
    raws, seen = [], []
    real_accumulate, real_step = train_module.accumulate_gradient, run.optimizer.step

    def accumulate(r, data, samples):
        out = real_accumulate(r, data, samples)
        raws.append(flat(p.grad for p in r.params))
        return out

    def step(*a, **k):
        moments = [run.optimizer.state[p].get("exp_avg") for p in run.params]
        seen.append((raws[-1], None if moments[0] is None else flat(moments), flat(p.grad for p in run.params)))
        return real_step(*a, **k)

    monkeypatch.setattr(train_module, "accumulate_gradient", accumulate)
    monkeypatch.setattr(run.optimizer, "step", step)
    for _ in range(args.steps):
        rl_step(run)
    braked = 0
    for raw, velocity, applied in seen:
        factor = 1.0 if velocity is None or not np.any(raw) else 1 - args.braking.braking_alpha * cos(raw, velocity)
        braked += factor != 1.0
        assert np.abs(applied - factor * raw).max() <= 1e-6 * max(np.abs(raw).max(), 1e-30)
    assert braked >= 3


@pytest.mark.parametrize("method", ["kl_target", "vcpo"])
def test_step_controls_set_the_step_size_from_the_updates_own_measurement(tiny_args, method):
    """kl_target: η·clip(κ/KL, floor, 1) with KL the update's KL to π_b; vcpo: η·min(1, (ESS/N)/ρ)^p; each computed
    here from the record's own KL or ESS (one update per step, so the record's numbers are the update's)."""
    args = tiny_args(method=method, staleness=3, minibatches=1, lr=3e-2, steps=8, snr_every=1000, temperature=2.0)
    records = run_records(args, **QUIET)["records"]
    cut = 0
    for r in records:
        if method == "kl_target":
            kl, k = r["kl_behaviour"], args.kl_target
            factor = 1.0 if not kl > 0 else min(1.0, max(k.kl_floor, k.kl_target / kl))
        else:
            v = args.vcpo
            factor = min(1.0, r["ess_ratio"] / v.vcpo_reference_ratio) ** v.vcpo_power
        assert r["lr"] == pytest.approx(args.lr * factor, rel=1e-9)
        cut += factor < 1
    assert cut >= 1  # the control acted at least once


def test_ess_ratio_is_one_on_policy_and_drops_with_staleness(tiny_args):
    """Sync samples from the learner itself: every weight π_θ/π_b is 1 up to the sampler's float32 log-probs (1e-4
    per token, tests/llm/test_sampling), so ESS/N is 1 to ~1e-7; stale samples give ESS/N < 1."""
    sync = run_records(tiny_args(method="sync", minibatches=1, steps=6, snr_every=1000), **QUIET)["records"]
    stale = run_records(tiny_args(method="naive", staleness=3, minibatches=1, lr=3e-2, steps=6, snr_every=1000),
                        **QUIET)["records"]
    assert all(abs(r["ess_ratio"] - 1) < 1e-6 for r in sync)
    assert min(r["ess_ratio"] for r in stale[3:]) < 0.99


def test_vcpo_advantages_use_the_off_policy_least_variance_baseline(tiny_args):
    """VCPO's advantages against a loop over groups: w_i = exp(Σ_t log π_θ − log π_b), c_i = w_i² ‖score_i‖²,
    b = Σ c_i R_i / Σ c_i, A_i = (R_i − b)/(std + ε)."""
    from sim.advantages import ADVANTAGE_EPS, group_advantages

    args = tiny_args(method="vcpo", staleness=3, minibatches=1, lr=3e-2, steps=5, snr_every=1000, temperature=2.0)
    run = setup(args, **QUIET)
    for _ in range(4):
        rl_step(run)
    data = train_module.rollouts(run, run.behaviour)
    with torch.no_grad():
        logp, _, logp_all = token_logprobs(run.model, data["prompts"], data["responses"], args.temperature, True)
    mask = data["mask"].double()
    log_w = ((logp - data["behaviour_logp"]).double() * mask).sum(-1)
    norms = stabilizers.logit_score_sq(logp_all.double(), logp.double(), mask)
    rewards = data["reward"].double()
    expected = torch.zeros_like(rewards)
    for g in range(args.prompts_per_step):
        rows = slice(g * args.group_size, (g + 1) * args.group_size)
        c = torch.exp(2 * (log_w[rows] - log_w[rows].max())) * norms[rows]
        b = float((c * rewards[rows]).sum() / c.sum()) if c.sum() > 0 else float(rewards[rows].mean())
        expected[rows] = (rewards[rows] - b) / (rewards[rows].std(unbiased=False) + ADVANTAGE_EPS)
    assert torch.allclose(data["advantages"].double(), expected, rtol=1e-5, atol=1e-5)
    plain = group_advantages(data["reward"].reshape(-1, args.group_size)).reshape(-1)
    assert not torch.allclose(data["advantages"], plain, atol=1e-3)  # the baseline moved something


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


def test_gac_update_space_projects_adamw_proposed_step(tiny_args):
    """gac.wrap in the update space: the applied Δθ is AdamW's proposed Δθ with its part along the previous
    proposed Δθ removed where their cosine is > τ = 0 (computed here from θ captured around AdamW's own step)."""
    args = tiny_args(method="gac", gac_space="update", staleness=2, max_grad_norm=1e9, snr_every=1000,
                     temperature=2.0)
    run = setup(args, **QUIET)
    inner = run.optimizer.optimizer
    before, proposed, after = [], [], []
    inner.register_step_pre_hook(lambda *_: before.append(flat(run.params)))
    inner.register_step_post_hook(lambda *_: proposed.append(flat(run.params)))
    real = run.optimizer.step

    def step(*a, **k):
        out = real(*a, **k)
        after.append(flat(run.params))
        return out

    run.optimizer.step = step
    for _ in range(args.steps):
        rl_step(run)
    previous, projections = None, 0
    for b, prop, a in zip(before, proposed, after, strict=True):
        delta = prop - b
        expected = delta
        if previous is not None and np.dot(delta, previous) > 0:
            expected = delta - np.dot(delta, previous) / np.dot(previous, previous) * previous
            projections += 1
        assert np.abs((a - b) - expected).max() <= 1e-4 * np.abs(delta).max()
        previous = delta
    assert projections >= 2
