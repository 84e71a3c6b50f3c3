"""The figure run cache: computed once per configuration, recomputed on change or when forced."""

import dataclasses
import json
import math
import warnings

import pytest

from runtime import cache, fingerprint, graph, paths


def cached(kind, key, compute):
    """``compute()``'s result through the cache: the unit (kind, key) on the graph's road, in this process
    (``GAC_LAB_FORCE`` recomputes, as the studies' command lines pass it)."""
    item = cache.Unit(kind, key, compute)
    return graph.compute([item], 1, paths.force_recompute(), log=lambda *a, **k: None)[item.name]


def test_cached_computes_once_per_config_and_force_recomputes(monkeypatch):
    calls = []

    def compute():
        calls.append(1)
        return [{"step": 0, "cos_prev": float("nan"), "seeds": (1, 2)}]

    first = cached("unit", {"a": 1}, compute)
    second = cached("unit", {"a": 1}, compute)
    assert len(calls) == 1
    assert first[0]["seeds"] == second[0]["seeds"] == [1, 2]  # same types whether fresh or cached
    assert math.isnan(second[0]["cos_prev"])
    cached("unit", {"a": 2}, compute)
    assert len(calls) == 2
    monkeypatch.setenv("GAC_LAB_FORCE", "1")
    cached("unit", {"a": 1}, compute)
    assert len(calls) == 3


def test_units_are_keyed_by_the_code_that_computes_them_not_the_plots():
    assert cache.SOURCE_DIRS == ("gac", "sim", "theory", "experiments")
    item = cache.unit("unit", len, "x")
    assert item.key["code"] == fingerprint.code_fingerprint(cache.SOURCE_DIRS, cache.ROOT)
    assert item.name == cache.unit("unit", len, "x").name != cache.unit("unit", len, "xy").name


def test_compute_unit_stores_in_the_folder_it_is_given(tmp_path):
    item = cache.unit("unit", len, "xyz")
    assert cache.compute_unit(item, tmp_path / "elsewhere") == 3
    assert item.lookup(tmp_path / "elsewhere") == 3 and item.lookup() is None  # not the default folder


def test_an_argument_json_cannot_hold_is_keyed_by_its_repr():
    """A ``Setting`` argument keys the unit by every field (its repr): another step size is another unit."""
    from sim.grid import setting

    a, b = cache.unit("unit", len, [setting("gac", 2, 0.1)]), cache.unit("unit", len, [setting("gac", 2, 0.2)])
    assert a.key["args"] == [[repr(setting("gac", 2, 0.1))]] and a.name != b.name
    assert cache.unit("unit", len, (1, 2.5, None)).key["args"] == [[1, 2.5, None]]  # JSON keys as before
    json.dumps(a.key)  # storable


def test_an_llm_run_is_keyed_by_its_arguments_less_the_excluded_ones(monkeypatch):
    from experiments import llm
    from sim.llm.train import Args

    monkeypatch.setattr(cache, "code_fingerprint", lambda *a, **k: "fp")
    args = Args(size="tiny", steps=1)
    run = llm.run_unit(llm.Run(args, ()))
    key = {**{k: v for k, v in dataclasses.asdict(args).items() if k not in llm.KEY_EXCLUDE}, "code": "fp"}
    assert (run.kind, run.key) == ("llm_grpo", key)


def test_lookup_never_computes():
    assert cache.lookup("unit-lookup", {"a": 1}) is None
    cached("unit-lookup", {"a": 1}, lambda: {"x": 1})
    assert cache.lookup("unit-lookup", {"a": 1}) == {"x": 1}


