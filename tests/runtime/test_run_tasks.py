"""``runtime.graph.run_tasks``: every task once, each after the tasks it waits for, longest chain first."""

import os
from pathlib import Path

import pytest

from runtime.graph import Task, priorities, run_tasks


def _chain(tmp_path: Path) -> list[Task]:
    """a → b → c move one file along (a rename fails if its source is not there yet), d and e stand alone."""
    a, b, c = (tmp_path / n for n in "abc")
    return [Task("d", str.upper, ("d",), cost=5.0),
            Task("c", os.rename, (b, c), cost=1.0, after=("b",)),
            Task("b", os.rename, (a, b), cost=1.0, after=("a",)),
            Task("a", Path.write_text, (a, "x"), cost=4.0),
            Task("e", str.upper, ("e",), cost=0.5)]


def test_priorities_are_the_longest_chain_to_the_end(tmp_path):
    assert priorities(_chain(tmp_path)) == {"a": 6.0, "b": 2.0, "c": 1.0, "d": 5.0, "e": 0.5}


def test_one_job_runs_longest_chain_first_and_respects_waits(tmp_path):
    order = []
    results = run_tasks(_chain(tmp_path), 1, lambda task, result: order.append(task.name))
    assert order == ["a", "d", "b", "c", "e"]  # a (chain 6) before d (5); b and c only once a is done
    assert results["d"] == "D" and (tmp_path / "c").read_text() == "x"


def test_two_workers_give_the_same_results(tmp_path):
    done = []
    results = run_tasks(_chain(tmp_path), 2, lambda task, result: done.append(task.name))
    assert sorted(done) == ["a", "b", "c", "d", "e"] and results["e"] == "E"
    assert done.index("a") < done.index("b") < done.index("c")
    assert (tmp_path / "c").read_text() == "x"  # os.rename would have raised had b or c started early


@pytest.mark.parametrize("jobs", [1, 2])
def test_each_task_is_reported_started_before_it_is_done(tmp_path, jobs):
    events = []
    run_tasks(_chain(tmp_path), jobs, lambda task, result: events.append(("done", task.name)),
              on_start=lambda task: events.append(("start", task.name)))
    assert sorted(events) == sorted([(kind, n) for n in "abcde" for kind in ("start", "done")])
    assert all(events.index(("start", n)) < events.index(("done", n)) for n in "abcde")
    assert events.index(("done", "a")) < events.index(("start", "b"))  # b starts only after a


def test_a_failing_task_stops_the_rest(tmp_path):
    tasks = [Task("bad", os.rename, (tmp_path / "absent", tmp_path / "x"), cost=9.0),
             Task("later", str.upper, ("y",), after=("bad",))]
    ran = []
    with pytest.raises(FileNotFoundError):
        run_tasks(tasks, 2, lambda task, result: ran.append(task.name))
    assert ran == []


@pytest.mark.parametrize("tasks, message", [
    ([Task("a", str.upper, ("a",), after=("b",))], "not among the tasks"),
    ([Task("a", str.upper, ("a",), after=("b",)), Task("b", str.upper, ("b",), after=("a",))], "cycle"),
    ([Task("a", str.upper, ("a",)), Task("a", str.lower, ("a",))], "unique"),
])
def test_bad_graphs_are_refused_before_any_work(tasks, message):
    with pytest.raises(ValueError, match=message):
        run_tasks(tasks, 1)


def test_the_timeline_has_one_row_per_task_with_its_estimate_and_times(tmp_path, monkeypatch):
    import csv
    import math

    from runtime import cache, graph

    file = tmp_path / "timeline.csv"
    monkeypatch.setenv("GAC_LAB_TIMELINE", str(file))
    units = [cache.unit("sqrt", math.sqrt, x, cost=cost) for x, cost in ((4.0, 2.0), (9.0, 7.5))]
    graph.compute(units, 1, folder=tmp_path / "cache", consumers={"plot": (units, len)}, log=lambda *a, **k: None)
    rows = list(csv.reader(file.open()))
    assert sorted((r[0], r[1], float(r[2]), r[3]) for r in rows) == sorted(
        [("runs", u.name, u.cost, "0") for u in units] + [("runs", "plot", graph.PLOT_SECONDS, "1")])
    times = [(float(r[4]), float(r[5])) for r in rows]
    assert all(0 <= start <= done for start, done in times)
    assert [r[1] for r in rows][-1] == "plot" and times[-1][0] >= max(done for _, done in times[:-1])


def test_a_task_here_starts_once_ready_while_the_workers_are_busy():
    """A plot waits for its one short task, not for every longer task queued before it (which then left the workers
    idle while the plots drew one after another at the end)."""
    import time

    started = []
    tasks = [Task("first", str.upper, ("x",), cost=20.0), Task("plot", str.upper, ("p",), cost=0.1, after=("first",),
                                                                here=True),
             *[Task(name, time.sleep, (0.5,), cost=10.0) for name in ("b", "c", "d", "e")]]
    run_tasks(tasks, 2, on_start=lambda task: started.append(task.name))
    assert started[:2] == ["first", "b"]  # the longest chains first
    assert started.index("plot") < started.index("d")  # before the workers are free for the queued tasks
