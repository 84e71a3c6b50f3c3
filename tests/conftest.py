"""Test-wide settings: figure runs cache into a temporary folder, never into the checkout."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_run_cache(tmp_path_factory, monkeypatch):
    import experiments.cache

    monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path_factory.mktemp("run-cache"))
    monkeypatch.delenv("GAC_LAB_FORCE", raising=False)
    monkeypatch.delenv("GAC_LAB_FORCE_BEFORE", raising=False)  # set by paper_figs --force
    monkeypatch.setenv("GAC_LAB_JOBS", "1")  # the LLM sweep's parallel path has its own test


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that runs a real command for tens of seconds "
                                       "(deselect with -m 'not slow')")
