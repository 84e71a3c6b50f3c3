"""The figure run cache: computed once per configuration, recomputed on change or when forced."""

import math

from experiments import cache


def test_cached_computes_once_per_config_and_force_recomputes(monkeypatch):
    calls = []

    def compute():
        calls.append(1)
        return [{"step": 0, "cos_prev": float("nan"), "seeds": (1, 2)}]

    first = cache.cached("unit", {"a": 1}, compute)
    second = cache.cached("unit", {"a": 1}, compute)
    assert len(calls) == 1
    assert first[0]["seeds"] == second[0]["seeds"] == [1, 2]  # same types whether fresh or cached
    assert math.isnan(second[0]["cos_prev"])
    cache.cached("unit", {"a": 2}, compute)
    assert len(calls) == 2
    monkeypatch.setenv("GAC_LAB_FORCE", "1")
    cache.cached("unit", {"a": 1}, compute)
    assert len(calls) == 3


def test_cached_runs_key_includes_code_fingerprint(monkeypatch):
    assert len(cache.code_fingerprint()) == 16
    calls = []
    cache.cached_runs("unit", "quick", "cpu", lambda: calls.append(1) or 1)
    cache.cached_runs("unit", "quick", "cpu", lambda: calls.append(1) or 1)
    assert len(calls) == 1
    monkeypatch.setattr(cache, "code_fingerprint", lambda: "edited-source")
    cache.cached_runs("unit", "quick", "cpu", lambda: calls.append(1) or 1)
    assert len(calls) == 2


def test_lookup_never_computes():
    assert cache.lookup("unit-lookup", {"a": 1}) is None
    cache.cached("unit-lookup", {"a": 1}, lambda: {"x": 1})
    assert cache.lookup("unit-lookup", {"a": 1}) == {"x": 1}
