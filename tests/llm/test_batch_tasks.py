"""The experiments layer trains GRPO runs of one shape in batches: which runs share a batch, that a batch task
stores each run under its own key the result the run gives alone (with a mutation that swaps two runs' results),
and the driver's graph around batches (each unit computed once, figures after their batches, cached runs skipped)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import experiments.cache
from experiments import cache, llm
from paper_figs import driver
from sim.llm.batched import batch_key
from sim.llm.train import Args
from sim.stabilizers import gac_config
from tests.llm.test_batched import record_differences

SUMMARY_OF_THE_BATCH = ("wall_s", "batch_runs")
"""Summary fields that say how a run was computed (its share of the batch's wall time, the batch's size)."""


def unit(args: Args) -> cache.Unit:
    return llm.run_unit(llm.Run(args, ()))


# -- (a) grouping ----------------------------------------------------------------------------------------
def test_runs_of_one_shape_share_batches_of_at_most_the_limit_in_order():
    base = Args(size="tiny", digits=1, method="naive", staleness=2, steps=40)
    same = [replace(base, seed=seed, lr=lr, staleness=s) for seed in range(4) for lr, s in ((1e-3, 2), (3e-4, 8),
                                                                                         (1e-4, 0))]  # 12 runs
    other = [replace(base, method="gac"), replace(base, digits=2), replace(base, group_size=4),
             replace(base, minibatches=1)]
    small = [replace(base, size="small", seed=seed) for seed in range(3)]
    units = [unit(a) for a in [*same[:5], *other, *same[5:], *small]]
    groups = llm.batches(units)
    assert sorted(u.name for batch in groups for u in batch) == sorted(u.name for u in units)  # every unit once
    assert [len(batch) for batch in groups] == [8, 1, 1, 1, 1, 4, 1, 1, 1]
    assert [u.spec.args for u in groups[0] + groups[5]] == same  # in the order given, split at 8
    assert [batch[0].spec.args for batch in groups[1:5]] == other  # another size, shape or method kind: alone
    assert [batch[0].spec.args for batch in groups[6:]] == small  # small runs on the CPU: one per task
    for batch in groups:
        assert len({batch_key(u.spec.args) for u in batch}) == 1


def test_gac_thresholds_share_a_batch_and_a_cuda_batch_holds_sixteen():
    base = Args(size="tiny", digits=1, method="gac", staleness=4, gac=gac_config(threshold=0.0))
    taus = [unit(replace(base, gac=gac_config(threshold=t), seed=k)) for k, t in enumerate((0.0, 0.05, 0.1))]
    assert [len(b) for b in llm.batches(taus)] == [3]  # GAC's fixed τ is a per-run number
    cuda = [unit(replace(base, device="cuda", size=size, seed=k)) for size in ("gpu", "small") for k in range(20)]
    assert [len(b) for b in llm.batches(cuda)] == [16, 4, 16, 4]  # on a device every size is batched
    assert llm.batch_limit(replace(base, size="small")) == 1 and llm.batch_limit(base) == llm.CPU_BATCH_RUNS["tiny"]


def test_gpu_profile_runs_form_batches_of_one_shape_and_few_workers_share_the_device(monkeypatch):
    units = [u for name in driver.LLM_FIGURES for u in driver.module(name).runs("gpu", "cuda")]
    distinct = list({u.name: u for u in units if u.kind == "llm_grpo"}.values())
    groups = llm.batches(distinct)
    assert all(len(b) <= llm.CUDA_BATCH_RUNS for b in groups) and len(groups) < len(distinct) / 2
    monkeypatch.setattr(llm.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(llm, "available_memory", lambda: 128 * llm.GIB)
    monkeypatch.delenv("GAC_LAB_JOBS", raising=False)
    assert llm.default_jobs("gpu", device="cuda") == llm.CUDA_WORKERS < llm.default_jobs("gpu") == 16
    with pytest.warns(RuntimeWarning, match="workers per CUDA device"):
        assert llm.default_jobs("gpu", 8, device="cuda") == llm.CUDA_WORKERS


# -- (b) a batch task stores each run's own result ------------------------------------------------------
def alone_vs_batched(alone: dict, batched: dict) -> list:
    """What differs between a run's result alone and the result its batch stored: records (decisions equal, numbers
    within 1e-5 relative, as tests/llm/test_batched.py), and every summary field but SUMMARY_OF_THE_BATCH."""
    alone = json.loads(json.dumps(alone))  # as the cache stores it
    differences = record_differences(alone["records"], batched["records"], rel=1e-5)
    summaries = [{k: v for k, v in r["summary"].items() if k not in SUMMARY_OF_THE_BATCH} for r in (alone, batched)]
    return differences + ([("summary", *summaries)] if summaries[0] != summaries[1] else [])


def batch_args(tiny_args) -> list[Args]:
    return [tiny_args(steps=2, method="gac", gac=gac_config(threshold=tau), staleness=s, seed=seed, lr=lr)
            for seed, s, lr, tau in ((0, 1, 3e-3, 0.0), (1, 2, 1e-3, 0.05), (2, 0, 3e-3, 0.1))]


def test_a_batch_task_caches_each_run_as_compute_run_gives_it_alone(tiny_args, tmp_path):
    runs = batch_args(tiny_args)
    units = tuple(unit(a) for a in runs)
    together = llm.compute_batch(units, tmp_path)
    assert len(list(tmp_path.glob("llm_grpo-*.json"))) == 3
    for u, args in zip(units, runs, strict=True):
        stored = cache.lookup(u.kind, u.key, tmp_path)
        assert stored == together[u.name] and stored["summary"]["batch_runs"] == 3
        assert stored["summary"]["wall_s"] > 0
        alone = llm.compute_run(args)
        assert alone["summary"]["batch_runs"] == 1
        assert alone_vs_batched(alone, stored) == []
        assert stored["records"][0]["seed"] == args.seed and stored["summary"]["args"]["lr"] == args.lr


def test_the_comparison_catches_a_batch_that_stores_one_runs_result_under_anothers_key(tiny_args, tmp_path,
                                                                                        monkeypatch):
    runs = batch_args(tiny_args)
    units = tuple(unit(a) for a in runs)
    train_batch = llm.train_batch
    monkeypatch.setattr(llm, "train_batch", lambda runs, log: train_batch(runs, log)[::-1])  # A's under C's key
    together = llm.compute_batch(units, tmp_path)
    alone = llm.compute_run(runs[0])
    assert alone_vs_batched(alone, together[units[0].name]) != []
    assert alone_vs_batched(alone, together[units[2].name]) == []  # where run A's result went


# -- (c) the driver's graph around batches ------------------------------------------------------------
def test_the_driver_trains_each_batch_once_plots_after_it_and_skips_cached_runs(tiny_args, tmp_path, monkeypatch):
    monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path / "unused")  # everything goes to the folder given
    folder = tmp_path / "cache"
    events: list = []
    train_batch, compute_run = llm.train_batch, llm.compute_run
    monkeypatch.setattr(llm, "train_batch", lambda runs, log: events.append(("batch", [a.seed for a in runs]))
                        or train_batch(runs, log))
    monkeypatch.setattr(llm, "compute_run", lambda args: events.append(("alone", args.seed)) or compute_run(args))
    naive = [tiny_args(steps=2, method="naive", staleness=1, seed=seed) for seed in range(3)]
    units = [unit(a) for a in [*naive, tiny_args(steps=2, method="tis", staleness=1, seed=7)]]  # tis: alone

    def figure(name):
        return lambda items: events.append(("plot", name, [item[1]["records"][0]["seed"] for item in items]))

    lines: list[str] = []
    log = lambda *a, **k: lines.append(" ".join(map(str, a)))  # noqa: E731
    figures = {"naive_only": (units[:3], figure("naive_only")), "every": (units, figure("every"))}
    values = driver.compute([*units, *units[:2]], jobs=1, folder=folder, figures=figures, log=log)
    assert set(values) == {u.name for u in units} and [values[u.name]["records"][0]["seed"] for u in units] == [0, 1, 2,
                                                                                                             7]
    batch_at = events.index(("batch", [0, 1, 2]))
    assert events.count(("batch", [0, 1, 2])) == 1 and events.count(("alone", 7)) == 1 and len(events) == 4
    assert events.index(("plot", "naive_only", [0, 1, 2])) > batch_at
    assert events.index(("plot", "every", [0, 1, 2, 7])) > max(batch_at, events.index(("alone", 7)))
    progress = [line for line in lines if line.startswith("[paper_figs unit")]
    assert [line.split("]")[0] for line in progress] == [f"[paper_figs unit {i}/4" for i in range(1, 5)]
    assert sorted(line.split("seed=")[1].split(":")[0] for line in progress) == ["0", "1", "2", "7"]
    assert "(3 of them in 1 batch tasks)" in lines[0]

    # Two of the batch's runs lost from the cache: one batch of those two, nothing else trained.
    for u in units[:2]:
        cache.cache_path(u.kind, u.key, folder).unlink()
    events.clear()
    again = driver.compute(units, jobs=1, folder=folder, figures={"every": (units, figure("every"))}, log=log)
    assert events == [("batch", [0, 1]), ("plot", "every", [0, 1, 2, 7])]
    assert alone_vs_batched(values[units[0].name], again[units[0].name]) == []


def test_unit_tasks_batch_the_missing_runs_after_every_warm_start_they_need(tmp_path):
    base = Args(size="tiny", digits=1, method="naive", staleness=1, steps=2)
    runs = [replace(base, seed=seed, warm_seed=seed % 2) for seed in range(4)]  # two warm starts
    units = [unit(a) for a in runs]
    cache.store(units[3].kind, units[3].key, {"summary": {}}, tmp_path)  # the fourth is cached
    found, tasks = llm.unit_tasks(units, tmp_path)
    assert list(found) == [units[3].name]
    warm = {t.name for t in tasks if isinstance(t.spec, llm.WarmStart)}
    batch = [t for t in tasks if isinstance(t.spec, llm.Batch)]
    assert len(warm) == 2 and len(tasks) == 3 and len(batch) == 1
    assert [u.name for u in llm.units_of(batch[0])] == [u.name for u in units[:3]]
    assert set(batch[0].after) == warm == {w for u in units[:3] for w in u.after}


def test_each_task_spec_hands_every_unit_its_own_result(tmp_path):
    """The typed task specs (``llm.TaskSpec``): a batch, a lone unit, a warm start and a figure each name the units
    their task computes and pair each with its result; GRPO units are told apart by their class, not their kind."""
    base = Args(size="tiny", digits=1, method="naive", staleness=1, steps=2)
    runs = [unit(replace(base, seed=seed)) for seed in range(3)]
    toy = cache.unit("toy-rows", len, "abc")
    _, tasks = llm.unit_tasks([*runs, toy], tmp_path)
    assert all(isinstance(u, llm.RunUnit) for u in runs) and not isinstance(toy, llm.RunUnit)
    fake = {u.name: f"result of {u.name}" for u in [*runs, toy]}
    handed = {}
    for task in tasks:  # what each task's function returns: a batch its results by unit name, a unit its own
        result = ({u.name: fake[u.name] for u in task.spec.units} if isinstance(task.spec, llm.Batch)
                  else fake[task.spec.units[0].name] if task.spec.units else None)
        for u, value in task.spec.unit_results(result):
            assert u.name not in handed
            handed[u.name] = value
    assert handed == fake
    lines = {type(t.spec).__name__: t.spec.done_line("1/2", 3.0) for t in tasks}  # one warm start, one batch, the toy
    assert lines == {"WarmStart": "warm start tiny 1-digit trained (1/2)", "Batch": None, "Unit": None}
    figure = driver.Figure("fig7_bound")
    assert figure.units == () and figure.unit_results(None) == []
    assert figure.done_line("", 12.4) == "fig7_bound done at 12 s"
