"""Issue 35: configurations that used to fail silently are now controlled correctly or refused in one line."""

from types import SimpleNamespace

import pytest
import torch

import gac
import gac.tracker
from tests.gac.helpers import batches, loss_fn, tiny_model

OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
}


def one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message
    return message


# -- 1. update space + skip_threshold must not lock training in -----------------------------------------
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("skip_threshold", [0.9, 0.99])
def test_update_space_skip_cannot_lock_in(optimizer, skip_threshold):
    """θ is restored on a skip but the optimizer's momentum advanced: against the skipped Δ as reference every
    later step was skipped (100 / 100). A skip now restarts the reference, so the next step is always applied."""
    model = tiny_model()
    opt = gac.wrap(OPTIMIZERS[optimizer](model.parameters()),
                   gac.GACConfig(threshold=0.0, skip_threshold=skip_threshold, space="update"))
    regimes = []
    for batch in batches(120):
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad()
        regimes.append(opt.last_report.regime)
        if regimes[-1] == "skip":
            assert all(r is None for r in opt.gac.reference)  # restarted, as at init
    assert "skip" in regimes  # the case is exercised
    after_skip = [b for a, b in zip(regimes[:-1], regimes[1:], strict=True) if a == "skip"]
    assert after_skip and "skip" not in after_skip
    assert regimes[60:].count("skip") <= 30


def test_update_space_nonfinite_step_is_not_applied():
    """A finite gradient whose proposed step overflows (fp16) is skipped under nonfinite="skip": θ stays as it was."""
    param = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    opt = gac.wrap(torch.optim.SGD([param], lr=2.0), gac.GACConfig(space="update", nonfinite="skip"))
    param.grad = torch.full((3,), 60000.0, dtype=torch.float16)
    opt.step()
    assert opt.last_report.regime == "skip" and opt.last_report.nonfinite
    assert torch.equal(param.detach(), torch.ones(3, dtype=torch.float16))


# -- 2. parameters that join after wrap are controlled ---------------------------------------------------
def hand_gac_sgd(steps: list[list[torch.Tensor | None]], lr: float) -> tuple[list[float], list[torch.Tensor]]:
    """GAC (gradient space, reference "prev", τ = 0, project) then SGD, on the flat vector of all parameters in
    float64; a parameter not controlled yet (None) is zero in g and has no reference (what the rule "takes no part"
    gives here: it has no reference before its first gradient). (cosines, applied steps)."""
    reference, cosines, applied = None, [], []
    for grads in steps:
        g = torch.cat([torch.zeros(n) if t is None else t.reshape(-1) for t, n in grads]).double()
        d = torch.zeros_like(g) if reference is None else reference
        cosine = float(gac.alignment(g, d))
        step = g - (g @ d) / (d @ d) * d if cosine > 0 else g
        cosines.append(cosine)
        applied.append(lr * step)
        reference = g
    return cosines, applied


def two_layer_grads(model, batch):
    model.zero_grad()
    loss_fn(model, batch).backward()
    return [(None if p.grad is None else p.grad.detach().clone(), p.numel()) for p in model.parameters()]


