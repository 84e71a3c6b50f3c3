"""The experiments' command lines refuse a bad value in one line (exit 2) before any run: a device that is not cpu or
cuda[:N] (or cuda without a CUDA device), a choice outside its list, a count that is not a whole number, an empty
output path (issue 51, items 7 and 8)."""

from __future__ import annotations

import pytest

from experiments import signature, staleness_lr, verdict, verdict_toys


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
    (["--profile", "bad"], "--profile must be one of quick, full, v2, gpu, got 'bad'"),
    (["--stage", "bad"], "--stage must be one of tuning, reporting, controls, all, got 'bad'"),
    (["--jobs", "1.5"], "--jobs must be a whole number of runs at once >= 1, got '1.5'"),
    (["--executor", "x"], "--executor must be one of local, ray, got 'x'"),
    (["--out", ""], "--out is empty; give the table's CSV path"),
])
def test_verdict_refuses_bad_values_in_one_line_before_any_run(argv, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(verdict, "verdict", lambda *a, **k: pytest.fail("a run started"))
    out = [] if "--out" in argv else ["--out", str(tmp_path / "v.csv")]
    assert named in refused(verdict.main, [*argv, *out], capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("main", "argv", "named"), [
    (staleness_lr.main, ["--out", ""], "--out is empty; give the table's CSV path"),
    (staleness_lr.main, ["--out", "x.csv", "--profile", "bad"], "--profile must be one of quick, full, got 'bad'"),
    (staleness_lr.main, ["--out", "x.csv", "--scales", "cubic"], "--scales must be one of quadratic, "),
    (verdict_toys.main, ["--out", ""], "--out is empty; give the table's CSV path"),
    (verdict_toys.main, ["--out", "x.csv", "--profile", "bad"], "--profile must be one of quick, full, got 'bad'"),
    (signature.main, ["gac-table", ""], "OUT is empty; give the table's CSV path"),
    (signature.main, ["gac-tabel", "x.csv"], "the command must be one of gac-table, got 'gac-tabel'"),
    (signature.main, ["gac-table", "table.txt"], "OUT must name a .csv file"),
])
def test_the_other_experiment_commands_refuse_bad_values_in_one_line(main, argv, named, monkeypatch, capsys):
    for module, name in ((staleness_lr, "law_tables"), (verdict_toys, "toy_verdict_rows"), (signature, "gac_runs")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("a run started"))
    assert named in refused(main, argv, capsys)


@pytest.mark.parametrize(("module", "argv", "named"), [
    ("llm_figures", [""], "OUT is empty; give the CSV path"),
    ("llm_figures", ["x.csv", "--profile", "bad"], "--profile must be one of quick, full, got 'bad'"),
    ("llm_figures", ["x.csv", "--jobs", "1.5"], "--jobs must be a whole number of worker processes >= 1"),
    ("warm_starts", [""], "OUT is empty; give the CSV path"),
])
def test_llm_table_commands_parse_in_one_line(module, argv, named, capsys):
    """What their ``__main__`` parses with (runtime.cli.parse on their Cli)."""
    import importlib

    from runtime.cli import parse

    cli = importlib.import_module(f"experiments.{module}").Cli
    assert named in refused(lambda a: parse(cli, a, prog=f"python -m experiments.{module}"), argv, capsys)
