"""The experiments' command lines refuse a bad value in one line (exit 2) before any run: a device that is not cpu or
cuda[:N] (or cuda without a CUDA device) (issue 51, item 7)."""

from __future__ import annotations

import pytest

from experiments import verdict


def refused(main, argv, capsys) -> str:
    """The one line ``main(argv)`` printed when it refused with exit status 2."""
    try:
        status = main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(("argv", "named"), [
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:N, got 'tpu'"),
    (["--device", "cuda"], "--device cuda requested but torch sees no CUDA device"),
])
def test_verdict_refuses_bad_values_in_one_line_before_any_run(argv, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(verdict, "verdict", lambda *a, **k: pytest.fail("a run started"))
    out = [] if "--out" in argv else ["--out", str(tmp_path / "v.csv")]
    assert named in refused(verdict.main, [*argv, *out], capsys)
    assert list(tmp_path.iterdir()) == []
