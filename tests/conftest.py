"""Test-wide settings: figure runs cache into a temporary folder, never into the checkout; the committed tiny
warm start (tests/data/tiny_warm_start, made by ``python -m sim.llm.warmstart``, command in its warmstart.json),
which ``--perturb-weights EPS`` perturbs (relative noise of size EPS on every weight: other float bits, as on
another CPU), and ``--torch-threads N``, the LLM runs' thread count: both check that no test hangs on the exact bits
of a training outcome."""

import shutil
from pathlib import Path

import pytest

TINY_WARM_START = Path(__file__).parent / "data" / "tiny_warm_start"


def pytest_addoption(parser):
    parser.addoption("--perturb-weights", type=float, default=0.0, metavar="EPS",
                     help="perturb the committed tiny warm start's weights by relative noise EPS (default 0: as saved)")
    parser.addoption("--torch-threads", type=int, default=1, metavar="N",
                     help="torch CPU threads of the LLM tests' runs (default 1; 2 changes the last bits of long sums)")


@pytest.fixture(scope="session")
def torch_threads(request) -> int:
    """The thread count the LLM tests' runs use (``--torch-threads``)."""
    return request.config.getoption("--torch-threads")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, request):
    """The tiny (19k-parameter, 1-digit) warm start the LLM and integration tests start from: a copy of the
    committed one, perturbed with ``--perturb-weights``."""
    from sim.llm.model import load_model, save_model

    path = tmp_path_factory.mktemp("tiny_model") / "model"
    shutil.copytree(TINY_WARM_START, path)
    eps = request.config.getoption("--perturb-weights")
    if eps:
        import torch

        model = load_model(path)
        generator = torch.Generator().manual_seed(12345)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + eps * torch.randn(p.shape, generator=generator))
        save_model(model, path)
    return path


@pytest.fixture(autouse=True)
def _isolated_run_cache(tmp_path_factory, monkeypatch):
    import runtime.cache

    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path_factory.mktemp("run-cache"))
    monkeypatch.delenv("GAC_LAB_FORCE", raising=False)
    monkeypatch.setenv("GAC_LAB_JOBS", "1")  # one process: the parallel path has its own tests (test_driver)


# The files whose tests take longest, in that order. They are collected first, so that pytest-xdist (`make test`:
# --dist loadfile --no-loadscope-reorder) hands them out before the many short files and the two workers finish
# together instead of one waiting on the other's last long file. A file missing here only runs later.
LONGEST_FIRST = ("test_notebooks.py", "sim/test_every_figure_reads.py", "test_readme.py", "runtime/test_cluster.py",
                 "gac/test_compiled.py", "llm/test_driver.py", "llm/test_llm_panels.py", "runtime/test_run_tasks.py",
                 "test_benchmarks.py", "theory/test_convergence.py", "llm/test_verdict.py")


def pytest_collection_modifyitems(config, items):
    rank = {f"tests/{name}": i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: file order otherwise


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that runs a real command for tens of seconds "
                                       "(deselect with -m 'not slow')")