def test_fingerprint_follows_source_edits_in_the_given_folders(tmp_path):
    for folder in ("gac", "sim", "paper_figs"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text("x = 1\n")
    before = cache.code_fingerprint(("gac", "sim"), tmp_path)
    (tmp_path / "paper_figs" / "m.py").write_text("x = 2\n")
    fingerprint.code_fingerprint.cache_clear()  # the cache reads the source once per process
    assert cache.code_fingerprint(("gac", "sim"), tmp_path) == before  # a folder outside the run's code
    (tmp_path / "sim" / "m.py").write_text("x = 2\n")
    fingerprint.code_fingerprint.cache_clear()  # the cache reads the source once per process
    assert cache.code_fingerprint(("gac", "sim"), tmp_path) != before


def test_fingerprint_follows_code_not_comments_docstrings_or_layout(tmp_path):
    """A doc or layout edit keeps every cached result; a changed statement or constant does not."""
    (tmp_path / "sim").mkdir()
    module = tmp_path / "sim" / "m.py"

    def fp(text):
        module.write_text(text)
        fingerprint.code_fingerprint.cache_clear()
        return cache.code_fingerprint(("sim",), tmp_path)

    base = fp('"""Module."""\nX = 1\n"""X\'s docstring."""\n\ndef f(a):\n    """Doc."""\n    return a + X\n')
    assert fp('"""Other words."""\nX = 1  # a comment\n\n\ndef f(a):\n    return (a +\n            X)\n') == base
    assert fp('"""Module."""\nX = 2\n"""X\'s docstring."""\n\ndef f(a):\n    """Doc."""\n    return a + X\n') != base
    assert fp('"""Module."""\nX = 1\n"""X\'s docstring."""\n\ndef f(a):\n    """Doc."""\n    return a - X\n') != base
    assert fp('"""Module."""\nX = 1\n\ndef f(a):\n    """Doc."""\n    return f"{a}" + "s"\n') != base
    assert fp("def f(:\n") != fp("def f(:  \n")  # a file that does not parse is hashed as its bytes


def test_llm_runs_are_keyed_by_their_source(monkeypatch):
    """Editing sim/ or gac/ recomputes an LLM run; reverting the edit serves the first result again."""
    from experiments import llm
    from sim.llm.train import Args

    calls = []
    monkeypatch.setattr(llm, "run_records",
                        lambda args, **kwargs: calls.append(1) or {"records": [len(calls)],
                                                             "summary": {"final_accuracy": 0.0}})
    fingerprint = {"value": "v1"}
    monkeypatch.setattr(cache, "code_fingerprint", lambda *a, **k: fingerprint["value"])
    args = Args(size="tiny", steps=1)

    def run_cached(args):
        item = dataclasses.replace(llm.run_unit(llm.Run(args, ())), before=())  # its warm start is not the point
        return graph.compute([item], 1, log=lambda *a, **k: None)[item.name]

    assert run_cached(args)["records"] == [1]
    assert run_cached(args)["records"] == [1] and len(calls) == 1
    fingerprint["value"] = "v2"
    assert run_cached(args)["records"] == [2]
    fingerprint["value"] = "v1"
    assert run_cached(args)["records"] == [1] and len(calls) == 2


@pytest.mark.parametrize("content", ["", '{"kind": "unit", "config": {}, "res', '{"kind": "unit"}', "\xff\xfe",
                                     '{"kind": "unit", "config": {}, "result": null}'])
def test_corrupt_entry_is_a_miss_that_warns_with_its_path_and_is_rewritten(content):
    path = cache.cache_path("unit-corrupt", {"c": content})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("latin-1"))
    with pytest.warns(RuntimeWarning, match=str(path)):
        assert cache.lookup("unit-corrupt", {"c": content}) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per entry, not again
        assert cached("unit-corrupt", {"c": content}, lambda: [1, 2]) == [1, 2]
    assert json.loads(path.read_text())["result"] == [1, 2]


def test_an_entry_altered_into_other_valid_json_warns_with_its_path_and_is_recomputed():
    calls = []
    cached("unit-altered", {"a": 1}, lambda: calls.append(1) or {"accuracy": 0.25, "steps": [1, 2]})
    path = cache.cache_path("unit-altered", {"a": 1})
    path.write_text(path.read_text().replace("0.25", "0.75"))  # still valid JSON, another number
    json.loads(path.read_text())
    with pytest.warns(RuntimeWarning, match=f"{path}.*does not match its SHA-256"):
        assert cached("unit-altered", {"a": 1}, lambda: calls.append(1) or {"accuracy": 0.25, "steps": [1, 2]}
                            ) == {"accuracy": 0.25, "steps": [1, 2]}
    assert len(calls) == 2
    assert cache.lookup("unit-altered", {"a": 1}) == {"accuracy": 0.25, "steps": [1, 2]}  # rewritten, verified


def test_a_checksum_survives_nan_and_nested_values():
    result = {"x": [float("nan"), 1e-300, -0.0, 3], "y": {"z": "s", "t": True}}
    cache.store("unit-nan", {"a": 1}, result)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stored = cache.lookup("unit-nan", {"a": 1})
    assert math.isnan(stored["x"][0]) and stored["x"][1:] == [1e-300, -0.0, 3] and stored["y"] == result["y"]


def _disk_full(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_warns_with_the_path_and_keeps_the_computed_result(monkeypatch, tmp_path):
    monkeypatch.setattr(cache, "atomic_write_bytes", _disk_full)
    path = cache.cache_path("unit-full", {"a": 1})
    with pytest.warns(RuntimeWarning, match=f"{path} not written \\(No space left on device\\)"):
        assert cached("unit-full", {"a": 1}, lambda: {"seeds": (1, 2)}) == {"seeds": [1, 2]}
    item = cache.unit("unit-full", len, "xyz")
    with pytest.warns(RuntimeWarning, match=str(tmp_path / "folder")):
        assert cache.compute_unit(item, tmp_path / "folder") == 3  # a worker hands its result back all the same
    assert not path.exists()


def test_single_thread_restores_thread_count():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1, so that a count left at 1 is seen
    try:
        with pytest.raises(RuntimeError), cache.single_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("restored even on error")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
