"""gac.placement, the pure placement transforms the LLM trainer and the toys use, against ``gac.wrap``.

``gac.wrap`` applies the same placements per parameter tensor with its own chunked kernels. Here a model of two
parameters trained by a wrapped AdamW is compared with one flat parameter (their concatenation) trained by a plain
AdamW with the placement functions written around it by hand: AdamW is elementwise, so the two agree up to float32
rounding of g − α·d (the wrapper forms it in float32, the placement in float64) unless a placement is wrong.
"""

from __future__ import annotations

import pytest
import torch

import gac
from gac import GACConfig, placement

SHAPES = ((3, 4), (5,))
STEPS = 12


def gradients(seed: int = 0) -> list[torch.Tensor]:
    """Flat gradients that stay aligned (a fixed direction plus noise), so GAC acts at most steps."""
    gen = torch.Generator().manual_seed(seed)
    size = sum(torch.Size(s).numel() for s in SHAPES)
    base = torch.randn(size, generator=gen)
    return [base + 0.6 * torch.randn(size, generator=gen) for _ in range(STEPS)]


def wrapped_run(cfg: GACConfig, grads: list[torch.Tensor]) -> tuple[torch.Tensor, list[str]]:
    gen = torch.Generator().manual_seed(1)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    opt = gac.wrap(torch.optim.AdamW(params, lr=0.05, weight_decay=0.0, foreach=False), cfg)
    regimes = []
    for g in grads:
        for p, piece in zip(params, g.split([p.numel() for p in params]), strict=True):
            p.grad = piece.reshape(p.shape).clone()
        opt.step()
        regimes.append(opt.last_report.regime)
    return torch.cat([p.detach().flatten() for p in params]), regimes


def placed_run(cfg: GACConfig, grads: list[torch.Tensor]) -> tuple[torch.Tensor, list[str]]:
    gen = torch.Generator().manual_seed(1)
    flat = torch.nn.Parameter(torch.cat([torch.randn(s, generator=gen).flatten() for s in SHAPES]))
    opt = torch.optim.AdamW([flat], lr=0.05, weight_decay=0.0, foreach=False)
    beta1 = opt.param_groups[0]["betas"][0]
    state, regimes = None, []
    for g in grads:
        if cfg.space == "gradient":
            placed = placement.on_gradient(g, state, cfg)
            flat.grad = placed.out.clone()
            if bool(placement.stepping(placed.report)):
                opt.step()
        elif cfg.space == "momentum":
            buffer = opt.state[flat].get("exp_avg")
            stored = torch.zeros_like(flat) if buffer is None else buffer
            placed = placement.on_momentum(stored, placement.adam_moment(stored, g, beta1), beta1, state, cfg)
            flat.grad = g.clone()
            if bool(placement.stepping(placed.report)):
                if buffer is not None:
                    buffer.copy_(placed.out)
                opt.step()
        else:
            before = flat.detach().clone()
            flat.grad = g.clone()
            opt.step()
            placed = placement.on_update(before, flat.detach(), state, cfg)
            with torch.no_grad():
                flat.copy_(placed.out)
        state = placed.state
        regimes.append(gac.regime_name(int(placed.report.regime), cfg.mode))
    return flat.detach(), regimes


def distance(cfg: GACConfig) -> tuple[float, list[str], list[str]]:
    grads = gradients()
    wrapped, wrapped_regimes = wrapped_run(cfg, grads)
    placed, placed_regimes = placed_run(cfg, grads)
    return float((wrapped - placed).norm() / placed.norm()), wrapped_regimes, placed_regimes


CONFIGS = [GACConfig(space=space, threshold=0.0) for space in ("gradient", "momentum", "update")] + [
    GACConfig(space=space, mode="cap", threshold=0.3) for space in ("gradient", "momentum", "update")] + [
    GACConfig(space="update", threshold=0.0, skip_threshold=0.5),
    GACConfig(space="gradient", threshold=0.0, skip_threshold=0.5),
    GACConfig(space="momentum", threshold=0.0, skip_threshold=0.5)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.space}-{c.mode}-skip{c.skip_threshold}")
def test_placement_equals_the_wrapped_optimizer(cfg):
    error, wrapped_regimes, placed_regimes = distance(cfg)
    assert wrapped_regimes == placed_regimes
    assert sum(r != "keep" for r in placed_regimes) >= STEPS // 2  # GAC acted: the comparison means something
    assert error < 1e-6  # float32 rounding of g − α·d over 12 AdamW steps: seen ≤ 8e-8 (float32 ulp 6e-8)


