"""gac.compiled (``gac.wrap(..., compiled=True)``): GAC folded into a ``torch.compile``d Adam/AdamW step.

Against test_space's float64 hand computation (shares no code with the library) in every space, mode and reference,
for Adam (coupled weight decay) and AdamW; against the fused path in float32, where the compiled step's arithmetic is
torch's fused kernel's and its sums are float64 (the fused path's are float32 BLAS dots): cosines within 1e-6 and θ
within 1e-5 (test_fused's tolerances, and for a bfloat16 reference its bf16 bounds); state_dict round trips; a failed
compile warns once and finishes its step with the same arithmetic; steps it does not serve run the fused path; two
gloo ranks reproduce one process with one all_reduce per step (gradient space); under FSDP2 (DTensor parameters) it
matches the general path with one all_reduce per step in every space (in gradient space writing g' in place: no
buffer swaps).
Each parameter layout and dtype compiles once per process (a C++ compile): slow.
"""

import copy
import datetime
import gc
import io
import math
import os
import tempfile
import warnings

import pytest
import torch
import torch.distributed as dist

import gac
from gac.distributed import local_tensor
from tests.gac.helpers import batches, count_all_reduce, loss_fn, spawn_gloo, tiny_model
from tests.gac.test_fused import SHAPES, STEPS, gradients, same, step_interleaved
from tests.gac.test_space import CONFIGS as HAND_CONFIGS
from tests.gac.test_space import STEPS as HAND_STEPS
from tests.gac.test_space import make_optimizer, problem, run_by_hand, run_steps

pytestmark = pytest.mark.slow

HAND = {**HAND_CONFIGS, "cap_skip": gac.GACConfig(threshold=0.3, mode="cap", skip_threshold=0.9)}
"""test_space's configurations, and cap with a skip on reference "prev": in gradient space test_space's "ema" ones take
the in-place step (d ← lerp(d, g)), and cap and skip need one of their own on the buffer swap ("prev")."""


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
@pytest.mark.parametrize("config", list(HAND))
def test_compiled_step_matches_the_hand_computation(space, optimizer, config):
    cfg = gac.GACConfig(**{**HAND[config].__dict__, "space": space})
    expected, expected_regimes = run_by_hand(space, optimizer, cfg)
    start = problem()[3]
    params = [torch.nn.Parameter(start[:5].clone()), torch.nn.Parameter(start[5:].clone())]
    opt = gac.wrap(make_optimizer(optimizer, params), cfg, compiled=True)
    regimes = run_steps(params, opt, range(HAND_STEPS))
    assert regimes == expected_regimes and sum(r != "keep" for r in regimes) >= 2
    torch.testing.assert_close(torch.cat([p.detach() for p in params]), expected, rtol=1e-10, atol=1e-12)
    taken = opt._compiled.steps_taken
    if space == "gradient":  # acting steps (swap on "prev", in place on "ema"); keep and skip are the fused path's
        assert taken == sum(r in ("project", "cap") for r in regimes)
    else:  # every step with a reference: all but the first and those right after a skip
        assert taken == HAND_STEPS - 1 - sum(r == "skip" for r in regimes[:-1])


def make(cfg: gac.GACConfig, compiled: bool, maximize: bool = False):
    torch.manual_seed(3)
    params = [torch.nn.Parameter(torch.randn(shape)) for shape in SHAPES]
    inner = torch.optim.AdamW(params, lr=0.05, weight_decay=0.1, fused=True, maximize=maximize)
    return params, gac.wrap(inner, cfg, compiled=compiled)


def run(params, opt, steps, zero_every: int = 0) -> list[tuple[str, float]]:
    out = []
    for step in steps:
        for index, (p, g) in enumerate(zip(params, gradients(step), strict=True)):
            p.grad = torch.zeros_like(g) if zero_every and index == 2 and step % zero_every == 2 else g
        opt.step()
        out.append((opt.last_report.regime, opt.last_report.cosine))
        opt.zero_grad()
    return out


