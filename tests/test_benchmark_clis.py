"""The benchmarks' command lines (``runtime.cli.parse``: tyro over a checked config): a bad value exits 2 with one line
naming it, before any timing; ``gac_overhead --baseline`` times another gac package with that package's own code."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import cli_help, gac_overhead, llm_speed, sim_throughput


@pytest.mark.parametrize(("module", "argv", "named"), [
    (gac_overhead, ["--repeats", "0"], "--repeats must be >= 1"),
    (gac_overhead, ["--sizes", "-1"], "must be > 0"),
    (gac_overhead, ["--threads", "-1"], "--threads must be >= 0"),
    (gac_overhead, ["--device", "tpu"], "--device must be cpu or cuda"),
    (gac_overhead, ["--baseline", "/nonexistent"], "no gac/ package"),
    (llm_speed, ["--rounds", "0"], "--rounds must be >= 1"),
    (llm_speed, ["--configs", "huge"], "--configs: unknown huge"),
    (llm_speed, ["--baseline", "/nonexistent"], "not a checkout of this package"),
    (sim_throughput, ["--seeds", "0"], "--seeds must be >= 1"),
    (cli_help, ["--rounds", "0"], "--rounds must be >= 1"),
    (cli_help, ["--baseline", "/nonexistent"], "not a checkout of this package"),
])
def test_bad_value_exits_2_before_any_work(module, argv, named, capsys, monkeypatch):
    if module in (llm_speed, cli_help):  # their work is child processes
        monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: pytest.fail("work started"))
    else:
        import torch

        monkeypatch.setattr(torch, "set_num_threads", lambda n: pytest.fail("work started"))
    with pytest.raises(SystemExit) as exit_info:
        module.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("module", [gac_overhead, llm_speed, sim_throughput])
def test_help_lists_the_options(module, capsys):
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert "--" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "named"), [
    (["--keep", ""], "--keep is empty"),
    (["--keep", "A_FILE"], "is a file, not a folder"),
])
def test_pipeline_bad_value_is_one_line_before_any_work(argv, named, tmp_path, capsys, monkeypatch):
    from benchmarks import pipeline

    (tmp_path / "a_file").write_text("not a folder")
    argv = [str(tmp_path / "a_file") if a == "A_FILE" else a for a in argv]
    monkeypatch.setattr(pipeline.subprocess, "run", lambda *a, **k: pytest.fail("work started"))
    monkeypatch.setattr(pipeline.tempfile, "TemporaryDirectory", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(SystemExit) as exit_info:
        pipeline.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1, err


def test_pipeline_parses_names_and_keep(tmp_path):
    from benchmarks.pipeline import PipelineArgs
    from runtime.cli import parse

    args = parse(PipelineArgs, ["fig7_bound", "fig4_stability_region", "--keep", str(tmp_path)],
                 prog="pipeline")
    assert args == PipelineArgs(names=("fig7_bound", "fig4_stability_region"), keep=tmp_path)
    assert parse(PipelineArgs, [], prog="pipeline") == PipelineArgs(names=(), keep=None)


def test_a_baseline_package_steps_with_its_own_code(tmp_path):
    """``gac_overhead --baseline DIR``: the gac package there (here a copy of this one) is timed with its own modules,
    though it imports its names on first use, after the working tree's are back under the name gac."""
    import shutil

    import torch

    import gac

    shutil.copytree(Path(gac.__file__).parent, tmp_path / "gac", ignore=shutil.ignore_patterns("__pycache__"))
    baseline = gac_overhead.load_baseline(str(tmp_path))
    params = [torch.nn.Parameter(torch.randn(4))]
    opt = baseline.wrap(torch.optim.AdamW(params, lr=1e-3), baseline.GACConfig(threshold=0.3))
    params[0].grad = torch.randn(4)
    opt.step()
    assert Path(type(opt).__init__.__code__.co_filename).is_relative_to(tmp_path)
    assert not Path(gac.wrap.__code__.co_filename).is_relative_to(tmp_path)


def test_a_baseline_row_is_timed_in_the_same_rounds_as_its_twin(monkeypatch):
    """``measure_alternately`` with a ``--baseline`` twin: fused AdamW, this gac's step and the baseline's in turn
    every round after 3 warm-up steps each; ratios over the same AdamW samples; the paired difference round by round;
    ``contenders`` groups each baseline row with the same step of this gac (the fused and compiled project rows).
    Scripted step times drift with the round (as load does) and the baseline is 0.3 of that round's AdamW step slower
    in every round: the per-round difference is 0.3 only when each round's three steps are taken together and divided
    by that round's AdamW step."""
    import torch

    now, before = gac_overhead.Contender("now"), gac_overhead.Contender("before", library=object())
    order, rounds = [], {}

    def step(contender, opt, grads, device, sign):
        name = "adamw" if contender is None else contender.name
        order.append(name)
        count = rounds[name] = rounds.get(name, -1) + 1
        if count < 3:
            return 100.0, 100.0  # warm-up: not counted
        adamw = 1.0 + 0.5 * (count - 3)  # the load drifts round by round
        return {"adamw": adamw, "now": 2 * adamw, "before": 2.3 * adamw}[name], 1.0

    monkeypatch.setattr(gac_overhead, "build", lambda contender, start: (contender, None))
    monkeypatch.setattr(gac_overhead, "time_step", step)
    got_now, got_before = gac_overhead.measure_alternately([now, before], [torch.zeros(1)], [], 5)
    assert order[9:] == ["adamw", "now", "before"] * 5
    assert got_now["ratio"] == pytest.approx(2.0) and got_before["ratio"] == pytest.approx(2.3)
    assert got_before["paired"] == pytest.approx((0.3, 0.3, 0.3)) and "paired" not in got_now
    baseline = object()
    pairs = [group for group in gac_overhead.contenders(baseline) if len(group) == 2]
    assert [(a.name, b.name) for a, b in pairs] == [
        (f"{space} project{path}", f"before: {space} project{path}")
        for space in gac_overhead.SPACES for path in ("", ", compiled")]
    assert all(a.library is None and b.library is baseline and (a.space, a.regime, a.compiled, a.fused_path)
               == (b.space, b.regime, b.compiled, b.fused_path) for a, b in pairs)
    assert all(len(group) == 1 for group in gac_overhead.contenders())  # no baseline: every row alone
