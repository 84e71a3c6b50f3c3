"""The GRPO trainer (sim/llm/train.py): its numbers against independent computations, micro-batch accumulation,
the NaN-cosine rule, dynamic sampling, resume, non-finite and collapsed runs, safe checkpoints, and its command line."""

import math

import numpy as np
import pytest
import torch

import gac
from runtime import checkpoint
from runtime.files import file_sha256
from sim.llm import train as train_module
from sim.llm.__main__ import main
from sim.llm.train import Args, NonFiniteError, rl_step, run_records, setup, summary, train
from sim.schema import collapse_step, columns
from tests.records import same_value

QUIET = dict(log=lambda *a: None)


def cos(a, b) -> float:
    """The cosine in float64 by numpy; NaN where either vector is 0 (no gradient is not orthogonal)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return float(np.dot(a, b) / norms) if norms else math.nan


def flat(tensors) -> np.ndarray:
    return torch.cat([t.detach().reshape(-1) for t in tensors]).double().numpy().copy()


class Capture:
    """Seen from outside the trainer: the raw gradient after each accumulation (before any control), the gradient
    the optimizer's step receives, and the parameters before and after each step."""

    def __init__(self, run, monkeypatch):
        self.raw, self.stepped, self.before, self.after, self.inner = [], [], [], [], []
        real_accumulate, real_step = train_module.accumulate_gradient, run.optimizer.step
        if isinstance(run.optimizer, gac.GACOptimizer):  # what AdamW receives inside the wrapped step (after the
            # trainer's own pre-hook, the clip, which was registered first)
            run.optimizer.optimizer.register_step_pre_hook(
                lambda *_: self.inner.append(flat(p.grad for p in run.params)))

        def accumulate(r, data, samples):
            out = real_accumulate(r, data, samples)
            self.raw.append(flat(p.grad for p in r.params))
            return out

        def step(*args, **kwargs):
            self.stepped.append(flat(p.grad for p in run.params))
            self.before.append(flat(run.params))
            out = real_step(*args, **kwargs)
            self.after.append(flat(run.params))
            return out

        monkeypatch.setattr(train_module, "accumulate_gradient", accumulate)
        monkeypatch.setattr(run.optimizer, "step", step)


@pytest.mark.parametrize("method,staleness", [("sync", 0), ("naive", 2), ("gac", 2), ("tis", 2), ("m2po", 2),
                                              ("lr_scale", 2), ("gac", 0), ("bapo", 2), ("braking", 2),
                                              ("kl_target", 2), ("vcpo", 2)])
def test_every_method_runs_end_to_end(tiny_args, method, staleness):
    result = run_records(tiny_args(method=method, staleness=staleness, temperature=2.0,
                                   staleness_kind="random" if method == "tis" else "fixed"), **QUIET)
    records = result["records"]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for r in records:
        assert tuple(r) == columns("llm")
        assert math.isfinite(r["objective"]) and math.isfinite(r["grad_norm"]) and not r["nonfinite"]
        assert 0 <= r["tied_frac"] <= 1 and r["samples_drawn"] == 64
    assert records[0]["method"] == ("sync" if method == "sync" else method)
    assert all(r["behaviour_version"] == max(0, r["step"] - staleness) for r in records) or method == "tis"
    assert [math.isfinite(r["accuracy"]) for r in records] == [True, False, True, False]
    assert (records[0]["regime"] == "n/a") == (method != "gac")
    assert any(r["step_norm"] > 0 for r in records)  # it trained
    if method == "bapo":  # the adaptive bounds (float32) stay in BAPO's ranges [a⁻, b⁻], [a⁺, b⁺]
        eps = 1e-6
        assert all(0.6 - eps <= r["clip_low"] <= 0.9 + eps and 1.2 - eps <= r["clip_high"] <= 3.0 + eps
                   for r in records)
    done = result["summary"]
    assert 0.0 <= done["final_accuracy"] <= 1.0 and done["start_accuracy"] == records[0]["accuracy"]
    assert done["eval_problems"] == 12 and done["nonfinite_at"] is None  # the whole 1-digit held-out split
    assert set(done) == {"args", "method", "warm_start", "start_accuracy", "final_accuracy", "eval_problems",
                         "nonfinite_at", "collapsed_at", "collapsed", "code_fingerprint"}