def theta(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


FLOAT32 = {
    "cap_skip": (gac.GACConfig(threshold=0.3, mode="cap", skip_threshold=0.95), False),
    "project_maximize": (gac.GACConfig(threshold=0.3), True),
    "adaptive_ema": (gac.GACConfig(threshold=gac.EMAThreshold(margin=0.05, warmup=2), reference="ema",
                                   ema_decay=0.5), False),
}


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
@pytest.mark.parametrize("config", list(FLOAT32))
def test_compiled_step_matches_the_fused_path_in_float32(space, config):
    base, maximize = FLOAT32[config]
    cfg = gac.GACConfig(**{**base.__dict__, "space": space})
    results = {}
    for compiled in (True, False):
        params, opt = make(cfg, compiled, maximize)
        results[compiled] = run(params, opt, range(STEPS)), theta(params), opt
    (got, got_theta, opt), (expected, expected_theta, _) = results[True], results[False]
    assert [r for r, _ in got] == [r for r, _ in expected] and {r for r, _ in got} - {"keep"}
    assert opt._compiled.steps_taken > 0
    torch.testing.assert_close(torch.tensor([c for _, c in got]), torch.tensor([c for _, c in expected]),
                               rtol=0, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(got_theta, expected_theta, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("regime", ["project", "keep"])
def test_gradient_space_takes_its_sums_in_float64_in_one_compiled_loop(regime):
    """The cosine of a gradient-space step is float64's (products exact, sums in float64), which the fused path's
    float32 dots miss by far more than 1e-12: computed here from g and the raw previous g in float64. The layout of
    ``make`` (float32 AdamW over ``SHAPES``), so the kernels compiled for the tests above serve."""
    params, opt = make(gac.GACConfig(threshold=0.0), compiled=True)
    generator = torch.Generator().manual_seed(5)
    first = [torch.randn(p.shape, generator=generator) for p in params]
    second = [(1.0 if regime == "project" else -1.0) * g + torch.randn(g.shape, generator=generator) for g in first]
    for grads in (first, second):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
    g, d = (torch.cat([t.double().reshape(-1) for t in grads]) for grads in (second, first))
    cosine = float(g @ d / (g.norm() * d.norm()))
    assert opt.last_report.regime == regime and "gradient_sums" in opt._compiled._functions
    assert opt.last_report.cosine == pytest.approx(cosine, rel=1e-12, abs=0)
    assert opt._compiled.steps_taken == (1 if regime == "project" else 0)  # keep: torch's fused AdamW steps


@pytest.mark.parametrize("space", ["gradient", "update"])
def test_a_bfloat16_reference_matches_the_fused_path(space):
    cfg = gac.GACConfig(threshold=0.3, mode="cap", space=space, reference_dtype=torch.bfloat16)
    results = {}
    for compiled in (True, False):
        params, opt = make(cfg, compiled)
        results[compiled] = run(params, opt, range(STEPS)), theta(params), opt
    (got, got_theta, opt), (expected, expected_theta, _) = results[True], results[False]
    acting = sum(r in ("project", "cap") for r, _ in got)  # gradient space: its acting steps, in place
    assert opt._compiled.steps_taken == (acting if space == "gradient" else STEPS - 1) > 0
    assert all(opt.state[p]["gac_reference"].dtype == torch.bfloat16 for p in opt.gac.params)
    assert [r for r, _ in got] == [r for r, _ in expected]
    numel = sum(math.prod(shape) for shape in SHAPES)  # test_fused's bounds of a bf16 reference
    torch.testing.assert_close(torch.tensor([c for _, c in got]), torch.tensor([c for _, c in expected]),
                               rtol=0, atol=0.02 / numel**0.5, equal_nan=True)
    torch.testing.assert_close(got_theta, expected_theta, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_a_tensor_without_a_gradient_takes_no_part_as_on_the_fused_path(space):
    """An all-zero gradient at some steps: update and momentum space step it unprojected with its reference kept, in
    the compiled loops; gradient space leaves those steps to the fused path's writes."""
    cfg = gac.GACConfig(threshold=0.3, mode="cap", space=space)
    results = {}
    for compiled in (True, False):
        params, opt = make(cfg, compiled)
        results[compiled] = run(params, opt, range(STEPS), zero_every=3), theta(params), opt
    (got, got_theta, opt), (expected, expected_theta, _) = results[True], results[False]
    assert [r for r, _ in got] == [r for r, _ in expected] and opt._compiled.steps_taken > 0
    torch.testing.assert_close(torch.tensor([c for _, c in got]), torch.tensor([c for _, c in expected]),
                               rtol=0, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(got_theta, expected_theta, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_state_dict_round_trip_is_bit_identical_and_loads_into_the_fused_path(space):
    cfg = gac.GACConfig(threshold=0.3, mode="cap", skip_threshold=0.95, space=space)
    params, opt = make(cfg, True)
    straight = run(params, opt, range(STEPS))
    straight_theta = theta(params)

    params, opt = make(cfg, True)
    first = run(params, opt, range(STEPS // 2))
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in params], "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    _, fused = make(cfg, False)
    fused.load_state_dict(saved["opt"])  # the same layout as the fused path's
    assert set(fused.state_dict()["state"][0]) == set(saved["opt"]["state"][0])
    params, opt = make(cfg, True)
    with torch.no_grad():
        for p, value in zip(params, saved["params"], strict=True):
            p.copy_(value)
    opt.load_state_dict(saved["opt"])
    second = run(params, opt, range(STEPS // 2, STEPS))
    assert same(first + second, straight) and opt._compiled.steps_taken > 0
    assert torch.equal(theta(params), straight_theta)


def test_a_copy_steps_as_the_original():
    """``copy.deepcopy`` of a compiled wrapper (its compiled functions are left behind and compiled again): the copy and
    the original, given the same gradients, reach the same bits."""
    cfg = gac.GACConfig(threshold=0.3, mode="cap", space="update")
    params, opt = make(cfg, True)
    run(params, opt, range(STEPS // 2))
    params_copy, opt_copy = copy.deepcopy((params, opt))
    run(params, opt, range(STEPS // 2, STEPS))
    run(params_copy, opt_copy, range(STEPS // 2, STEPS))
    assert opt_copy._compiled.steps_taken == opt._compiled.steps_taken == STEPS - 1
    assert torch.equal(theta(params_copy), theta(params))


@pytest.mark.parametrize("space", ["gradient", "update"])
def test_a_failed_compile_warns_once_and_the_fused_path_takes_over(monkeypatch, space):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("no C++ compiler found\nsecond line")

    monkeypatch.setattr(torch, "compile", no_compiler)
    cfg = gac.GACConfig(threshold=0.3, space=space)
    params, opt = make(cfg, True)
    with pytest.warns(UserWarning, match=r"torch.compile failed \(RuntimeError: no C\+\+ compiler found\)") as record:
        got = run(params, opt, range(STEPS))
    assert len([w for w in record if "compiled=True" in str(w.message)]) == 1
    assert "\n" not in str(record[0].message)
    assert opt._compiled.failed is not None and opt._compiled.steps_taken == 1  # the one step finished uncompiled
    expected_params, expected_opt = make(cfg, False)
    expected = run(expected_params, expected_opt, range(STEPS))
    assert [r for r, _ in got] == [r for r, _ in expected]
    torch.testing.assert_close(theta(params), theta(expected_params), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("why", ["amsgrad", "step_hook"])
def test_steps_it_does_not_serve_are_the_fused_paths(why):
    cfg = gac.GACConfig(threshold=0.3, space="update")
    out = {}
    for compiled in (True, False):
        torch.manual_seed(3)
        params = [torch.nn.Parameter(torch.randn(shape)) for shape in SHAPES]
        inner = torch.optim.AdamW(params, lr=0.05, weight_decay=0.1, amsgrad=why == "amsgrad")
        if why == "step_hook":
            inner.register_step_post_hook(lambda optimizer, args, kwargs: None)
        opt = gac.wrap(inner, cfg, compiled=compiled)
        out[compiled] = run(params, opt, range(STEPS)), theta(params), opt
    assert out[True][2]._compiled.steps_taken == 0
    assert same(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])


def test_a_request_it_cannot_serve_is_one_warning_and_a_bad_value_one_line():
    with pytest.warns(UserWarning, match=r"compiled step cannot apply \(it needs the fused path") as record:
        opt = gac.wrap(torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1), compiled=True)
    assert len(record) == 1 and opt._compiled is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = gac.wrap(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))]), fused=False, compiled=True)
    assert opt._compiled is None
    with pytest.raises(TypeError, match="compiled must be True or False") as info:
        gac.wrap(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))]), compiled="yes")
    assert "\n" not in str(info.value)


def ddp_worker(rank: int, init_file: str, result_dir: str, space: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    try:
        calls, restore_all_reduce = count_all_reduce()
        try:
            torch.manual_seed(3)
            full = [torch.randn(shape) for shape in SHAPES]
            params = [torch.nn.Parameter(t.reshape(-1)[rank::2].clone()) for t in full]  # every other entry
            opt = gac.wrap(torch.optim.AdamW(params, lr=0.05, weight_decay=0.1, fused=True),
                           gac.GACConfig(threshold=0.3, mode="cap", space=space),
                           process_group=dist.group.WORLD, compiled=True)
            regimes = step_interleaved(params, opt, rank)
        finally:
            restore_all_reduce()
        torch.save({"theta": [p.detach() for p in params], "regimes": regimes, "calls": list(calls),
                    "taken": opt._compiled.steps_taken}, os.path.join(result_dir, f"rank{rank}.pt"))
        dist.all_reduce(torch.zeros(1))  # a last collective, outside the count, so teardown finds no rank behind
    finally:
        dist.destroy_process_group()


def test_two_processes_take_the_single_process_fused_paths_steps_with_one_all_reduce_each():
    """AdamW acts elementwise: 2 gloo ranks holding interleaved halves of each tensor, each compiling its own steps,
    reproduce one process's fused path, with one all_reduce per step (after the layout check). Gradient space, where
    plain gradients swap buffers; update and momentum space across ranks are the FSDP2 test's (the same loops on the
    local shards)."""
    space = "gradient"
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(ddp_worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), tmp, space), 2)
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
    params, opt = make(gac.GACConfig(threshold=0.3, mode="cap", space=space), False)
    expected = run(params, opt, range(STEPS))
    assert {r for r, _ in expected} >= {"keep", "cap"}
    for rank, result in enumerate(results):
        assert result["regimes"] == [r for r, _ in expected] and result["taken"] > 0
        assert result["calls"] == [3] + [2 + 4 * len(SHAPES)] * STEPS
        for got, full in zip(result["theta"], params, strict=True):
            torch.testing.assert_close(got, full.detach().reshape(-1)[rank::2], rtol=1e-5, atol=1e-6)


FSDP_STEPS = 8
FSDP_CONFIGS = {
    "project": {"threshold": 0.3},
    "cap_skip": {"threshold": 0.05, "mode": "cap"},
}
FSDP_SKIP = {"gradient": 0.45, "update": 0.9, "momentum": 0.8}
"""Skip thresholds under the cosines the tiny model's consecutive steps reach in each space (gradient space's stay
below 0.5), so that cap_skip caps and skips in every space."""


def fsdp_worker(rank: int, init_file: str, result_dir: str, space: str) -> None:
    from tests.gac.test_sharded_training import fsdp2

    # A rank that stops taking part in the other's collectives (the ranks' decisions parted) fails the test at the
    # timeout instead of hanging it.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=180))
    torch.set_num_threads(1)
    try:
        results = {}
        for config, fields in FSDP_CONFIGS.items():
            skip = {"skip_threshold": FSDP_SKIP[space]} if config == "cap_skip" else {}
            cfg = gac.GACConfig(**fields, **skip, space=space)
            for compiled in (True, False):
                model = fsdp2(tiny_model())
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    opt = gac.wrap(torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1), cfg,
                                   fused=None if compiled else False, compiled=compiled)
                reports, calls, grads = [], [], []
                for x, y in batches(FSDP_STEPS):
                    half = len(x) // 2  # this rank's half of the batch
                    opt.zero_grad()
                    loss_fn(model, (x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half])).backward()
                    counted, restore_all_reduce = count_all_reduce()  # GAC's collectives only, not FSDP's
                    try:
                        opt.step()
                    finally:
                        restore_all_reduce()
                    calls.append(counted)
                    reports.append((opt.last_report.regime, opt.last_report.cosine))
                    grads.append(torch.cat([p.grad.to_local().reshape(-1) for p in model.parameters()]))
                results[space, config, compiled] = {
                    "reports": reports, "calls": calls, "grads": torch.stack(grads),
                    "theta": [p.full_tensor().detach().clone() for p in model.parameters()],
                    "refs": [None if ref is None else local_tensor(ref).clone() for ref in opt.gac.reference],
                    "taken": opt._compiled.steps_taken if opt._compiled is not None else None,
                    "warnings": [str(w.message) for w in caught if "compiled=True" in str(w.message)]}
                del model, opt
                gc.collect()
        torch.save(results, os.path.join(result_dir, f"rank{rank}.pt"))
        dist.barrier()  # both ranks done with every collective before teardown
    finally:
        gc.collect()
        dist.destroy_process_group()


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])  # one compile per process pair each
def test_under_fsdp2_the_compiled_step_matches_the_general_path_with_one_all_reduce_each(space):
    """FSDP2 (``fully_shard``, DTensor parameters) on 2 gloo ranks, each with half of every batch: the compiled step
    and the general path (``fused=False``) take the same decisions and reach the same parameters, in every space, for
    project and for cap with skips, and GAC's dot products are one all_reduce per step.

    Tolerances: the cosines come from float64 sums on both paths (within 1e-6 once θ has drifted by float32
    rounding); θ within test_fused's rtol 1e-5, atol 1e-6: the compiled arithmetic is torch's fused Adam kernel's
    and the general path's is torch's own AdamW step on the DTensors, which differ in float32 rounding order (a few
    ulp of each update of size about lr per step, over a handful of steps), far below 1e-6 absolute; a wrong sign or a
    missing term in the correction moves θ by a fraction of a step's size, orders above it."""
    with tempfile.TemporaryDirectory() as tmp:
        spawn_gloo(fsdp_worker, lambda attempt: (os.path.join(tmp, f"init{attempt}"), tmp, space), 2)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
    for config in FSDP_CONFIGS:
        for rank, results in enumerate(ranks):
            got, expected = results[space, config, True], results[space, config, False]
            regimes = [r for r, _ in expected["reports"]]
            assert set(regimes) >= ({"keep", "project"} if config == "project" else {"cap", "skip"}), regimes
            assert [r for r, _ in got["reports"]] == regimes, (space, config, rank)
            torch.testing.assert_close(torch.tensor([c for _, c in got["reports"]]),
                                       torch.tensor([c for _, c in expected["reports"]]),
                                       rtol=0, atol=1e-6, equal_nan=True)
            for a, b in zip(got["theta"] + got["refs"], expected["theta"] + expected["refs"], strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the references: this rank's shards
            # .grad after each step: g' where GAC acted (written in place in gradient space), else as the general path
            torch.testing.assert_close(got["grads"], expected["grads"], rtol=1e-5, atol=1e-6)
            # The layout check once (3 numbers), then per step one all_reduce of the sums: ⟨v, d⟩, ‖v‖², ‖d‖²
            # and presence for each of the 4 tensors, and the two non-finite flags.
            assert got["calls"] == expected["calls"] == [[3, 18]] + [[18]] * (FSDP_STEPS - 1)
            assert not got["warnings"]
            if space == "gradient":  # the acting steps, in place (a DTensor gradient's buffer does not swap)
                assert got["taken"] == sum(r in ("project", "cap") for r in regimes) > 0
            else:  # every step but the first and those right after a skip, with DTensor parameters
                assert got["taken"] == FSDP_STEPS - 1 - regimes[:-1].count("skip")
        assert same(ranks[0][space, config, True]["reports"], ranks[1][space, config, True]["reports"])