@pytest.mark.parametrize("how", ["inner_add_param_group", "wrapper_add_param_group", "unfreeze"])
def test_parameters_joining_after_wrap_are_controlled_and_counted(how):
    """A group added after wrap (to the inner optimizer or the wrapper) or a parameter unfrozen after wrap used to
    train without GAC and be left out of the cosine; now it is controlled from its first gradient, fresh reference."""
    model, lr = tiny_model(), 0.1
    first, last = list(model[0].parameters()), list(model[2].parameters())
    if how == "unfreeze":
        for p in last:
            p.requires_grad_(False)
        opt = gac.wrap(torch.optim.SGD(model.parameters(), lr=lr), gac.GACConfig(threshold=0.0))
    else:
        opt = gac.wrap(torch.optim.SGD(first, lr=lr), gac.GACConfig(threshold=0.0))
    hand_steps, cosines, moves = [], [], []
    for step, batch in enumerate(batches(4)):
        if step == 1:
            if how == "unfreeze":
                for p in last:
                    p.requires_grad_(True)
            elif how == "inner_add_param_group":
                opt.optimizer.add_param_group({"params": last})
            else:
                opt.add_param_group({"params": last})
        grads = two_layer_grads(model, batch)
        if step == 0:  # the last layer is not in the optimizer (or frozen): GAC must not see it
            grads = [(None, n) if i >= 2 else (g, n) for i, (g, n) in enumerate(grads)]
        hand_steps.append(grads)
        before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        opt.step()
        moves.append(before - torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        cosines.append(opt.last_report.cosine)
    expected_cosines, expected_moves = hand_gac_sgd(hand_steps, lr)
    assert cosines == pytest.approx(expected_cosines, abs=1e-6, nan_ok=True)
    assert max(expected_cosines[1:]) > 0.1  # GAC acts after the join
    for move, expected in zip(moves, expected_moves, strict=True):
        torch.testing.assert_close(move.double(), expected, atol=1e-6, rtol=1e-5)


# -- 3. complex parameters are measured and projected in their real view ---------------------------------
def complex_and_real_twin(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(5, 3, dtype=torch.complex64, generator=gen)
    return torch.nn.Parameter(values.clone()), torch.nn.Parameter(torch.view_as_real(values).clone())


@pytest.mark.parametrize("optimizer", ["adamw", "sgd_momentum"])
@pytest.mark.parametrize("chunk", [None, 4])
@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_complex_parameters_are_controlled_like_their_real_view(monkeypatch, space, chunk, optimizer):
    """Cosine and projection used only the real parts (a real-part cosine of -0.24 where the real-view cosine is
    +0.25). A complex parameter now trains like its real view ``torch.view_as_real``, also when it is summed and
    written in chunks (``chunk``): bit for bit under AdamW in gradient and update space, which steps complex parameters
    in their real view; in momentum space and under SGD within 1e-6, the rounding of torch's own complex kernels
    (float32 ulp ~6e-8 at these magnitudes)."""
    if chunk is not None:
        monkeypatch.setattr(gac.tracker, "CHUNK_NUMEL", chunk)
    complex_param, real_param = complex_and_real_twin()
    cfg = gac.GACConfig(threshold=0.0, space=space)
    complex_opt, real_opt = (gac.wrap(OPTIMIZERS[optimizer]([p]), cfg) for p in (complex_param, real_param))
    gen = torch.Generator().manual_seed(1)
    drift = torch.randn(5, 3, 2, generator=gen)
    # Momentum space reads the first moment torch's AdamW keeps, and torch updates a complex moment and its real
    # twin's with different vectorised kernels: on some CPUs they round one float32 ulp apart (bit-equal here).
    exact = optimizer == "adamw" and space != "momentum"
    acted = 0
    for _ in range(6):
        grad = drift + 0.7 * torch.randn(5, 3, 2, generator=gen)
        real_param.grad, complex_param.grad = grad.clone(), torch.view_as_complex(grad.clone())
        real_opt.step(), complex_opt.step()
        assert complex_opt.last_report.cosine == pytest.approx(real_opt.last_report.cosine, abs=0 if exact else 1e-6,
                                                               rel=0 if exact else 1e-6, nan_ok=True)
        assert complex_opt.last_report.regime == real_opt.last_report.regime
        acted += real_opt.last_report.regime == "project"
    assert acted >= 3
    tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": 0, "atol": 1e-6}
    torch.testing.assert_close(torch.view_as_real(complex_param.detach()), real_param.detach(), **tolerance)


def test_pure_functions_take_complex_vectors_in_their_real_view():
    gen = torch.Generator().manual_seed(2)
    g, d = (torch.randn(2, 4, dtype=torch.complex128, generator=gen) for _ in range(2))
    g_real, d_real = (torch.view_as_real(t).flatten(-2) for t in (g, d))
    assert torch.equal(gac.alignment(g, d), gac.alignment(g_real, d_real))
    cfg = gac.GACConfig(threshold=0.0)
    result, real_result = gac.control(g, d, cfg), gac.control(g_real, d_real, cfg)
    assert torch.equal(torch.view_as_real(result.grad).flatten(-2), real_result.grad)
    assert torch.equal(result.cosine, real_result.cosine)
    state = gac.init(g, cfg)._replace(reference=d.clone())
    new, state, report = gac.update(g, state, cfg)
    assert torch.equal(torch.view_as_real(new).flatten(-2), real_result.grad)
    assert torch.equal(report.cosine, real_result.cosine) and torch.equal(state.reference, g)


# -- 4. misuse is one line -------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [0.3, {"threshold": 0.3}, "project"])
def test_a_config_that_is_not_a_gacconfig_is_a_type_error(cfg):
    model = tiny_model()
    with pytest.raises(TypeError) as info:
        gac.wrap(torch.optim.AdamW(model.parameters()), cfg)
    assert "GACConfig" in one_line(info) and type(cfg).__name__ in one_line(info)
    with pytest.raises(TypeError, match="GACConfig"):
        gac.GradientAlignmentControl(model.parameters(), cfg)
    with pytest.raises(TypeError, match="GACConfig"):
        gac.update(torch.ones(3), gac.init(torch.ones(3), gac.GACConfig()), cfg)


def test_meta_parameters_are_refused_naming_the_parameter():
    model = torch.nn.Linear(3, 2, device="meta")
    with pytest.raises(ValueError, match="meta device") as info:
        gac.wrap(torch.optim.AdamW(model.parameters()), gac.GACConfig())
    assert "param_groups[0]['params'][0]" in one_line(info) and "(2, 3)" in one_line(info)
    opt = gac.wrap(torch.optim.AdamW(tiny_model().parameters()), gac.GACConfig())
    with pytest.raises(ValueError, match="meta device") as info:
        opt.add_param_group({"params": [torch.nn.Parameter(torch.empty(4, device="meta"))]})
    assert "param_groups[1]['params'][0]" in one_line(info)


class FakeTrainer:
    def add_callback(self, callback):
        self.callback = callback

    def log(self, logs, *args, **kwargs):
        return logs


def test_add_gac_on_an_already_wrapped_optimizer_refuses_another_config():
    pytest.importorskip("transformers")
    from gac.integrations.trl import add_gac

    wrapped = gac.wrap(torch.optim.AdamW(tiny_model().parameters()), gac.GACConfig(threshold=0.1))
    accelerated = SimpleNamespace(optimizer=wrapped, scaler=None)  # what a Trainer hands its callbacks
    for held in (wrapped, accelerated):
        callback = add_gac(FakeTrainer(), gac.GACConfig(threshold=0.5))
        with pytest.raises(ValueError, match="already wrapped") as info:
            callback.on_train_begin(None, None, None, optimizer=held)
        assert "threshold=0.5" in one_line(info) and "threshold=0.1" in one_line(info)
        for cfg in (None, gac.GACConfig(threshold=0.1)):  # no config, or the same one: the wrapper is kept
            callback = add_gac(FakeTrainer(), cfg)
            callback.on_train_begin(None, None, None, optimizer=held)
            assert callback.optimizer is wrapped and callback.cfg == wrapped.cfg
    with pytest.raises(TypeError, match="GACConfig"):
        add_gac(FakeTrainer(), 0.3)
