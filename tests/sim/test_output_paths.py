"""Output folders are checked before any compute: a file, a path under a file, an unwritable folder, an empty
value are one-line errors (paper_figs --out, the trainer's --out-dir, and the shared ``check_output_dir``)."""

import os
import sys
from pathlib import Path

import pytest

import paper_figs.__main__ as figs_cli
from sim.record import check_output_dir

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

    monkeypatch.setattr(train, "setup_batch", lambda *a: pytest.fail("work started"))
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
