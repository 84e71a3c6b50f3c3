import math

import numpy as np
import pytest
import torch

from sim.llm import grpo
from sim.llm import train as train_module
from sim.llm.train import RECORD_COLUMNS, Args, NonFiniteError, run

QUIET = dict(log=lambda *a: None)


@pytest.mark.parametrize("method,staleness", [("sync", 0), ("none", 2), ("gac", 2), ("tis", 2), ("m2po", 2),
                                              ("lr_scale", 2), ("gac", 0)])
def test_every_method_runs_end_to_end(tiny_args, method, staleness):
    result = run(tiny_args(method=method, staleness=staleness, staleness_kind="random" if method == "tis" else "fixed"),
                 **QUIET)
    records = result["records"]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for r in records:
        assert set(RECORD_COLUMNS) <= set(r)
        assert math.isfinite(r["objective"]) and math.isfinite(r["grad_norm"]) and not r["diverged"]
    assert records[0]["method"] == ("sync" if method == "sync" else method)
    assert all(r["behaviour_version"] == max(0, r["step"] - staleness) for r in records) or method == "tis"
    assert [r["accuracy"] is not None for r in records] == [True, False, True, False]
    assert 0.0 <= result["summary"]["final_accuracy"] <= 1.0


def test_logged_cosine_equals_cosine_of_saved_gradients(tiny_args):
    saved = {}
    hooks = {"after_update": lambda step, k, raw, applied: saved.__setitem__(
        (step, k), (raw.detach().double().numpy().copy(), applied.detach().double().numpy().copy()))}
    records = run(tiny_args(method="gac", staleness=2), hooks=hooks, **QUIET)["records"]

    def cos(a, b):
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    step = 2  # updates (2,0) and (2,1); their predecessors (1,1) and (2,0)
    expected = (cos(saved[2, 0][0], saved[1, 1][0]) + cos(saved[2, 1][0], saved[2, 0][0])) / 2
    assert records[step]["cos_prev"] == pytest.approx(expected, abs=1e-9)
    applied = (cos(saved[2, 0][1], saved[1, 1][0]) + cos(saved[2, 1][1], saved[2, 0][0])) / 2
    assert records[step]["cos_applied"] == pytest.approx(applied, abs=1e-9)
    # GAC with τ = 0 leaves no positive alignment with the previous raw gradient, at every update.
    order = sorted(saved)
    for prev, key in zip(order, order[1:], strict=False):
        assert cos(saved[key][1], saved[prev][0]) <= 1e-6


def test_resume_gives_the_same_records(tiny_args, tmp_path):
    common = dict(method="gac", staleness=2, steps=6, checkpoint_every=3)
    uninterrupted = run(tiny_args(out_dir=str(tmp_path / "a"), **common), **QUIET)

    def kill(step):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tiny_args(out_dir=str(tmp_path / "b"), **common), hooks={"after_step": kill}, **QUIET)
    resumed = run(tiny_args(out_dir=str(tmp_path / "b"), resume=True, **common), **QUIET)
    assert resumed["records"] == uninterrupted["records"]
    assert resumed["summary"]["final_accuracy"] == uninterrupted["summary"]["final_accuracy"]


def test_nonfinite_loss_names_the_step_and_is_not_checkpointed(tiny_args, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = grpo.policy_loss

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 7 else loss), stats  # step 3, update 1

    monkeypatch.setattr(grpo, "policy_loss", poisoned)
    args = tiny_args(steps=6, checkpoint_every=2, out_dir=str(tmp_path / "nan"))
    with pytest.raises(NonFiniteError, match="step 3"):
        run(args, **QUIET)
    ckpt = torch.load(tmp_path / "nan" / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 2 and all(torch.isfinite(v).all() for v in ckpt["policy"].values())
    calls["n"] = 0
    marked = run(tiny_args(steps=6, on_nonfinite="mark", out_dir=str(tmp_path / "mark")), **QUIET)
    assert marked["records"][-1] == {**marked["records"][-1], "step": 3, "diverged": True}
    assert marked["summary"]["diverged_at"] == 3


@pytest.mark.parametrize("argv,needle", [
    (["--staleness", "-1"], "staleness must be >= 0"),
    (["--method", "dc"], "does not apply to the stale-data model"),
    (["--method", "bogus"], "unknown method"),
    (["--gac-threshold", "1.5"], "threshold must be in [0, 1)"),
    (["--method", "sync", "--staleness", "4"], "method sync means staleness 0"),
    (["--minibatches", "3"], "must divide prompts_per_step"),
    (["--model", "/nonexistent"], "no config.json"),
])
def test_invalid_configuration_fails_with_one_line(argv, needle, capsys):
    assert train_module.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_cli_writes_records(tiny_checkpoint, tmp_path):
    out = tmp_path / "cli"
    code = train_module.main(["--size", "tiny", "--model", str(tiny_checkpoint), "--digits", "1", "--steps", "2",
                              "--prompts-per-step", "2", "--group-size", "4", "--eval-problems", "8",
                              "--progress", "false",
                              "--out-dir", str(out), "--method", "gac", "--staleness", "1"])
    assert code == 0
    header = (out / "records.csv").read_text().splitlines()[0].split(",")
    assert header[: len(RECORD_COLUMNS)] == RECORD_COLUMNS


def test_args_validate_rejects_before_work():
    with pytest.raises(ValueError, match="group_size"):
        Args(group_size=1).validate()
