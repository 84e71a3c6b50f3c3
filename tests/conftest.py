"""Test-wide settings: figure runs cache into a temporary folder, never into the checkout."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_run_cache(tmp_path_factory, monkeypatch):
    import experiments.cache

    monkeypatch.setattr(experiments.cache, "CACHE_DIR", tmp_path_factory.mktemp("run-cache"))
    monkeypatch.delenv("GAC_LAB_FORCE", raising=False)
    monkeypatch.setenv("GAC_LAB_JOBS", "1")  # one process: the parallel path has its own tests (test_driver)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that runs a real command for tens of seconds "
                                       "(deselect with -m 'not slow')")
