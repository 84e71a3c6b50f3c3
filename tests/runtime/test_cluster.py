"""``--executor ray`` (runtime/cluster.py): a figure computed on a local 2-CPU Ray cluster writes the same CSVs,
byte for byte, as the local executor; the cluster's preconditions fail in one line before any work; the graph's
progress line counts the estimated work."""

import importlib.util
import json
import os
import sys
import types
from dataclasses import replace

import pytest

from paper_figs import fig1_cosine
from paper_figs.__main__ import parse_args
from runtime import cache, cluster, graph
from runtime.graph import Progress, Task, run_tasks, task_family
from tests.figures import make_figure

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="Ray is not installed (the optional extra: pip install -e '.[cluster]')")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One local Ray cluster of 2 CPUs for the module (its start-up takes tens of seconds), warm starts in a
    temporary folder (the workers inherit the environment of the process that starts the cluster)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GAC_LAB_RUNS", str(tmp_path_factory.mktemp("runs")))
        shared_cache = tmp_path_factory.mktemp("probe-cache")
        patch.setenv("GAC_LAB_CACHE", str(shared_cache))  # the workers' own run cache: the one the probe checks
        try:
            stack = cluster.connect(None, shared_cache, cpus=2, log=lambda *a, **k: None)
            c = stack.__enter__()
        except ValueError as err:
            # Ray waits a fixed time for its node's processes to register (connect tries twice): on a machine
            # loaded far past its cores they may miss it. That is the machine, not this code (any other failure to
            # start fails the test).
            if "timed out during startup" not in str(err):
                raise
            pytest.skip(f"Ray could not start a local cluster on this loaded machine: {err}")
        try:
            yield c
        finally:
            stack.__exit__(None, None, None)


@needs_ray
@pytest.mark.slow
def test_a_figure_on_ray_writes_the_same_csvs_as_the_local_executor(ray_cluster, tmp_path, monkeypatch):
    units = fig1_cosine.toy_units("smoke")
    assert len({u.name for u in units}) >= 2  # more units than one worker: the cluster shares them out
    outputs = {}
    for name, executor in (("local", None), ("ray", ray_cluster.executor)):
        folder = tmp_path / f"cache-{name}"  # each executor from an empty cache: both compute every unit
        monkeypatch.setattr(cache, "CACHE_DIR", folder)
        make_figure(fig1_cosine.NAME, "smoke", tmp_path / name, jobs=2, units=units, executor=executor)
        # the units were computed and stored there (on Ray: by its workers, into the folder they were handed)
        stored = sorted(cache.cache_path(u.kind, u.key, folder).name for u in units)
        assert sorted(p.name for p in folder.glob("*.json")) == stored
        outputs[name] = {p.name: p.read_bytes() for p in sorted((tmp_path / name).glob("*.csv"))}
    assert outputs["ray"] and outputs["ray"] == outputs["local"]
    assert ray_cluster.cpus == 2


@needs_ray
@pytest.mark.slow
def test_ray_tasks_run_in_the_cluster_and_a_failure_stops_the_graph(ray_cluster, tmp_path):
    results = run_tasks([Task(f"pid {i}", os.getpid) for i in range(3)], 2, executor=ray_cluster.executor)
    assert os.getpid() not in results.values()  # computed by Ray's workers, not here
    ran = []
    with pytest.raises(FileNotFoundError):
        run_tasks([Task("bad", os.rename, (tmp_path / "absent", tmp_path / "x"), cost=9.0),
                   Task("later", str.upper, ("y",), after=("bad",))], 2, lambda task, result: ran.append(task.name),
                  executor=ray_cluster.executor)
    assert ran == []


