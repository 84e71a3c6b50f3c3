import math

import numpy as np
import pytest
import torch

import gac
from sim.llm import checkpoint, grpo, probes
from sim.llm import train as train_module
from sim.llm.__main__ import main
from sim.llm.train import Args, NonFiniteError, rl_step, run_records, setup, summary, train
from sim.record import same_value
from sim.schema import columns

QUIET = dict(log=lambda *a: None)


def cos(a, b) -> float:
    """The cosine in float64, 0 when either vector is 0 (the spec's convention: a step whose groups all tied has no
    gradient)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return float(np.dot(a, b) / norms) if norms else 0.0


class Capture:
    """Gradients and parameters seen from outside the trainer: the raw gradient of every backward pass (a
    post-accumulate hook on θ, before GAC), the gradient handed to AdamW and θ before/after each AdamW step."""

    def __init__(self, state, adamw_hooks):
        self.backwards, self.stepped, self.before, self.after = [], [], [], []
        state.theta.register_post_accumulate_grad_hook(lambda theta: self.backwards.append(self._flat(theta.grad)))
        adamw_hooks(lambda theta, grad, adam, lr: (self.stepped.append(self._flat(grad)),
                                                   self.before.append(self._flat(theta))),
                    lambda theta, adam: self.after.append(self._flat(theta)))

    @staticmethod
    def _flat(rows):
        return rows[0].detach().double().numpy().copy()  # the run's row (one run: K = 1)


def stepped(state, seen: Capture) -> tuple[list, list]:
    """Run the state's steps one by one: the records and, per step, the raw gradients of its backward passes."""
    records, backwards_at = [], []
    for _ in range(state.args.steps):
        start = len(seen.backwards)
        records.append(rl_step(state))
        backwards_at.append(seen.backwards[start:])
    return records, backwards_at


@pytest.mark.parametrize("method,staleness", [("sync", 0), ("naive", 2), ("gac", 2), ("tis", 2), ("m2po", 2),
                                              ("lr_scale", 2), ("gac", 0), ("bapo", 2)])
def test_every_method_runs_end_to_end(tiny_args, method, staleness):
    result = run_records(tiny_args(method=method, staleness=staleness,
                                   staleness_kind="random" if method == "tis" else "fixed"), **QUIET)
    records = result["records"]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for r in records:
        assert tuple(r) == columns("llm")
        assert math.isfinite(r["objective"]) and math.isfinite(r["grad_norm"]) and not r["diverged"]
    assert records[0]["method"] == ("sync" if method == "sync" else method)
    assert all(r["behaviour_version"] == max(0, r["step"] - staleness) for r in records) or method == "tis"
    assert [math.isfinite(r["accuracy"]) for r in records] == [True, False, True, False]
    assert (records[0]["regime"] == "n/a") == (method != "gac")
    if method == "bapo":  # the adaptive bounds (float32) stay in BAPO's ranges [a⁻, b⁻], [a⁺, b⁺]
        eps = 1e-6
        assert all(0.6 - eps <= r["clip_low"] <= 0.9 + eps and 1.2 - eps <= r["clip_high"] <= 3.0 + eps
                   for r in records)
        assert any(r["clip_high"] > 1.2 + eps for r in records)  # the bounds did move
    assert 0.0 <= result["summary"]["final_accuracy"] <= 1.0
    assert set(result["summary"]) == {"args", "method", "warm_start", "final_accuracy", "diverged_at",
                                      "code_fingerprint"}


