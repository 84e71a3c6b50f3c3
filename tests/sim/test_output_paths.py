"""Output folders are checked before any compute: a file, a path under a file, an unwritable folder, an empty
value are one-line errors (paper_figs --out, the trainer's --out-dir, and the shared ``check_output_dir``)."""

import os
import sys
from pathlib import Path

import pytest

import paper_figs.__main__ as figs_cli
from runtime.files import check_output_dir

# /proc refuses new files even to root, so this case is meaningful where the tests run as root (chmod is not).
UNWRITABLE = Path("/proc/gac-lab-out")
needs_proc = pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc")


def _bad_outs(tmp_path: Path) -> list[tuple[str, str]]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    cases = [(str(a_file), "is a file, not a folder"), (str(a_file / "sub"), "which is a file, not a folder")]
    if Path("/proc/self").exists():
        cases.append((str(UNWRITABLE), "is not writable"))
    return cases


def test_paper_figs_refuses_bad_out_before_any_figure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(figs_cli, "make_figures", lambda *a, **k: pytest.fail("a figure ran"))
    for out, needle in [*_bad_outs(tmp_path), ("", "--out is empty")]:
        with pytest.raises(SystemExit) as exit_info:
            figs_cli.main(["fig7_bound", "--out", out])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, (out, err)
    with pytest.raises(SystemExit):
        figs_cli.main(["fig7_bound", "--out="])
    assert "--out is empty" in capsys.readouterr().err


def test_paper_figs_accepts_a_new_folder_and_creates_nothing(tmp_path):
    out = tmp_path / "new" / "figs"
    assert figs_cli.parse_args(["fig7_bound", "--out", str(out)]).out == out
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []  # the probe file is gone too


def test_trainer_refuses_bad_out_dir_before_any_work(tmp_path, monkeypatch, capsys):
    from sim.llm import train
    from sim.llm.__main__ import main

    monkeypatch.setattr(train, "load_warm_start", lambda *a: pytest.fail("work started"))
    for out, needle in [*_bad_outs(tmp_path), ("", "--out-dir is empty")]:
        assert main(["--size", "tiny", "--steps", "1", "--out-dir", out]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, (out, err)


def test_trainer_with_checkpoints_checks_out_dir_in_validate(tmp_path):
    from sim.llm.train import Args

    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        Args(size="tiny", checkpoint_every=1, out_dir=str(tmp_path / "a_file")).validate()
    Args(size="tiny", out_dir=str(tmp_path / "a_file")).validate()  # no checkpoints: the folder is not written


@needs_proc
def test_check_output_dir_probes_by_writing_not_by_mode_bits():
    with pytest.raises(ValueError, match="not writable"):
        check_output_dir(UNWRITABLE, "--out")


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root ignores mode bits")
def test_check_output_dir_refuses_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="not writable"):
            check_output_dir(folder / "out", "--out")
    finally:
        folder.chmod(0o755)


def _disk_full_write(monkeypatch):
    """Every write through ``os.fdopen`` (the atomic writer's) fails as a full disk does: ENOSPC, no file name."""
    import errno

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def fileno(self):
            return self.handle.fileno()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))


def test_a_full_disk_names_the_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    from runtime.files import atomic_write_bytes

    _disk_full_write(monkeypatch)
    with pytest.raises(OSError) as error:
        atomic_write_bytes(tmp_path / "table.csv", b"x")
    assert error.value.filename == str(tmp_path / "table.csv") and "No space left" in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_paper_figs_on_a_full_disk_is_one_line_naming_the_path(tmp_path, monkeypatch, capsys):
    from runtime.files import atomic_write_bytes

    def make_figures(args, jobs, declared=None, **options):  # options: executor, progress
        atomic_write_bytes(args.out / "fig7_bound.csv", b"x")  # as a plot writes its CSV

    monkeypatch.setattr(figs_cli, "make_figures", make_figures)
    monkeypatch.setattr(figs_cli, "declare", lambda args: {})
    _disk_full_write(monkeypatch)
    assert figs_cli.main(["fig7_bound", "--out", str(tmp_path)]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'fig7_bound.csv'}: No space left on device" in err, err


def _fake_verdict(monkeypatch, calls):
    from experiments import verdict

    row = {"arm": "sync", "final_accuracy": 0.5}
    monkeypatch.setattr(verdict, "verdict", lambda *a, **k: calls.append(a) or {"tuning": [], "runs": [row],
                                                                                "table": [row]})
    monkeypatch.setattr(verdict, "control_differences", lambda rows: [])
    monkeypatch.setattr(verdict, "drift_correlation", lambda rows: (0.0, 0))
    return verdict


@needs_proc
def test_verdict_refuses_an_unwritable_out_before_any_run(monkeypatch, capsys):
    calls = []
    verdict = _fake_verdict(monkeypatch, calls)
    assert verdict.main(["--out", "/proc/verdict.csv"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "/proc/verdict.csv" in err and "not writable" in err, err
    assert calls == []  # no run started


def test_verdict_never_overwrites_committed_data_by_default(tmp_path, monkeypatch, capsys):
    import subprocess

    calls = []
    verdict = _fake_verdict(monkeypatch, calls)
    assert verdict.default_out("quick").parent.name == "out"  # paper_figs/out, not docs/data
    assert verdict.default_out("full") == Path(verdict.__file__).resolve().parents[1] / "docs/data/verdict_llm.csv"
    data = tmp_path / "repo" / "docs" / "data"
    data.mkdir(parents=True)
    (data / "verdict_llm_runs.csv").write_text("committed\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path / "repo", check=True)
    subprocess.run(["git", "add", "docs"], cwd=tmp_path / "repo", check=True)
    out = data / "verdict_llm.csv"
    assert verdict.main(["--out", str(out)]) == 2  # a quick run would overwrite the committed runs file beside it
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "verdict_llm_runs.csv" in err and "--force" in err, err
    assert calls == [] and (data / "verdict_llm_runs.csv").read_text() == "committed\n"
    assert verdict.main(["--out", str(out), "--force"]) == 0
    assert calls and out.exists() and (data / "verdict_llm_runs.csv").read_text() != "committed\n"
    other = tmp_path / "quick.csv"
    assert verdict.main(["--out", str(other)]) == 0 and other.exists()  # an untracked file needs no --force


def test_verdict_on_a_full_disk_is_one_line_naming_the_path(tmp_path, monkeypatch, capsys):
    verdict = _fake_verdict(monkeypatch, [])
    _disk_full_write(monkeypatch)
    assert verdict.main(["--out", str(tmp_path / "v.csv")]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'v_runs.csv'}: No space left on device" in err, err


def test_verdict_toys_quick_refuses_the_committed_table(monkeypatch, capsys):
    from experiments import verdict_toys

    committed = Path(verdict_toys.__file__).resolve().parents[1] / "docs" / "data" / "verdict_toys.csv"
    if not committed.exists():
        pytest.skip("not a source checkout")
    before = committed.read_bytes()
    monkeypatch.setattr(verdict_toys, "toy_verdict_rows", lambda profile: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as exit_info:
        verdict_toys.main(["--out", str(committed)])
    assert exit_info.value.code == 2 and "--force" in capsys.readouterr().err
    assert committed.read_bytes() == before