@needs_ray
@pytest.mark.slow
def test_grpo_runs_of_a_connected_process_go_to_the_cluster_with_the_same_records(ray_cluster, tiny_checkpoint,
                                                                                  monkeypatch):
    # What `python -m experiments.verdict --executor ray` does: its runs go to the cluster, not to a local pool.
    from experiments import llm
    from sim.llm.train import Args

    base = Args(size="tiny", model=str(tiny_checkpoint), digits=1, steps=2, prompts_per_step=4, group_size=4,
                eval_every=1, eval_problems=8, snr_every=1, lr=3e-3, threads=1, progress=False)
    runs = [llm.Run(replace(base, method=method, staleness=s, seed=seed), ("test",))
            for method, s, seed in (("naive", 0, 0), ("naive", 4, 1), ("gac", 4, 0))]
    executors = []
    real_run_tasks = graph.run_tasks
    monkeypatch.setattr(graph, "run_tasks", lambda tasks, jobs, report, executor=None, on_start=None: (
        executors.append(executor), real_run_tasks(tasks, jobs, report, executor, on_start=on_start))[1])
    sent = llm.results_of(runs, log=lambda *a: None)
    assert len(executors) == 1 and executors[0] is not None  # the cluster's executor, not the local pool
    for (run, result) in sent:
        here = llm.compute_run(run.args)  # the same run alone, in this process
        assert json.dumps(result["records"]) == json.dumps(here["records"])
        assert result["summary"]["final_accuracy"] == here["summary"]["final_accuracy"]


def test_without_ray_the_executor_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as where it is not installed
    with pytest.raises(ValueError, match=r"needs Ray, which is not installed: pip install -e '\.\[cluster\]'") as err:
        with cluster.connect():
            pass
    assert "\n" not in str(err.value)


def test_address_without_the_ray_executor_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["fig4_stability_region", "--address", "auto"])
    assert parse_args(["fig4_stability_region", "--executor", "ray", "--address", "auto"]).address == "auto"


FOLDERS = {"run cache": "/shared/cache", "warm-start": "/shared/runs"}


def _report(**changes):
    return {"node": "node-2", "code": "c0ffee" * 4, "runs": "/shared/runs",
            "seen": {"run cache": True, "warm-start": True}, **changes}


@pytest.mark.parametrize("report, message", [
    (_report(code="beef" * 6), "node node-2 runs other code than this checkout"),
    (_report(seen={"run cache": False, "warm-start": True}), "cannot read the run cache folder /shared/cache"),
    (_report(seen={"run cache": True, "warm-start": False}), "cannot read the warm-start folder /shared/runs"),
    (_report(runs="/home/me/.cache/gac-lab/runs"), "keeps warm starts in /home/me/.cache/gac-lab/runs"),
])
def test_a_node_that_does_not_share_code_or_folders_is_refused_in_one_line(report, message):
    cluster.check_nodes([_report()], "c0ffee" * 4, FOLDERS, "/shared/runs")  # a node that agrees passes
    with pytest.raises(ValueError, match=message) as err:
        cluster.check_nodes([_report(), report], "c0ffee" * 4, FOLDERS, "/shared/runs")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("connected, cpus", [(False, 8), (True, 1)])
def test_runs_go_to_the_local_pool_unless_connected_to_a_cluster_with_a_cpu_to_spare(connected, cpus, monkeypatch):
    # a stand-in for the ray module: not connected, or connected to a cluster whose one CPU the asking task holds
    fake = types.SimpleNamespace(is_initialized=lambda: connected, cluster_resources=lambda: {"CPU": float(cpus)})
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert cluster.current() is None
    monkeypatch.setitem(sys.modules, "ray", None)  # not installed
    assert cluster.current() is None


def test_a_worker_with_other_code_refuses_the_task():
    assert cluster.checked_call(cache.code_fingerprint(), str.upper, "x") == "X"
    with pytest.raises(RuntimeError, match="runs other code than the driver"):
        cluster.checked_call("0" * 64, str.upper, "x")