def test_every_cosine_equals_a_direct_computation(tiny_args, adamw_hooks):
    """cos_prev, cos_prev_step, cos_update, cos_applied and cos_halves against gradients and parameters
    captured from outside. Method gac (τ = 0) so applied ≠ raw; the probe runs at steps 0 and 2."""
    args = tiny_args(method="gac", staleness=2, snr_every=2)
    state = setup(args, **QUIET)
    seen = Capture(state, adamw_hooks)
    records, backwards_at = stepped(state, seen)
    raw = [b[-2:] for b in backwards_at]  # the two updates of each step (after the probe's two backwards)
    assert [len(b) for b in backwards_at] == [4, 2, 4, 2]
    applied = [seen.stepped[2 * t: 2 * t + 2] for t in range(args.steps)]  # clipped: a scalar, same cosines
    delta = [a - b for a, b in zip(seen.after, seen.before, strict=True)]
    for t in (1, 2, 3):
        r = records[t]
        assert r["cos_prev"] == pytest.approx((cos(raw[t][0], raw[t - 1][1]) + cos(raw[t][1], raw[t][0])) / 2, abs=1e-9)
        # applied is captured after the clip's float32 scalar multiply: each element rounded (≤ 6e-8 relative), which
        # moves a cosine by up to ~1e-8 (seen 1.3e-9 with perturbed weights); a wrong vector moves it by far more
        assert r["cos_applied"] == pytest.approx(
            (cos(applied[t][0], applied[t - 1][1]) + cos(applied[t][1], applied[t][0])) / 2, abs=1e-7)
        # The trainer sums the updates' gradients in float32, the test in float64.
        assert r["cos_prev_step"] == pytest.approx(cos(sum(raw[t]), sum(raw[t - 1])), abs=1e-7)
        assert r["cos_update"] == pytest.approx(
            (cos(delta[2 * t], delta[2 * t - 1]) + cos(delta[2 * t + 1], delta[2 * t])) / 2, abs=1e-9)
        # GAC with τ = 0 leaves no positive alignment with the previous raw gradient.
        assert cos(applied[t][0], raw[t - 1][1]) <= 1e-6 and cos(applied[t][1], raw[t][0]) <= 1e-6
    for t in (0, 2):
        halves = backwards_at[t][:2]
        c = cos(*halves)
        assert records[t]["cos_halves"] == pytest.approx(c, abs=1e-9)
        assert not np.allclose(halves[0], halves[1])  # two different halves of the batch
        snr = records[t]["snr_halves"]
        assert math.isnan(snr) if c <= 0 else snr == pytest.approx(c / (1 - c))
    assert math.isnan(records[1]["cos_halves"]) and math.isnan(records[3]["snr_halves"])
    assert records[0]["cos_prev"] == pytest.approx(cos(raw[0][1], raw[0][0]), abs=1e-9)  # update 0 has no predecessor
    assert math.isnan(records[0]["cos_prev_step"])


def float32_pairs(seed: int = 0):
    """Float32 vector pairs from subnormal to near-overflow magnitudes, with zeros, ties and opposite signs."""
    g = torch.Generator().manual_seed(seed)
    tiny = torch.tensor([1e-45, -3e-44, 2e-40, 0.0], dtype=torch.float32)
    for size in (1, 7, 1000, 70_000):
        for exp_a, exp_b in ((0, 0), (-44, 0), (-40, -42), (37, -30), (30, 35), (-20, 20)):
            a = (torch.randn(size, generator=g) * 10.0**exp_a).float()
            b = (torch.randn(size, generator=g) * 10.0**exp_b).float()
            yield a, b
            ratio = float(b.abs().max()) / float(a.abs().max())
            yield a, (a.double() * ratio + b.double() / 4).float()  # strongly aligned
            yield a, -a
    yield tiny, tiny.flip(0)
    yield torch.zeros(5), torch.ones(5)


def test_fast_cosine_has_the_bits_of_gac_alignment():
    """The trainer's cosine (gac.cosine64: cached float64 operands) against gac.alignment, float32 inputs."""
    pairs = list(float32_pairs())
    for a, b in pairs:
        expected = float(gac.alignment(a.double(), b.double()))
        got = probes.cosine(probes.as_float64(a), probes.as_float64(b))
        assert same_value(got, expected) and math.isfinite(got), (a.abs().max(), b.abs().max(), got, expected)
    # The check can fail: float32 sums (the fast-but-wrong variant) change the last bits.
    float32_sums = [(float(torch.dot(a, b) / (a.norm() * b.norm())), a, b) for a, b in pairs[:40]]
    assert any(c != float(gac.alignment(a.double(), b.double())) for c, a, b in float32_sums)


def test_fast_cosine_reuses_a_known_operand_only_for_the_same_tensor():
    a = torch.randn(10)
    known = probes.as_float64(a)
    assert probes.as_float64(a, known) is known
    other = a.clone()
    assert probes.as_float64(other, known) is not known


def test_snr_from_cosine():
    assert probes.snr_from_cosine(0.5) == pytest.approx(1.0) and probes.snr_from_cosine(0.2) == 0.25
    assert math.isnan(probes.snr_from_cosine(0.0)) and math.isnan(probes.snr_from_cosine(math.nan))
    assert probes.snr_from_cosine(1.0) == math.inf


def test_snr_probe_does_not_change_the_training_numbers(tiny_args):
    probed = run_records(tiny_args(method="gac", staleness=2, snr_every=1), **QUIET)["records"]
    plain = run_records(tiny_args(method="gac", staleness=2, snr_every=1000, seed=0), **QUIET)["records"]
    for a, b in zip(probed, plain, strict=True):
        assert all(same_value(a[k], b[k]) for k in a if k not in ("cos_halves", "snr_halves")), (a, b)
    assert all(math.isfinite(r["cos_halves"]) for r in probed)


