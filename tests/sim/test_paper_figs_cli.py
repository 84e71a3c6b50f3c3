"""paper_figs' command line: a dry run never writes over real figures, every LLM figure (fig8 too) honours it,
the job count follows the cores and the memory (--jobs and GAC_LAB_JOBS checked and capped), and Ctrl-C is one line."""

from __future__ import annotations

import pytest

import paper_figs.__main__ as figs_cli
from paper_figs import driver, fig8_tuned
from runtime import graph


def fake_figures(written: list):
    def make_figures(args, jobs, log=print, declared=None, **options):  # options: executor, progress
        for name in args.names:
            path = args.out / f"{name}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"dry")
            written.append(path)

    return make_figures


def test_dry_run_writes_beside_the_real_figures_never_over_them(tmp_path, monkeypatch):
    real = tmp_path / "fig7_bound.png"
    real.write_bytes(b"real figure")
    written = []
    monkeypatch.setattr(figs_cli, "make_figures", fake_figures(written))
    assert figs_cli.main(["fig7_bound", "--dry-run", "--out", str(tmp_path)]) == 0
    assert written == [tmp_path / "dry_run" / "fig7_bound.png"]
    assert real.read_bytes() == b"real figure"


@pytest.mark.parametrize("name, profile", [("fig1_cosine", "quick"), ("fig3_divergence", "quick"),
                                           ("fig5_llm_grpo", "full"), ("fig8_tuned", "quick"),
                                           ("fig9_early_warning", "quick"), ("figs2_llm_signature", "full")])
def test_every_llm_figure_shrinks_its_runs_under_a_dry_run(name, profile):
    # fig5's and figs2's quick profiles run nothing (they draw committed data): their full runs are shrunk
    runs = [u.spec for u in driver.module(name).runs(profile, "cpu", dry_run=True) if u.kind == "llm_grpo"]
    assert runs and {(r.args.size, r.args.steps, r.args.device) for r in runs} == {("tiny", 2, "cpu")}


@pytest.mark.parametrize("name", ["fig1_cosine", "fig3_divergence", "fig9_early_warning"])
def test_a_dry_run_draws_the_toy_panels_at_the_smoke_sizes(name):
    toys = {u.name for u in driver.module(name).runs("quick", "cpu", dry_run=True) if u.kind != "llm_grpo"}
    smoke = {u.name for figure in ("fig1_cosine", "fig3_divergence") for u in driver.module(figure).toy_units("smoke")}
    assert toys and toys <= smoke
    assert not toys & {u.name for u in driver.module(name).runs("quick", "cpu") if u.kind != "llm_grpo"}