def test_progress_scales_each_familys_work_left_by_its_own_speed_so_far():
    # Two GRPO runs, a toy grid and a plot (run here, counted with its estimate). The grid runs at its estimate, the
    # runs twice as fast: each family's work left goes at its own speed, a family not seen yet at the middle one's.
    now = [0.0]
    tasks = [Task("llm_grpo-a", str.upper, cost=30.0), Task("llm_grpo-b", str.upper, cost=10.0),
             Task("grid/x-c", str.upper, cost=10.0), Task("fig", str.upper, cost=4.0, here=True)]
    progress = Progress(tasks, jobs=2, clock=lambda: now[0])
    assert progress.total == 54.0 and progress.eta_s() == 27.0  # nothing done yet: 54 estimated core-s on 2 workers
    progress.started(tasks[0])
    progress.started(tasks[2])
    now[0] = 10.0
    progress.done(tasks[2])  # the grid: speed 1, the only family seen, so the runs' and the plot's speed too
    assert progress.eta_s() == pytest.approx((40 + 4 - 10) / 2)  # run a has had 10 of its 30
    now[0] = 15.0
    progress.done(tasks[0])  # 30 in 15: the runs' speed is 2; the plot takes the upper middle of {1, 2}
    assert progress.eta_s() == pytest.approx((10 / 2 + 4 / 2) / 2)
    assert progress.line() == "15 s elapsed, 74% of the estimated work, ~4 s left"
    progress.done(tasks[3])
    assert progress.eta_s() == pytest.approx(10 / 2)  # one task left: one worker
    progress.done(tasks[1])
    assert progress.eta_s() == 0.0


def test_a_tasks_family_is_its_units_kind_a_warm_start_or_a_plot():
    assert task_family("llm_grpo-1e6dab1e21e5441d", here=False) == "llm_grpo"
    assert task_family("fig8_tuned/quadratic-76be15e769935eee", here=False) == "fig8_tuned"
    assert task_family("warm start WarmStartConfig(size='small', digits=2, seed=2)", here=False) == "warm"
    assert task_family("fig3_divergence", here=True) == "plot"


def test_progress_counts_the_tasks_still_running_beside_the_first_one_done():
    # Two 90 s warm starts then ten 10 s runs on 2 workers, every task at the same speed (87 s per 90 estimated):
    # when the first warm start is done the other is about done too, and 48.3 s are left (10 runs, 2 at a time).
    now = [0.0]
    tasks = [Task(f"warm {i}", str.upper, cost=90.0) for i in (1, 2)] + [Task(f"run {i}", str.upper, cost=10.0)
                                                                          for i in range(10)]
    progress = Progress(tasks, jobs=2, clock=lambda: now[0])
    elapsed_only = Progress(tasks, jobs=2, clock=lambda: now[0])  # without start times: the speed of elapsed time
    progress.started(tasks[0])
    progress.started(tasks[1])
    now[0] = 87.0
    progress.done(tasks[0])
    elapsed_only.done(tasks[0])
    assert progress.eta_s() == pytest.approx(10 * 10 * 87 / 90 / 2)
    assert elapsed_only.eta_s() == pytest.approx(190 * 87 / 90)  # several times too long here
    for task in tasks[1:]:  # the rest, one after another on one worker from here on: the last leaves nothing
        progress.started(task)
        now[0] += task.cost * 87 / 90
        progress.done(task)
    assert progress.eta_s() == 0.0 and progress.left == 0


def test_progress_by_counts_when_every_task_costs_the_same():
    # Six tasks of the default cost on 2 workers, each taking 10 on the clock: four left at t = 10 (two rounds, 20
    # left), and at t = 15 the two running ones are half done (15 left). With both workers busy the plain rule,
    # elapsed time / work done × work left, reads the same.
    now = [0.0]
    tasks = [Task(f"t{i}", str.upper) for i in range(6)]
    progress = Progress(tasks, jobs=2, clock=lambda: now[0])
    elapsed_only = Progress(tasks, jobs=2, clock=lambda: now[0])
    for task in tasks[:2]:
        progress.started(task)
    now[0] = 10.0
    for task in tasks[:2]:
        progress.done(task)
        elapsed_only.done(task)
        progress.started(tasks[tasks.index(task) + 2])
    assert progress.eta_s() == pytest.approx(20.0) and elapsed_only.eta_s() == pytest.approx(10 / 2 * 4)
    now[0] = 15.0
    assert progress.eta_s() == pytest.approx(15.0)
    assert progress.line() == "15 s elapsed, 33% of the estimated work, ~15 s left"


