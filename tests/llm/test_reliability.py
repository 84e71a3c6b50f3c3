"""The trainer's guarantees around its folders, checkpoints and warm starts (issue 22): each test fails on the code
before the fix. A refused or failed command is one line on stderr naming the path and the next step."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import sim.llm.__main__ as cli
from runtime import checkpoint
from runtime.fingerprint import code_fingerprint
from sim.llm import warmstart
from sim.llm.train import CODE, Args
from sim.llm.warmstart import WarmStartConfig

QUICK = ["--size", "tiny", "--digits", "1", "--prompts-per-step", "2", "--group-size", "4", "--eval-problems", "8",
         "--no-progress", "--method", "gac", "--staleness", "1"]
FAST_WARM = WarmStartConfig(size="tiny", digits=1, max_steps=2, eval_every=1, eval_problems=4, batch_size=4,
                            target_accuracy=0.0, ceiling_accuracy=1.0)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def run_dir(tiny_checkpoint, tmp_path):
    """A finished 4-step CLI run with a checkpoint at step 2; returns (argv, out_dir)."""
    out = tmp_path / "run"
    argv = [*QUICK, "--model", str(tiny_checkpoint), "--steps", "4", "--checkpoint-every", "2", "--out-dir", str(out)]
    assert cli.main(argv) == 0
    return argv, out


# -- resume after a source edit (item 2) -------------------------------------------------------------------
def test_resume_after_a_source_edit_is_refused_naming_the_file_unless_allowed(run_dir, capsys, monkeypatch):
    argv, out = run_dir
    saved = checkpoint.load_checkpoint(out / "checkpoint.pt")
    assert saved["code"] == checkpoint.source_hashes(CODE) and "sim/llm/train.py" in saved["code"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["code_fingerprint"] == saved["code_fingerprint"] == code_fingerprint(CODE)
    records = (out / "records.csv").read_bytes()
    edited = {**saved["code"], "sim/llm/train.py": "0" * 16}  # as if train.py had been edited since
    monkeypatch.setattr(checkpoint, "source_hashes", lambda entries: edited)
    assert cli.main([*argv, "--resume"]) == 2
    err = one_line(capsys)
    assert "code changed since" in err and "sim/llm/train.py" in err and "--allow-code-change" in err
    assert (out / "records.csv").read_bytes() == records
    assert cli.main([*argv, "--resume", "--allow-code-change"]) == 0


# -- a used out dir (item 5) -------------------------------------------------------------------------------
def test_a_fresh_run_into_a_used_out_dir_is_refused_unless_resume_or_overwrite(run_dir, capsys):
    argv, out = run_dir
    before = {name: (out / name).read_bytes() for name in ("records.csv", "summary.json", "checkpoint.pt")}
    fresh = [*argv[:-4], "--steps", "3", "--out-dir", str(out)]  # no checkpoints, fewer steps: another run
    assert cli.main(fresh) == 2
    err = one_line(capsys)
    assert f"--out-dir {out} already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert {name: (out / name).read_bytes() for name in before} == before  # nothing lost or half-written
    assert cli.main([*fresh, "--overwrite"]) == 0
    assert not (out / "checkpoint.pt").exists() and not (out / "checkpoint.pt.sha256").exists()  # no stale one
    assert len((out / "records.csv").read_text().splitlines()) == 4  # header and the 3 steps of the new run


def test_library_train_with_checkpoints_refuses_a_used_out_dir(tiny_args, tmp_path):
    from sim.llm.train import run_records

    out = tmp_path / "lib"
    run_records(tiny_args(steps=2, checkpoint_every=1, out_dir=str(out)), log=lambda *a: None)
    with pytest.raises(ValueError, match="already holds a run"):
        run_records(tiny_args(steps=2, checkpoint_every=1, out_dir=str(out)), log=lambda *a: None)


# -- checkpoint format ---------------------------------------------------------------------------------------
def test_checkpoint_is_a_plain_torch_file_with_its_checksum_beside_it(run_dir):
    _, out = run_dir
    payload = torch.load(out / "checkpoint.pt")  # no header: torch reads it directly, with its defaults
    assert payload["step"] == 2
    import hashlib
    assert (out / "checkpoint.pt.sha256").read_text().split() == [
        hashlib.sha256((out / "checkpoint.pt").read_bytes()).hexdigest()]


def test_a_kill_at_any_point_of_saving_leaves_a_loadable_checkpoint(run_dir, monkeypatch):
    """save_checkpoint writes the sidecar with the new and the old hash before the rename, and the new hash alone
    after it: a kill before the rename keeps the old checkpoint, a kill after it the new one, both loadable."""
    _, out = run_dir
    path, old = out / "checkpoint.pt", (out / "checkpoint.pt").read_bytes()

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.os, "replace", killed)  # killed before the rename
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save_checkpoint(path, {"step": 99})
    monkeypatch.undo()
    assert path.read_bytes() == old and checkpoint.load_checkpoint(path)["step"] == 2
    writes = []
    real = checkpoint.atomic_write_bytes
    monkeypatch.setattr(checkpoint, "atomic_write_bytes",
                        lambda *a: killed() if writes.append(1) or len(writes) == 2 else real(*a))
    with pytest.raises(KeyboardInterrupt):  # killed after the rename, before the sidecar's final write
        checkpoint.save_checkpoint(path, {"step": 99})
    monkeypatch.undo()
    assert checkpoint.load_checkpoint(path)["step"] == 99
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []


# -- one-line failures ---------------------------------------------------------------------------------------
def test_ctrl_c_is_one_line_naming_the_checkpoint_to_resume_from(run_dir, capsys, monkeypatch):
    from sim.llm import train

    argv, out = run_dir

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "run_records", interrupted)
    assert cli.main([*argv, "--resume", "--steps", "6"]) == 130
    err = one_line(capsys)
    assert "interrupted" in err and f"--resume to continue from {out / 'checkpoint.pt'}" in err
    assert not (out / ".lock").exists()


@pytest.mark.parametrize("code,needle", [(errno.ENOSPC, "free disk space"), (errno.EROFS, "make the folder writable")])
def test_disk_full_or_read_only_at_the_end_is_one_line_with_the_next_step(run_dir, capsys, monkeypatch, code, needle):
    argv, out = run_dir
    before = (out / "records.csv").read_bytes()

    def failing(path, data):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(cli, "atomic_write_bytes", failing)  # the summary, written at the end
    assert cli.main([*argv, "--resume", "--steps", "5"]) == 4
    err = one_line(capsys)
    assert str(out / "summary.json") in err and needle in err and "--resume" in err
    kept = (out / "records.csv").read_bytes()  # the streamed records: 2 restored, 3 made again
    assert kept.startswith(before) and len(kept.splitlines()) == 1 + 5


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_model_folder_with_missing_or_truncated_weights_is_one_line(tiny_checkpoint, tmp_path, capsys, damage):
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, model)
    weights = model / "model.safetensors"
    if damage == "missing":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert cli.main([*QUICK, "--model", str(model), "--steps", "2", "--out-dir", str(tmp_path / "out")]) == 2
    err = one_line(capsys)
    assert f"--model {model}" in err and "weights cannot be loaded" in err


@pytest.mark.parametrize("flags,method", [(["--gac.threshold", "0.3"], "naive"), (["--gac-space", "update"], "tis"),
                                          (["--tis.tis-cap=4"], "gac"), (["--bapo.rho-0", "0.5"], "sync"),
                                          (["--vcpo.vcpo-power", "1"], "naive")])
def test_a_methods_flags_given_with_another_method_are_refused(tmp_path, capsys, monkeypatch, flags, method):
    from sim.llm import train

    monkeypatch.setattr(train, "load_warm_start", lambda *a: pytest.fail("work started"))
    argv = ["--size", "tiny", "--method", method, *flags, "--out-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    err = one_line(capsys)
    assert flags[0].split("=")[0] in err and f"--method is {method}" in err


# -- warm starts (item 3 and the probe list) -----------------------------------------------------------------
@pytest.fixture
def warm_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(warmstart, "RUNS_DIR", tmp_path / "runs")
    trained = []
    real = warmstart.train_warm_start
    monkeypatch.setattr(warmstart, "train_warm_start", lambda *a, **k: trained.append(1) or real(*a, **k))
    return tmp_path / "runs" / "warmstart", trained


def test_warm_start_is_keyed_by_the_warm_start_code(warm_dir, monkeypatch):
    _, trained = warm_dir
    first, _ = warmstart.warm_start(FAST_WARM, log=lambda *a: None)
    assert warmstart.warm_start(FAST_WARM, log=lambda *a: None)[0] == first and len(trained) == 1  # cached
    fingerprints = {warmstart.WARM_START_CODE: "edited0000000000"}
    monkeypatch.setattr(warmstart, "code_fingerprint", lambda entries: fingerprints[entries])  # model.py edited
    second, _ = warmstart.warm_start(FAST_WARM, log=lambda *a: None)
    assert second != first and len(trained) == 2


def test_warm_start_files_follow_the_umask_and_a_killed_trainers_folder_is_trained_again(warm_dir):
    folder, trained = warm_dir
    previous = os.umask(0o022)
    try:
        unfinished = warmstart.warm_start_path(FAST_WARM)  # a trainer killed while saving: no warmstart.json yet
        unfinished.mkdir(parents=True)
        (unfinished / "model.safetensors").write_bytes(b"half")
        path, _ = warmstart.warm_start(FAST_WARM, log=lambda *a: None)
    finally:
        os.umask(previous)
    assert path == unfinished and len(trained) == 1 and warmstart.load_warm_start(FAST_WARM)[0] is not None
    assert sorted(p.name for p in folder.iterdir()) == [path.name]  # no lock file left
    assert oct(path.stat().st_mode & 0o777) == "0o755"
    assert {oct(p.stat().st_mode & 0o777) for p in path.iterdir()} == {"0o644"}


def test_a_corrupt_cached_warm_start_is_one_line_naming_its_folder(warm_dir, tiny_checkpoint, tmp_path, capsys):
    args = Args(size="tiny", digits=1, steps=1, prompts_per_step=2, group_size=4, eval_problems=8, progress=False,
                out_dir=str(tmp_path / "out"))
    path = warmstart.warm_start_path(args.warm_start())
    shutil.copytree(tiny_checkpoint, path)  # a cached warm start whose weights were then damaged
    (path / "warmstart.json").write_text(json.dumps({"info": {"steps": 1}}))
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    argv = ["--size", "tiny", "--digits", "1", "--steps", "1", "--prompts-per-step", "2", "--group-size", "4",
            "--eval-problems", "8", "--no-progress", "--out-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    err = one_line(capsys)
    assert f"cached warm start {path} is damaged" in err and "delete that folder" in err
    (path / "warmstart.json").write_text("{trunc")
    assert cli.main(argv) == 2
    assert f"cached warm start {path} is damaged" in one_line(capsys)
    assert not Path(args.out_dir, "records.csv").exists()


# -- issue 35.11: the research extra, flags named, records streamed ---------------------------------------------
def test_without_the_research_extra_the_cli_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setitem(sys.modules, "tyro", None)  # as if tyro were not installed
    assert cli.main(["--size", "tiny", "--out-dir", str(tmp_path / "out")]) == 2
    err = one_line(capsys)
    assert "tyro" in err and "pip install -e '.[research]'" in err
    without_safetensors = ("import sys, runpy; sys.modules['safetensors'] = None; "
                           "runpy.run_module('sim.llm', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", without_safetensors], capture_output=True, text=True,
                          cwd=Path(cli.__file__).resolve().parents[2])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "safetensors" in done.stderr and "pip install -e '.[research]'" in done.stderr


@pytest.mark.parametrize("flags,named", [(["--steps", "-5"], "--steps"), (["--eval-every", "0"], "--eval-every"),
                                         (["--lr", "0"], "--lr"), (["--clip-eps", "-1"], "--clip-eps"),
                                         (["--threads", "0"], "--threads")])
def test_a_bad_number_is_one_line_naming_its_flag(tmp_path, capsys, monkeypatch, flags, named):
    from sim.llm import train

    monkeypatch.setattr(train, "load_warm_start", lambda *a: pytest.fail("work started"))
    assert cli.main([*QUICK, *flags, "--out-dir", str(tmp_path / "out")]) == 2
    err = one_line(capsys)
    assert err.startswith(f"error: {named} must be") and flags[1] in err


def test_records_are_streamed_so_a_killed_run_keeps_its_steps_with_their_types(run_dir, tmp_path, capsys,
                                                                                monkeypatch):
    from runtime.files import read_records
    from sim.llm import train

    argv, finished = run_dir
    real_step, made = train.rl_step, []

    def killed_at_step_3(state):
        if len(made) == 2:
            raise KeyboardInterrupt  # as a kill after two steps
        made.append(1)
        return real_step(state)

    monkeypatch.setattr(train, "rl_step", killed_at_step_3)
    out = tmp_path / "killed"
    fresh = [*argv[:argv.index("--checkpoint-every")], "--out-dir", str(out)]  # the same run, no checkpoint
    assert cli.main(fresh) == 130
    assert f"{out / 'records.csv'} holds the steps made so far" in one_line(capsys)
    whole = (finished / "records.csv").read_text().splitlines()
    assert (out / "records.csv").read_text().splitlines() == whole[:3]  # header + the first two steps, as uninterrupted
    rows = read_records(out / "records.csv")
    assert [r["step"] for r in rows] == [0, 1] and all(r["nonfinite"] is False for r in rows)
    assert all(isinstance(r["objective"], float) and isinstance(r["regime"], str) for r in rows)