def test_gac_step_reference_compares_with_the_previous_rl_steps_summed_gradient(tiny_args, adamw_hooks):
    args = tiny_args(method="gac", staleness=2, gac_reference="step", snr_every=1000)
    state = setup(args, **QUIET)
    seen = Capture(state, adamw_hooks)
    records, backwards_at = stepped(state, seen)
    raw = [b[-2:] for b in backwards_at]
    applied = [seen.stepped[2 * t: 2 * t + 2] for t in range(args.steps)]
    assert records[0]["regime"] == "keep" and cos(applied[0][0], raw[0][0]) == pytest.approx(
        1.0 if np.any(raw[0][0]) else 0.0, abs=1e-9)
    for t in (1, 2, 3):
        for k in (0, 1):
            assert cos(applied[t][k], sum(raw[t - 1])) <= 1e-6
    # The update reference would compare with the previous update instead: some alignment left there.
    update_ref_cosines = [cos(applied[t][1], raw[t][0]) for t in (1, 2, 3)]
    assert max(abs(c) for c in update_ref_cosines) > 1e-3


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])  # update, momentum: GAC's state in gac.wrap's
def test_stopping_train_early_then_resume_gives_the_same_records(tiny_args, tmp_path, space):
    common = dict(method="gac", staleness=2, steps=6, checkpoint_every=3, snr_every=2, gac_space=space)
    uninterrupted = run_records(tiny_args(out_dir=str(tmp_path / "a"), **common), **QUIET)
    stopped = tiny_args(out_dir=str(tmp_path / "b"), **common)
    for record in train(stopped, **QUIET):
        if record["step"] == 4:
            break  # a kill after step 4: the checkpoint holds steps 0..2
    resumed = run_records(tiny_args(out_dir=str(tmp_path / "b"), resume=True, **common), **QUIET)
    assert len(resumed["records"]) == 6
    for a, b in zip(resumed["records"], uninterrupted["records"], strict=True):
        assert all(same_value(a[k], b[k]) for k in a), (a, b)
    assert resumed["summary"]["final_accuracy"] == uninterrupted["summary"]["final_accuracy"]


def test_summary_after_list_of_train(tiny_args):
    args = tiny_args(steps=2)
    state = setup(args, **QUIET)
    records = list(train(args, state, **QUIET))
    assert [r["step"] for r in records] == [0, 1] and state.runs[0].records == records
    assert summary(state)["diverged_at"] is None and 0 <= summary(state)["final_accuracy"] <= 1


def test_nonfinite_loss_names_the_step_and_is_not_checkpointed(tiny_args, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = grpo.policy_loss

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 10 else loss), stats  # step 3, update 1 (probe: 2 at step 0)

    monkeypatch.setattr(grpo, "policy_loss", poisoned)
    args = tiny_args(steps=6, checkpoint_every=2, snr_every=1000, out_dir=str(tmp_path / "nan"))
    with pytest.raises(NonFiniteError, match="step 3"):
        run_records(args, **QUIET)
    ckpt = checkpoint.load_checkpoint(tmp_path / "nan" / "checkpoint.pt")
    assert ckpt["step"] == 2 and torch.isfinite(ckpt["theta"]).all()
    calls["n"] = 0
    marked = run_records(tiny_args(steps=6, snr_every=1000, on_nonfinite="mark", out_dir=str(tmp_path / "m")),
                         **QUIET)
    assert marked["records"][-1]["step"] == 3 and marked["records"][-1]["diverged"] is True
    assert math.isnan(marked["records"][-1]["objective"])
    assert marked["summary"]["diverged_at"] == 3