@pytest.mark.parametrize("space", ["gradient", "update"])
def test_every_cosine_equals_a_direct_computation(tiny_args, monkeypatch, space):
    """cos_prev, cos_prev_step, cos_update, cos_applied and cos_halves against gradients and parameters captured
    from outside. Method gac (τ = 0) so that in the gradient space applied ≠ raw; the probe runs at steps 0 and 2."""
    args = tiny_args(method="gac", staleness=2, snr_every=2, temperature=2.0, gac_space=space)
    run = setup(args, **QUIET)
    seen = Capture(run, monkeypatch)
    records = [rl_step(run) for _ in range(args.steps)]
    assert len(seen.raw) == 2 * 4 + 2 * 2  # two updates a step, the probe's two halves at steps 0 and 2
    probes = [seen.raw[0:2], seen.raw[6:8]]
    raw = seen.raw[2:6] + seen.raw[8:]
    raw = [raw[0:2], raw[2:4], raw[4:6], raw[6:8]]
    delta = [a - b for a, b in zip(seen.after, seen.before, strict=True)]
    for t in (1, 2, 3):
        r = records[t]
        assert r["cos_prev"] == pytest.approx(np.nanmean([cos(raw[t][0], raw[t - 1][1]), cos(raw[t][1], raw[t][0])]),
                                              abs=1e-9)
        assert r["cos_prev_step"] == pytest.approx(cos(sum(raw[t]), sum(raw[t - 1])), abs=1e-6)
        assert r["cos_update"] == pytest.approx(
            np.nanmean([cos(delta[2 * t], delta[2 * t - 1]), cos(delta[2 * t + 1], delta[2 * t])]), abs=1e-9)
        if space == "update":  # the gradient the step receives is the raw one, clipped: the same cosines
            assert r["cos_applied"] == pytest.approx(r["cos_prev"], abs=1e-7)
        if space == "gradient":  # AdamW receives g' (GAC's output, clipped: a scalar, the same cosines)
            inner = [seen.inner[2 * t: 2 * t + 2] for t in range(4)]
            assert r["cos_applied"] == pytest.approx(
                np.nanmean([cos(inner[t][0], inner[t - 1][1]), cos(inner[t][1], inner[t][0])]), abs=1e-7)
    for t, halves in zip((0, 2), probes, strict=True):
        assert records[t]["cos_halves"] == pytest.approx(cos(*halves), abs=1e-9)
        assert not np.allclose(halves[0], halves[1])
    assert math.isnan(records[1]["cos_halves"]) and math.isnan(records[3]["snr_halves"])


def test_gradient_space_gac_removes_the_parallel_part_before_the_clip(tiny_args, monkeypatch):
    """In the gradient space gac.wrap projects the raw gradient, then the clip scales the result: the applied
    update has no component along the previous raw gradient."""
    args = tiny_args(method="gac", staleness=2, snr_every=1000, temperature=2.0)
    run = setup(args, **QUIET)
    seen = Capture(run, monkeypatch)
    for _ in range(3):
        rl_step(run)
    raw, applied_after = seen.raw[2:], seen.inner  # after the SNR probe's two halves at step 0
    assert len(applied_after) == len(raw) == 6  # no skip: every update stepped AdamW
    for i in range(1, len(raw)):
        if np.linalg.norm(raw[i - 1]) and np.linalg.norm(applied_after[i]):
            assert cos(applied_after[i], raw[i - 1]) <= 1e-6  # projected (τ = 0: every positive cosine acts)
            assert np.linalg.norm(applied_after[i]) <= args.max_grad_norm * (1 + 1e-5)


