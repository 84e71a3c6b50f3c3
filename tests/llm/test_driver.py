"""``python -m paper_figs``: one graph from the figures' units to their plots; each run is read once per command."""

import csv
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import runtime.cache
from experiments import llm, llm_figures
from paper_figs import driver, fig1_cosine, fig3_divergence
from paper_figs.driver import FigureArgs
from runtime import cache, graph

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("fig1_cosine", "fig3_divergence", "figs2_llm_signature")  # fig1 and fig3 share the testbed's sync and naive


def test_the_graph_holds_each_shared_unit_once_and_waits_for_warm_starts(tmp_path):
    args = FigureArgs(names=NAMES, profile="quick", dry_run=True, out=tmp_path)
    declared = driver.declare(args)
    names = [u.name for units in declared.values() for u in units]
    assert len(set(names)) < len(names)  # fig3 and fig5 share runs: declared twice, one unit
    cached, tasks = graph.unit_tasks([u for units in declared.values() for u in units], tmp_path / "cache")
    computed = [t.unit.name for t in tasks if t.unit is not None]
    assert cached == {} and sorted(computed) == sorted(set(names))  # each unit in one task
    by_name = {t.name: t for t in tasks}
    for task in tasks:
        waits = {b.name for b in task.unit.before} if task.unit is not None else set()
        assert set(task.after) == waits and all(by_name[w].unit is None and w.startswith("warm start") for w in waits)