@pytest.mark.parametrize("argv,needle", [
    (["--staleness", "-1"], "staleness must be >= 0"),
    (["--method", "dc"], "does not apply to the stale-data model"),
    (["--method", "bogus"], "unknown method"),
    (["--gac.threshold", "1.5"], "threshold must be in [0, 1)"),
    (["--tis.tis-cap", "0"], "tis_cap must be > 0"),
    (["--method", "sync", "--staleness", "4"], "method sync means staleness 0"),
    (["--minibatches", "3"], "must divide --prompts-per-step"),
    (["--model", "/nonexistent"], "no config.json"),
    (["--device", "gpu"], "--device must be cpu, cuda or cuda:N"),
    (["--digits", "0"], "digits must be >= 1"),
    (["--snr-every", "0"], "--snr-every must be >= 1"),
    (["--method", "gac", "--gac-reference", "rl"], "gac_reference must be one of"),
    (["--method", "braking", "--braking.braking-alpha", "5"], "braking_alpha must be in [0, 2]"),
    (["--method", "kl_target", "--kl-target.kl-floor", "2"], "kl_floor must be in (0, 1]"),
    (["--method", "vcpo", "--vcpo.vcpo-power", "0"], "vcpo_power must be > 0"),
])
def test_invalid_configuration_fails_with_one_line(argv, needle, capsys, monkeypatch):
    monkeypatch.setattr(train_module, "setup_batch", lambda *a: pytest.fail("work started"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("text", ['{"vocab_size": ', '[1, 2]', '{"model_type": "qwen3"}'])
def test_model_folder_with_a_junk_config_fails_with_one_line(tmp_path, capsys, monkeypatch, text):
    (tmp_path / "config.json").write_text(text)
    monkeypatch.setattr(train_module, "setup_batch", lambda *a: pytest.fail("work started"))
    assert main(["--model", str(tmp_path), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--model {tmp_path}" in err and len(err.splitlines()) == 1


CLI_TINY = ["--size", "tiny", "--digits", "1", "--prompts-per-step", "2", "--group-size", "4", "--eval-problems", "8",
            "--no-progress", "--method", "gac", "--staleness", "1"]


def test_cli_writes_records(tiny_checkpoint, tmp_path):
    out = tmp_path / "cli"
    assert main([*CLI_TINY, "--model", str(tiny_checkpoint), "--steps", "2", "--out-dir", str(out)]) == 0
    header = (out / "records.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == columns("llm")
    assert not (out / ".lock").exists()


@pytest.fixture
def checkpointed(tiny_checkpoint, tmp_path):
    """A finished 4-step CLI run with a checkpoint at step 2; returns (argv, out_dir)."""
    out = tmp_path / "ck"
    argv = [*CLI_TINY, "--model", str(tiny_checkpoint), "--steps", "4", "--checkpoint-every", "2",
            "--out-dir", str(out)]
    assert main(argv) == 0
    return argv, out


@pytest.mark.parametrize("extra,needle", [
    (["--method", "naive"], "method (checkpoint 'gac', now 'naive')"),
    (["--lr", "0.01"], "lr (checkpoint"),
    (["--threads", "2"], "threads (checkpoint 1, now 2)"),  # long sums' last bits depend on the thread count
    (["--steps", "3"], "would shrink the outputs"),
])
def test_resume_refuses_other_args_and_shrinking(checkpointed, capsys, extra, needle):
    argv, out = checkpointed
    before = (out / "records.csv").read_bytes()
    assert main([*argv, "--resume", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert (out / "records.csv").read_bytes() == before


def test_resume_allows_output_only_fields(checkpointed):
    argv, out = checkpointed
    before = (out / "records.csv").read_bytes()
    assert main([*argv, "--resume", "--checkpoint-every", "3", "--progress"]) == 0
    assert (out / "records.csv").read_bytes() == before  # the same numbers from the checkpoint on


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_damaged_checkpoint_fails_with_one_line_and_keeps_outputs(checkpointed, capsys, damage):
    argv, out = checkpointed
    path, before = out / "checkpoint.pt", (out / "records.csv").read_bytes()
    data = bytearray(path.read_bytes())
    if damage == "flip":
        middle = len(data) // 2
        data[middle: middle + 64] = bytes(b ^ 0xFF for b in data[middle: middle + 64])
    path.write_bytes(bytes(data[: len(data) // 2]) if damage == "truncate" else b"" if damage == "empty" else data)
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "checkpoint" in err and len(err.splitlines()) == 1
    assert (out / "records.csv").read_bytes() == before


def test_out_dir_held_by_a_live_run_is_refused_and_free_once_it_is_killed(tiny_checkpoint, tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "shared"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom sim.llm.checkpoint import out_dir_lock\n"
                               "with out_dir_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)",
                               str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = [*CLI_TINY, "--model", str(tiny_checkpoint), "--steps", "1", "--out-dir", str(out)]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert f"in use by pid {holder.pid}: " in err and "-c" in err and len(err.splitlines()) == 1
        assert f"delete {(out / '.lock').resolve()}" in err  # how to clear a stale lock
        assert not (out / "records.csv").exists()
    finally:
        holder.kill()  # SIGKILL: no cleanup runs; the kernel drops the lock with the process
        holder.wait()
    assert main(argv) == 0
    assert (out / "records.csv").exists() and not (out / ".lock").exists()


def test_checkpoint_temp_names_are_unique(tiny_checkpoint, tmp_path):
    """Another trainer's temp file under the old shared name does not break this one's checkpoint."""
    out = tmp_path / "tmpname"
    (out / "checkpoint.pt.tmp").mkdir(parents=True)  # in the way of a fixed temp name
    argv = [*CLI_TINY, "--model", str(tiny_checkpoint), "--steps", "3", "--checkpoint-every", "2",
            "--out-dir", str(out)]
    assert main(argv) == 0
    assert checkpoint.load_checkpoint(out / "checkpoint.pt")["step"] == 2


def test_args_validate_rejects_before_work():
    with pytest.raises(ValueError, match="--group-size"):
        Args(group_size=1).validate()