def test_micro_batches_give_the_gradient_of_the_whole_batch(tiny_args):
    """One update's gradient accumulated over micro-batches of 8, 16 and the whole 32 samples: equal to float
    rounding (each micro-batch's token sum is divided by the update's token count). Responses differ in length, so
    dividing each micro-batch by its own tokens would fail this."""
    run = setup(tiny_args(temperature=2.0), **QUIET)
    data = train_module.rollouts(run, run.model)
    samples = torch.arange(32)
    lengths = data["mask"][samples].sum(1)
    assert len(set(lengths.view(4, 8).sum(1).tolist())) > 1  # the micro-batches hold different token counts
    gradients, stats = [], []
    for micro in (0, 16, 8):
        run.args.micro_batch = micro
        run.optimizer.zero_grad(set_to_none=True)
        stats.append(train_module.accumulate_gradient(run, data, samples))
        gradients.append(flat(p.grad for p in run.params))
    scale = np.abs(gradients[0]).max()
    assert scale > 0
    for g, s in zip(gradients[1:], stats[1:], strict=True):
        assert np.abs(g - gradients[0]).max() <= 1e-5 * scale
        for key in ("loss", "clip_frac", "kl_behaviour", "entropy", "ess_ratio"):
            assert s[key] == pytest.approx(stats[0][key], rel=1e-5, abs=1e-7), key


def test_micro_batch_runs_match_whole_batch_runs(tiny_args):
    whole = run_records(tiny_args(temperature=2.0), **QUIET)["records"]
    micro = run_records(tiny_args(temperature=2.0, micro_batch=4), **QUIET)["records"]
    for a, b in zip(whole, micro, strict=True):
        assert a["train_accuracy"] == b["train_accuracy"]  # the same samples: same discrete outcomes
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


def test_a_step_without_gradient_reads_nan_and_keeps_the_reference(tiny_args, monkeypatch):
    """Every group tied at step 1 (all rewards 0): zero gradient, cos_prev NaN (not 0), regime keep, and step 2 is
    compared with step 0's last gradient, not with the zero vector."""
    args = tiny_args(method="gac", staleness=2, snr_every=1000, temperature=2.0, minibatches=1)
    run = setup(args, **QUIET)
    seen = Capture(run, monkeypatch)
    real = run.task.verify

    def reward(operands, responses):
        out = real(operands, responses)
        return torch.zeros_like(out) if run.step == 1 else out

    monkeypatch.setattr(type(run.task), "verify", lambda self, o, r: reward(o, r))
    records = [rl_step(run) for _ in range(3)]
    assert records[1]["grad_norm"] == 0 and math.isnan(records[1]["cos_prev"]) and records[1]["regime"] == "keep"
    assert records[1]["tied_frac"] == 1.0
    assert records[2]["cos_prev"] == pytest.approx(cos(seen.raw[4], seen.raw[2]), abs=1e-9)  # after the probe
    assert not math.isnan(records[2]["cos_prev"])


def test_dynamic_sampling_draws_until_the_groups_carry_a_gradient(tiny_args):
    plain = run_records(tiny_args(temperature=1.0, steps=3), **QUIET)["records"]
    dynamic = run_records(tiny_args(temperature=1.0, steps=3, drop_tied_groups=True, sample_attempts=6),
                          **QUIET)["records"]
    assert all(r["samples_drawn"] == 64 for r in plain)
    assert any(r["tied_frac"] > 0 for r in plain)
    for r in dynamic:
        assert 64 <= r["samples_drawn"] <= 6 * 64 and r["samples_drawn"] % 64 == 0
    assert any(r["samples_drawn"] > 64 for r in dynamic)  # it drew again
    assert sum(r["grad_norm"] for r in dynamic) > 0


def test_dynamic_sampling_keeps_the_untied_groups(tiny_args):
    run = setup(tiny_args(temperature=1.0, drop_tied_groups=True, sample_attempts=8), **QUIET)
    data = train_module.rollouts(run, run.model)
    rewards = data["reward"].view(-1, 8)
    untied = (rewards != rewards[:, :1]).any(1)
    # untied groups come first; tied ones only fill what the attempts could not
    assert not (untied[1:] & ~untied[:-1]).any()
    assert data["samples_drawn"] > 64 or untied.all()


def test_snr_probe_does_not_change_the_training_numbers(tiny_args):
    probed = run_records(tiny_args(method="gac", staleness=2, snr_every=1, temperature=2.0), **QUIET)["records"]
    plain = run_records(tiny_args(method="gac", staleness=2, snr_every=1000, temperature=2.0), **QUIET)["records"]
    for a, b in zip(probed, plain, strict=True):
        assert all(same_value(a[k], b[k]) for k in a if k not in ("cos_halves", "snr_halves")), (a, b)
    assert any(math.isfinite(r["cos_halves"]) for r in probed)