def test_each_run_is_read_once_per_command_and_the_plots_read_no_cache(tiny_testbed, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    for module in (fig1_cosine, fig3_divergence):
        monkeypatch.setattr(module, "toy_units", lambda profile, device: [])  # their LLM panels only
    reads, computed = [], []
    read = cache._read
    monkeypatch.setattr(cache, "_read", lambda path: reads.append(path.name) or read(path))
    compute_run = llm.compute_run
    monkeypatch.setattr(llm, "compute_run", lambda args: computed.append(args) or compute_run(args))
    args = FigureArgs(names=("fig1_cosine", "fig3_divergence"), profile="test", out=tmp_path / "out")
    fig1 = {llm.run_unit(r).name for r in llm_figures.runs("test") if "fig1" in r.roles}
    fig3 = {llm.run_unit(r).name for r in llm_figures.runs("test") if "fig3" in r.roles}
    runs, shared = fig1 | fig3, fig1 & fig3
    assert shared and shared < fig3  # fig3 reads a part of fig1's runs

    driver.make_figures(args, jobs=1, log=lambda *a, **k: None)
    assert sorted(reads) == sorted(f"{name}.json" for name in runs)  # one look-up each, shared ones too
    assert len(computed) == len(runs)
    reads.clear()
    computed.clear()
    driver.make_figures(args, jobs=1, log=lambda *a, **k: None)
    assert sorted(reads) == sorted(f"{name}.json" for name in runs) and computed == []  # all from the cache, once
    with open(tmp_path / "out" / "fig3_divergence.csv") as handle:
        assert {row["method"] for row in csv.DictReader(handle)} == {"sync", "naive", "gac"}
    assert (tmp_path / "out" / "fig1_cosine_table.csv").stat().st_size > 0


def test_python_m_paper_figs_runs_the_graph_on_two_workers(tmp_path):
    # Through the real command line: under ``python -m`` the workers must never need to unpickle ``__main__``. One
    # figure whose graph holds every kind of task (toy units, a warm start, GRPO runs after it) shows that (fig1, the
    # cheaper one to draw of the two such figures); how the graph shares units between figures is checked in-process
    # above.
    name = "fig1_cosine"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GAC_LAB_CACHE": str(tmp_path / "cache"),
           "GAC_LAB_RUNS": str(tmp_path / "runs")}
    env.pop("GAC_LAB_JOBS", None)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "paper_figs", name, "--dry-run", "--jobs", "2", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on 2 workers" in done.stdout and f"[paper_figs] {name} done (" in done.stdout
    assert "[paper_figs] training the warm start tiny" in done.stdout  # said as it starts, not only when done
    declared = driver.declare(FigureArgs(names=(name,), profile="quick", dry_run=True, out=out))[name]
    assert {u.kind for u in declared} > {"llm_grpo"} and any(llm.warm_start_name(u.spec.args) for u in declared
                                                               if u.kind == "llm_grpo")
    stored = list((tmp_path / "cache").glob("llm_grpo-*.json"))
    assert len(stored) == len({u.name for u in declared if u.kind == "llm_grpo"})
    assert {json.loads(path.read_text())["config"]["steps"] for path in stored} == {2}  # shrunk by --dry-run
    for ext in ("png", "csv"):
        assert (out / "dry_run" / f"{name}.{ext}").stat().st_size > 0


def test_quick_figures_of_committed_data_declare_no_run_and_a_missing_file_is_one_line(tmp_path, monkeypatch, capsys):
    from paper_figs import committed, fig4_stability_region

    quick = FigureArgs(names=("fig5_llm_grpo", "figs2_llm_signature", "fig10_verdict"), profile="quick", out=tmp_path)
    for dry_run in (False, True):
        declared = driver.declare(FigureArgs(**{**quick.__dict__, "dry_run": dry_run}))
        assert declared["fig5_llm_grpo"] == [] and declared["figs2_llm_signature"] == []
        assert [u.kind for u in declared["fig10_verdict"]] == ["fig10_verdict/toys"]  # the committed LLM verdict
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(committed, "DATA", tmp_path / "data")  # no committed CSV there
    names = ("fig5_llm_grpo", "figs2_llm_signature", "fig4_stability_region")
    lines = []
    written = driver.make_figures(FigureArgs(names=names, profile="quick", out=tmp_path / "out"), jobs=1,
                                  log=lambda text, **_: lines.append(text),
                                  declared={**{name: [] for name in names[:2]},
                                            "fig4_stability_region": fig4_stability_region.runs("smoke")})
    said = capsys.readouterr().out.splitlines()
    for name in names[:2]:
        assert written[name] == [] and not list((tmp_path / "out").glob(f"{name}*"))
        (line,) = [text for text in said if text.startswith(f"{name}: no committed data")]
        assert f"python -m paper_figs {name} --profile full" in line
    assert (tmp_path / "out" / "fig4_stability_region.png").exists()  # the other figures go on
    assert lines[0].startswith("[paper_figs] 1 units, 0 cached")


def test_every_quick_small_llm_figure_shares_one_configuration_and_the_testbeds_warm_starts(tmp_path):
    declared = driver.declare(FigureArgs(names=tuple(driver.FIGURES), profile="quick", out=tmp_path))
    small = {name: [u.spec.args for u in units if isinstance(u, llm.RunUnit) and u.spec.args.size == "small"]
             for name, units in declared.items()}
    testbed = [r.args for r in llm_figures.runs("quick")]
    assert {name for name, runs in small.items() if runs} == {"fig1_cosine", "fig3_divergence", "fig9_early_warning"}
    assert {a.warm_start() for runs in small.values() for a in runs} == {a.warm_start() for a in testbed}
    assert {a.warm_seed for a in testbed} == {1, 2}

    def configuration(args):
        arm = ("method", "gac_space", "staleness", "warm_seed", "seed")
        return {k: v for k, v in dataclasses.asdict(args).items() if k not in arm}

    assert len({json.dumps(configuration(a), sort_keys=True) for runs in small.values() for a in runs}) == 1
    named = {name: {llm.run_unit(llm.Run(a, ())).name for a in runs} for name, runs in small.items()}
    assert named["fig9_early_warning"] == named["fig1_cosine"] | named["fig3_divergence"]  # nothing of its own


def test_fig5_reads_the_committed_tables_legacy_failure_column_as_nonfinite(tmp_path):
    import pandas as pd

    from paper_figs import committed, fig5_llm_grpo

    committed_table = pd.read_csv(committed.DATA / "fig5_llm_grpo.csv")
    assert "diverged" in committed_table and "nonfinite" not in committed_table  # made before the rename
    rows = committed_table.to_dict("records")
    rows[0]["diverged"] = True  # one run marked failed under the old name
    fig5_llm_grpo.draw(rows, tmp_path)
    redrawn = pd.read_csv(tmp_path / "fig5_llm_grpo.csv")
    assert "diverged" not in redrawn and redrawn.nonfinite.tolist() == [True] + [False] * (len(rows) - 1)
    table = pd.read_csv(tmp_path / "fig5_llm_grpo_table.csv")
    assert table.nonfinite.sum() == 1 and "collapsed" not in table  # the old table recorded no collapse