def test_update_space_skip_is_exercised_and_followed_by_a_step():
    _, wrapped, regimes = distance(GACConfig(space="update", threshold=0.0, skip_threshold=0.5))
    assert regimes.count("skip") >= 3
    assert all(b != "skip" for a, b in zip(regimes, regimes[1:], strict=False) if a == "skip")
    assert wrapped == regimes


@pytest.mark.parametrize("space", ["gradient", "momentum", "update"])
def test_comparison_catches_a_placement_that_forgets_to_write_back(monkeypatch, space):
    """Mutants of each placement: the controlled vector computed but not written back into the step."""
    cfg = GACConfig(space=space, threshold=0.0)
    if space == "gradient":
        monkeypatch.setattr(placement, "on_gradient", lambda g, state, cfg, threshold=None: placement.Placed(
            g, *gac.update(g, gac.init(g, cfg) if state is None else state, cfg)[1:]))
    elif space == "momentum":
        real = placement.on_momentum
        monkeypatch.setattr(placement, "on_momentum", lambda buffer, *a, **k: real(buffer, *a, **k)._replace(
            out=buffer))
    else:
        real = placement.on_update
        monkeypatch.setattr(placement, "on_update", lambda before, after, *a, **k: real(before, after, *a, **k)
                            ._replace(out=after))
    assert distance(cfg)[0] > 1e-3


def skips_after_first(restart: bool, monkeypatch) -> tuple[int, int]:
    """Update space with AdamW and skip_threshold 0.9 on aligned gradients: (skips after the first skip, steps after
    it). ``restart=False`` patches out the reference restart after a skip (the lock-in of issue 35.1): the skipped
    vector becomes the reference, as before the fix."""
    if not restart:
        def no_restart(vector, state, cfg, threshold=None):
            new, after, report = gac.update(vector, state, cfg, threshold)
            skipped = (report.regime == gac.SKIP).unsqueeze(-1)
            return new, after._replace(reference=torch.where(skipped, vector, after.reference)), report

        monkeypatch.setattr(placement, "update", no_restart)
    cfg = GACConfig(space="update", threshold=0.0, skip_threshold=0.9)
    gen = torch.Generator().manual_seed(3)
    flat = torch.nn.Parameter(torch.randn(40, generator=gen))
    opt = torch.optim.AdamW([flat], lr=0.01, weight_decay=0.0)
    base, state, regimes = torch.randn(40, generator=gen), None, []
    for _ in range(60):
        before = flat.detach().clone()
        flat.grad = base + 0.05 * torch.randn(40, generator=gen)
        opt.step()
        placed = placement.on_update(before, flat.detach(), state, cfg)
        with torch.no_grad():
            flat.copy_(placed.out)
        state = placed.state
        regimes.append(int(placed.report.regime))
    first = regimes.index(gac.SKIP)
    later = regimes[first + 1:]
    return sum(r == gac.SKIP for r in later), len(later)


def test_update_space_skip_does_not_lock_in(monkeypatch):
    skips, steps = skips_after_first(True, monkeypatch)
    assert steps > 20 and skips <= (steps + 1) // 2  # a skip restarts the reference: the next step is applied


def test_lock_in_check_fails_without_the_restart(monkeypatch):
    skips, steps = skips_after_first(False, monkeypatch)
    assert skips == steps  # every later step skipped: the check above can fail


def test_momentum_shift_makes_adam_form_the_controlled_moment():
    cfg = GACConfig(space="momentum", threshold=0.0)
    gen = torch.Generator().manual_seed(4)
    buffer, g, beta1 = torch.randn(2, 30, generator=gen), torch.randn(2, 30, generator=gen), 0.9
    reference = placement.adam_moment(buffer, torch.randn(2, 30, generator=gen), beta1) + buffer  # aligned
    state = gac.GACState(reference, (), torch.zeros(2, dtype=torch.int64))
    moment = placement.adam_moment(buffer, g, beta1)
    placed = placement.on_momentum(buffer, moment, beta1, state, cfg)
    controlled = placement.control_moment(moment, state, cfg).out
    assert (placed.report.regime == gac.ACT).all()
    formed = placement.adam_moment(placed.out, g, beta1)  # what Adam forms from the shifted buffer
    torch.testing.assert_close(formed, controlled, rtol=1e-5, atol=1e-6)
    cosine = torch.nn.functional.cosine_similarity(formed, reference, dim=-1)
    assert cosine.abs().max() < 1e-5  # project at τ = 0: nothing left along the reference


def test_a_bad_beta_is_a_one_line_error():
    x = torch.ones(1, 3)
    with pytest.raises(ValueError, match=r"beta .* must be in \(0, 1\]"):
        placement.on_momentum(x, x, 0.0, None, GACConfig(space="momentum"))
