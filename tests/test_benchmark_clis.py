"""The benchmarks' command lines (tyro over a checked config): a bad value exits 2, naming it, before any timing."""

from __future__ import annotations

import pytest

from benchmarks import gac_overhead, llm_speed, sim_throughput


@pytest.mark.parametrize(("module", "argv", "named"), [
    (gac_overhead, ["--repeats", "0"], "--repeats must be >= 1"),
    (gac_overhead, ["--spaces", "-1"], "must be > 0"),
    (gac_overhead, ["--spaces", "10", "--baseline", "/nonexistent"], "no gac/ package"),
    (llm_speed, ["--rounds", "0"], "--rounds must be >= 1"),
    (llm_speed, ["--batched", "-2"], "--batched must be >= 0"),
    (llm_speed, ["--size", "huge"], "huge"),
    (sim_throughput, ["--seeds", "0"], "--seeds must be >= 1"),
])
def test_bad_value_exits_2_before_any_work(module, argv, named, capsys, monkeypatch):
    monkeypatch.setattr(module.torch, "set_num_threads", lambda n: pytest.fail("work started"))
    with pytest.raises(SystemExit) as exit_info:
        module.main(argv)
    assert exit_info.value.code == 2
    assert named in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("module", [gac_overhead, llm_speed, sim_throughput])
def test_help_lists_the_options(module, capsys):
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert "--" in capsys.readouterr().out