@pytest.mark.parametrize("space", ["gradient", "update", "momentum"])
def test_stopping_train_early_then_resume_gives_the_same_records(tiny_args, tmp_path, space):
    common = dict(method="gac", staleness=2, steps=6, checkpoint_every=3, snr_every=2, gac_space=space,
                  temperature=2.0)
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


class Payload:
    """An object whose unpickling runs code: what a malicious checkpoint would hold."""

    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path(__import__('os').environ['GAC_PAYLOAD']).write_text('ran')",))


def test_a_received_checkpoint_cannot_run_code(tiny_args, tmp_path, monkeypatch, capsys):
    """A run folder whose checkpoint carries a pickled payload, its checksum sidecar recomputed: --resume refuses
    it in one line and the payload never runs (torch.load with weights_only=True)."""
    out = tmp_path / "received"
    common = ["--model", str(tiny_args().model), "--size", "tiny", "--digits", "1", "--steps", "4",
              "--prompts-per-step", "2", "--group-size", "4", "--eval-problems", "8", "--no-progress",
              "--checkpoint-every", "2", "--out-dir", str(out)]
    assert main(common) == 0
    path = out / "checkpoint.pt"
    payload = torch.load(path, weights_only=True)
    payload["records"] = Payload()
    torch.save(payload, path)
    checkpoint.sidecar(path).write_text(file_sha256(path) + "\n")
    marker = tmp_path / "marker"
    monkeypatch.setenv("GAC_PAYLOAD", str(marker))
    assert main([*common, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be loaded safely" in err and len(err.splitlines()) == 1
    assert not marker.exists()


def test_summary_after_list_of_train(tiny_args):
    args = tiny_args(steps=2)
    run = setup(args, **QUIET)
    records = list(train(args, run, **QUIET))
    assert [r["step"] for r in records] == [0, 1] and run.records == records
    done = summary(run)
    assert done["nonfinite_at"] is None and 0 <= done["final_accuracy"] <= 1


def test_collapse_is_half_the_best_accuracy_so_far():
    assert collapse_step([(0, 0.3), (20, 0.4), (40, 0.21), (60, 0.19)]) == 60
    assert collapse_step([(0, 0.3), (20, 0.16), (40, 0.0)]) == 40
    assert collapse_step([(0, 0.0), (20, 0.0)]) is None  # nothing to fall from
    assert collapse_step([(0, 0.3), (20, 0.15)]) is None  # exactly half is not below it


@pytest.mark.parametrize("stop", [False, True])
def test_stop_at_collapse_ends_the_run_at_its_first_collapse_with_the_same_outcome(tiny_args, monkeypatch, stop):
    """Held-out accuracies 0.4, 0.1 (below half of 0.4: a collapse at step 2), then 0.5: the run that stops has the
    full run's first three records and the same collapse; a run that never collapses is not cut."""
    scripted = iter([0.4, 0.1, 0.5, 0.5, 0.5])
    monkeypatch.setattr(train_module, "heldout_accuracy", lambda *a: next(scripted))
    done = run_records(tiny_args(steps=6, snr_every=1000, stop_at_collapse=stop), **QUIET)
    assert [r["step"] for r in done["records"]] == ([0, 1, 2] if stop else list(range(6)))
    assert done["summary"]["collapsed_at"] == 2 and done["summary"]["collapsed"] is True
    scripted = iter([0.4, 0.3, 0.35, 0.3])
    kept = run_records(tiny_args(steps=6, snr_every=1000, stop_at_collapse=True), **QUIET)
    assert len(kept["records"]) == 6 and kept["summary"]["collapsed"] is False


def test_nonfinite_loss_names_the_step_and_is_not_checkpointed(tiny_args, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = train_module.policy_loss

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 10 else loss), stats  # step 3, update 1 (probe: 2 at step 0)

    monkeypatch.setattr(train_module, "policy_loss", poisoned)
    args = tiny_args(steps=6, checkpoint_every=2, snr_every=1000, out_dir=str(tmp_path / "nan"))
    with pytest.raises(NonFiniteError, match="step 3"):
        run_records(args, **QUIET)
    ckpt = checkpoint.load_checkpoint(tmp_path / "nan" / "checkpoint.pt")
    assert ckpt["step"] == 2 and all(torch.isfinite(v).all() for v in ckpt["model"].values())
    calls["n"] = 0
    marked = run_records(tiny_args(steps=6, snr_every=1000, on_nonfinite="mark", out_dir=str(tmp_path / "m")),
                         **QUIET)
    assert marked["records"][-1]["step"] == 3 and marked["records"][-1]["nonfinite"] is True
    assert math.isnan(marked["records"][-1]["objective"])
    assert marked["summary"]["nonfinite_at"] == 3 and marked["summary"]["collapsed"] is True


def test_wrap_is_what_steps_the_gac_runs(tiny_args):
    run = setup(tiny_args(method="gac", staleness=2, gac_space="momentum"), **QUIET)
    assert isinstance(run.optimizer, gac.GACOptimizer) and run.optimizer.cfg.space == "momentum"
    assert isinstance(run.optimizer.optimizer, torch.optim.AdamW)
    assert type(setup(tiny_args(), **QUIET).optimizer) is torch.optim.AdamW


@pytest.mark.parametrize("argv,needle", [
    (["--staleness", "-1"], "staleness must be >= 0"),
    (["--method", "dc"], "does not apply to the stale-data model"),
    (["--method", "bogus"], "unknown method"),
    (["--gac.threshold", "1.5"], "threshold must be in [0, 1)"),
    (["--tis.tis-cap", "0"], "tis_cap must be > 0"),
    (["--method", "sync", "--staleness", "4"], "method sync means staleness 0"),
    (["--minibatches", "3"], "must divide --prompts-per-step"),
    (["--model", "/nonexistent"], "no readable config.json"),
    (["--device", "gpu"], "--device must be cpu, cuda or cuda:N"),
    (["--digits", "0"], "digits must be >= 1"),
    (["--snr-every", "0"], "--snr-every must be >= 1"),
    (["--staleness", "300", "--steps", "200"], "no step would use fresh data"),
    (["--micro-batch", "7"], "--micro-batch 7 must divide"),
    (["--micro-batch", "999"], "--micro-batch 999 must divide"),
    (["--method", "m2po", "--staleness", "2", "--micro-batch", "16"], "cannot accumulate micro-batches"),
    (["--bf16"], "--bf16 needs --device cuda"),
    (["--lr", "nan"], "--lr must be a finite number > 0"),
    (["--lr", "inf"], "--lr must be a finite number > 0"),
    (["--lr", "-1e-3"], "--lr must be a finite number > 0"),
    (["--clip-eps", "nan"], "--clip-eps must be a finite number > 0"),
    (["--temperature", "inf"], "--temperature must be a finite number > 0"),
    (["--threads", "100000"], "--threads 100000 but this machine has"),
    (["--prompts-per-step", "100000000"], "samples per step; at most"),
    (["--eval-problems", "1000000000000"], "--eval-problems 1000000000000: at most"),
    (["--method", "braking", "--braking.braking-alpha", "5"], "braking_alpha must be in [0, 2]"),
    (["--method", "kl_target", "--kl-target.kl-floor", "2"], "kl_floor must be in (0, 1]"),
    (["--method", "vcpo", "--vcpo.vcpo-power", "0"], "vcpo_power must be > 0"),
])
def test_invalid_configuration_fails_with_one_line(argv, needle, capsys, monkeypatch):
    monkeypatch.setattr(train_module, "load_warm_start", lambda *a: pytest.fail("work started"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("text", ['{"vocab_size": ', '[1, 2]', '{"model_type": "qwen3"}'])
def test_model_folder_with_a_junk_config_fails_with_one_line(tmp_path, capsys, monkeypatch, text):
    (tmp_path / "config.json").write_text(text)
    monkeypatch.setattr(train_module, "load_warm_start", lambda *a: pytest.fail("work started"))
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
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom runtime.files import out_dir_lock\n"
                               "with out_dir_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)",
                               str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = [*CLI_TINY, "--model", str(tiny_checkpoint), "--steps", "2", "--out-dir", str(out)]
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