def test_a_warm_start_to_train_says_so_when_it_starts(tmp_path, monkeypatch):
    from experiments import llm
    from sim.llm.train import Args

    args = Args(size="small", digits=2, warm_seed=3)
    monkeypatch.setattr(llm, "warm_start_path", lambda config: tmp_path / "absent")
    task = llm.warm_start_task(args)
    estimate = llm.WARM_START_SECONDS["small"]
    assert task.started == f"training the warm start small 2-digit, warm seed 3 (estimate {estimate:.0f} s)"
    assert task.done == "warm start small 2-digit, warm seed 3 trained"
    monkeypatch.setattr(llm, "warm_start_path", lambda config: tmp_path)  # on disk
    assert llm.warm_start_task(args).started is None


@pytest.mark.parametrize("argv, message", [
    (["--jobs", "0"], "--jobs must be a whole number of runs at once >= 1, got '0'"),
    (["--address", "auto"], "--address names a Ray cluster: give it with --executor ray"),
])
def test_the_verdict_command_refuses_bad_jobs_and_a_lone_address_before_any_run(argv, message, tmp_path, monkeypatch,
                                                                                capsys):
    from experiments import verdict

    monkeypatch.setattr(verdict, "verdict", lambda *a, **k: pytest.fail("a run started"))
    try:  # the command line's parser refuses a bad --jobs itself (SystemExit 2), main the rest (returns 2)
        code = verdict.main([*argv, "--out", str(tmp_path / "v.csv")])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_the_verdict_command_hands_its_jobs_to_the_protocol(tmp_path, monkeypatch):
    from experiments import verdict

    calls = []
    row = {"arm": "sync", "final_accuracy": 0.5}
    monkeypatch.setattr(verdict, "verdict", lambda *a, **k: calls.append(k) or {"tuning": [], "runs": [row],
                                                                                "table": [row]})
    monkeypatch.setattr(verdict, "control_differences", lambda rows: [])
    monkeypatch.setattr(verdict, "drift_correlation", lambda rows: (0.0, 0))
    assert verdict.main(["--jobs", "3", "--out", str(tmp_path / "v.csv")]) == 0
    assert calls == [{"jobs": 3}]


def test_progress_is_not_stretched_by_one_task_far_over_its_estimate():
    # Two warm starts estimated at 100 and ten runs at 10 (clock units), every task at one estimated unit per unit
    # of time but the second warm start, retried, which lasts until t = 300 while the other worker does the first and
    # six runs. Then four runs are left: 20 units on 2 workers. Work done over worker time (260 / 460) would read 35.
    now = [0.0]
    warm = [Task(f"warm {i}", str.upper, cost=100.0) for i in (1, 2)]
    runs = [Task(f"run {i}", str.upper, cost=10.0) for i in range(10)]
    progress = Progress(warm + runs, jobs=2, clock=lambda: now[0])
    for task in warm:
        progress.started(task)
    now[0] = 100.0
    progress.done(warm[0])
    for i in range(6):  # six runs one after another on the free worker, while the retried warm start goes on
        progress.started(runs[i])
        now[0] += 10.0
        progress.done(runs[i])
    now[0] = 300.0
    progress.done(warm[1])
    assert progress.eta_s() == pytest.approx(4 * 10 / 2)  # four runs of 10 units on 2 workers


def test_a_task_past_its_estimate_counts_the_rest_of_its_current_try():
    # One warm start of 100 units and one run of 10 at one unit per unit of time (the run, done, sets the speed).
    # At t = 250 the warm start is in its third try, 50 into it: 50 are left, where the estimate alone says none.
    now = [0.0]
    warm, run = Task("warm", str.upper, cost=100.0), Task("run", str.upper, cost=10.0)
    progress = Progress([warm, run], jobs=2, clock=lambda: now[0])
    progress.started(warm)
    progress.started(run)
    now[0] = 10.0
    progress.done(run)
    assert progress.eta_s() == pytest.approx(90.0)  # the first try: its estimate less the time it has had
    now[0] = 250.0
    assert progress.eta_s() == pytest.approx(50.0)