def test_fig8_runs_are_the_profiles_own_without_a_dry_run():
    assert {u.spec.args.steps for u in fig8_tuned.runs("quick", "cpu") if u.kind == "llm_grpo"} == {40}


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_gac_lab_jobs_that_is_not_a_count_is_one_line(value, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GAC_LAB_JOBS", value)
    monkeypatch.setattr(figs_cli, "make_figures", lambda *a, **k: pytest.fail("a figure ran"))
    with pytest.raises(SystemExit) as exit_info:
        figs_cli.main(["fig7_bound", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert f"GAC_LAB_JOBS must be a whole number of worker processes >= 1, got {value!r}" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["0", "-2"])
def test_jobs_option_that_is_not_a_count_is_one_line(value, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(figs_cli, "make_figures", lambda *a, **k: pytest.fail("a figure ran"))
    with pytest.raises(SystemExit) as exit_info:
        figs_cli.main(["fig7_bound", "--jobs", value, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--jobs must be a whole number of worker processes >= 1" in err and len(err.splitlines()) == 1


def test_default_jobs_are_the_cores_and_at_most_cuda_workers_on_a_gpu(monkeypatch):
    monkeypatch.delenv("GAC_LAB_JOBS", raising=False)
    monkeypatch.setattr(graph.os, "cpu_count", lambda: 16)
    assert graph.default_jobs() == 16 and graph.default_jobs(device="cuda") == graph.CUDA_WORKERS
    monkeypatch.setattr(graph.os, "cpu_count", lambda: 2)
    assert graph.default_jobs() == 2 and graph.default_jobs(device="cuda:0") == 2


def test_jobs_beyond_the_cores_are_warned_and_capped(monkeypatch):
    monkeypatch.setattr(graph.os, "cpu_count", lambda: 16)
    monkeypatch.setenv("GAC_LAB_JOBS", "40")
    with pytest.warns(RuntimeWarning, match=r"GAC_LAB_JOBS=40 .*16 cores.*using 16"):
        assert graph.default_jobs() == 16
    with pytest.warns(RuntimeWarning, match=r"--jobs 8 .*using 4"):
        assert graph.default_jobs(jobs=8, device="cuda") == 4  # --jobs wins over GAC_LAB_JOBS, within the same limit
    monkeypatch.setenv("GAC_LAB_JOBS", "12")
    assert graph.default_jobs() == 12  # within the machine: as asked
    assert graph.default_jobs(jobs=3) == 3


def test_ctrl_c_in_paper_figs_is_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(figs_cli, "make_figures", interrupted)
    assert figs_cli.main(["fig7_bound", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip()
    assert "interrupted" in err and str(tmp_path) in err and "rerun the same command" in err
    assert len(err.splitlines()) == 1


def test_a_refused_warm_start_is_one_line(tmp_path, monkeypatch, capsys):
    from sim.llm.warmstart import WarmStartRejected

    def refused(*args, **kwargs):  # what a worker's refused warm start raises in the parent
        raise WarmStartRejected("warm start small d3 seed 0 refused: held-out accuracy 0.004 in 1 attempt")

    monkeypatch.setattr(figs_cli, "make_figures", refused)
    assert figs_cli.main(["fig7_bound", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err.strip()
    assert "small d3 seed 0 refused" in err and str(tmp_path) in err and "RESULTS.md" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(("argv", "named"), [
    ([], "give figure names or 'all'"),
    (["fig7_bound", "--profile", "gpu"], "--profile gpu applies to the LLM figures only"),
    (["all", "--profile", "gpu", "--dry-run"], "--profile gpu applies to the LLM figures only"),
    (["fig5_llm_grpo", "--profile", "gpu"], "--profile gpu needs --device cuda"),
    (["fig7_bound", "--address", "auto"], "--address names a Ray cluster"),
    (["nonsense"], "a figure name must be one of fig1_cosine, "),  # the value and the choices, not a framed box
    (["fig7_bound", "--profile", "bad"], "--profile must be one of quick, full, gpu, got 'bad'"),
    (["fig7_bound", "--jobs", "1.5"], "--jobs must be a whole number of worker processes >= 1, got '1.5'"),
    (["fig7_bound", "--executor", "x"], "--executor must be one of local, ray, got 'x'"),
    (["fig7_bound", "--device", "tpu"], "--device must be cpu, cuda or cuda:N, got 'tpu'"),
])
def test_figure_args_checks_are_one_line_before_any_work(argv, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(figs_cli, "declare", lambda *a, **k: pytest.fail("runs were declared"))
    monkeypatch.setattr(figs_cli, "make_figures", lambda *a, **k: pytest.fail("a figure ran"))
    with pytest.raises(SystemExit) as exit_info:
        figs_cli.main([*argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_figure_args_built_in_python_are_checked_the_same_way():
    with pytest.raises(ValueError, match="--jobs must be a whole number"):
        driver.FigureArgs(names=("fig7_bound",), jobs=0)
    with pytest.raises(ValueError, match="--profile gpu needs --device cuda"):
        driver.FigureArgs(names=("fig5_llm_grpo",), profile="gpu")
    assert driver.FigureArgs(names=("fig5_llm_grpo",), profile="gpu", dry_run=True).profile == "gpu"


def test_cuda_without_a_cuda_device_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(figs_cli, "declare", lambda *a, **k: pytest.fail("runs were declared"))
    with pytest.raises(SystemExit) as exit_info:
        figs_cli.main(["fig7_bound", "--device", "cuda", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--device cuda requested but torch sees no CUDA device" in err and len(err.splitlines()) == 1


def test_gac_lab_force_recomputes_as_documented(tmp_path, monkeypatch):
    """runtime.paths documents GAC_LAB_FORCE=1 as "recompute cached results"; paper_figs used to ignore it."""
    assert not figs_cli.parse_args(["fig7_bound", "--out", str(tmp_path)]).force
    monkeypatch.setenv("GAC_LAB_FORCE", "1")
    assert figs_cli.parse_args(["fig7_bound", "--out", str(tmp_path)]).force
