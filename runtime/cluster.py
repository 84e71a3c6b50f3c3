"""Ray as the run graph's other executor (``python -m paper_figs ... --executor ray [--address A]``): the tasks that
the local process pool would run go to a Ray cluster instead, one CPU each, the same functions on the same
arguments (torch on one thread), so the same bits and the same CSVs.

``connect`` starts a local cluster (no address) or joins one (``host:port``, or ``auto`` for the one ``ray start``
made on the local host), then checks before any work what every node must share with this process, each failure a
one-line ValueError: the code (its fingerprint, ``runtime.cache.code_fingerprint``, must equal this checkout's,
or a node would store other numbers under the same cache key) and the folders (a node writes its results into the
run cache and reads warm starts that another node trained, so both must be the same shared folders, at the same
paths). Each task checks the fingerprint again on its worker (a node may join after the check). Ray is an optional
extra: ``pip install -e '.[cluster]'``; this module imports it only in ``connect``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime import cache, paths

INSTALL_HINT = "pip install -e '.[cluster]'"
START_ATTEMPTS = 2
"""Tries to start a local cluster: Ray waits a fixed 30 s for its node's processes to register (and its raylet
waits for its agent), which a machine loaded far past its cores can miss."""
PROBE_FILE = ".gac-lab-cluster-probe"
"""The file ``connect`` writes into each shared folder for the nodes to read back (removed after the check)."""


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ValueError(f"--executor ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def _node() -> str:
    return socket.gethostname()


def checked_call(code: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a Ray worker whose code has the fingerprint ``code`` (this checkout's); a one-line
    RuntimeError on a worker with other code (a node that joined after ``connect``'s check)."""
    mine = cache.code_fingerprint()
    if mine != code:
        raise RuntimeError(f"Ray node {_node()} runs other code than the driver (code fingerprint {mine[:12]}, "
                           f"driver {code[:12]}): install the same commit on every node")
    return fn(*args)


def probe(folders: dict[str, str], token: str) -> dict[str, Any]:
    """What a node sees: its host name, its code fingerprint, its warm-start folder, and for each shared folder
    whether it reads the probe file the driver wrote there (a task: runs on that node)."""
    seen = {}
    for name, folder in folders.items():
        try:
            seen[name] = (Path(folder) / PROBE_FILE).read_text() == token
        except OSError:
            seen[name] = False
    return {"node": _node(), "code": cache.code_fingerprint(), "runs": str(paths.runs_dir().resolve()),
            "cache": str(Path(cache.CACHE_DIR).resolve()), "seen": seen}


def check_nodes(reports: list[dict[str, Any]], code: str, folders: dict[str, str], runs: str) -> None:
    """One-line ValueError naming the first node whose ``probe`` report differs from this process (``code``,
    ``runs``: the warm-start folder; its own run cache, which a task that runs a protocol of runs itself, the full
    verdict, reads: the ``run cache`` folder) or that cannot read a shared folder; nothing when every node agrees."""
    for report in reports:
        node = report["node"]
        if report["code"] != code:
            raise ValueError(f"--executor ray: node {node} runs other code than this checkout (code fingerprint "
                             f"{report['code'][:12]}, here {code[:12]}): install the same commit on every node")
        for name, ok in report["seen"].items():
            if not ok:
                raise ValueError(f"--executor ray: node {node} cannot read the {name} folder {folders[name]} that "
                                 f"this process writes: put it on storage every node mounts at the same path "
                                 f"(GAC_LAB_CACHE, GAC_LAB_RUNS)")
        if report.get("cache", folders["run cache"]) != folders["run cache"]:
            raise ValueError(f"--executor ray: node {node} keeps its run cache in {report['cache']}, this process "
                             f"in {folders['run cache']}: set GAC_LAB_CACHE to the same shared folder on every node")
        if report["runs"] != runs:
            raise ValueError(f"--executor ray: node {node} keeps warm starts in {report['runs']}, this process in "
                             f"{runs}: set GAC_LAB_RUNS to the same shared folder on every node")


class RayExecutor:
    """The ``runtime.graph.Executor`` of a Ray cluster: each ``submit`` is one Ray task of one CPU, guarded by
    ``checked_call``; ``shutdown(cancel_futures=True)`` cancels the tasks not yet finished (the cluster stays up)."""

    def __init__(self, ray, remote, code: str):
        self._ray, self._remote, self._code = ray, remote, code
        self._refs: dict[Future, Any] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Future:
        ref = self._remote.remote(self._code, fn, *args)
        future = ref.future()
        self._refs[future] = ref
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pending = [ref for future, ref in self._refs.items() if not future.done()]
        if cancel_futures:
            for ref in pending:
                with contextlib.suppress(Exception):  # a task that ended meanwhile cannot be cancelled
                    self._ray.cancel(ref)
        elif wait and pending:
            self._ray.wait(pending, num_returns=len(pending))
        self._refs.clear()


@dataclass
class Cluster:
    """A connected Ray cluster: ``cpus`` (its CPUs when it was checked: the default number of tasks at once) and
    ``executor``, the opener ``runtime.graph.compute`` and ``run_tasks`` take."""

    address: str
    cpus: int
    nodes: int
    executor: Callable[[int], RayExecutor]


@contextlib.contextmanager
def connect(address: str | None = None, cache_folder: Path | None = None, cpus: int | None = None,
            log=print) -> Iterator[Cluster]:
    """A Ray cluster for the block: a local one started here (``address`` None; ``cpus`` CPUs, default all) or the
    one at ``address``, checked with ``check_nodes`` (the run cache ``cache_folder``, default
    ``runtime.cache.CACHE_DIR``, and the warm-start folder shared, the same code everywhere) before any work.
    A one-line ValueError when Ray is missing, the cluster cannot be reached or a check fails. Ray is shut down
    (this process disconnected; a cluster started here stopped) when the block ends."""
    ray = _import_ray()
    folders = {"run cache": Path(cache.CACHE_DIR if cache_folder is None else cache_folder).resolve(),
               "warm-start": paths.runs_dir().resolve()}
    for attempt in range(START_ATTEMPTS if address is None else 1):
        try:
            ray.init(address="local" if address is None else address, num_cpus=cpus if address is None else None,
                     include_dashboard=False, logging_level=logging.ERROR, log_to_driver=True)
            break
        except Exception as err:  # ConnectionError, ValueError, RuntimeError: Ray's own, often over many lines
            ray.shutdown()  # whatever it started before failing
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            if address is None and "timed out during startup" in reason and attempt + 1 < START_ATTEMPTS:
                log(f"[cluster] the local Ray cluster missed Ray's start-up wait ({reason}); starting it again",
                    flush=True)
                continue
            where = f"at {address}" if address else "here (a local one)"
            raise ValueError(f"--executor ray: could not start or reach a Ray cluster {where}: {reason}") from None
    try:
        yield _checked_cluster(ray, address, folders, log)
    finally:
        ray.shutdown()


def _checked_cluster(ray, address: str | None, folders: dict[str, Path], log) -> Cluster:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < 1:
        raise ValueError(f"--executor ray: the Ray cluster at {address or 'here'} has no CPUs to run tasks on")
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    code, token = cache.code_fingerprint(), secrets.token_hex(16)
    written = []
    try:
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / PROBE_FILE).write_text(token)
            written.append(folder / PROBE_FILE)
        remote_probe = ray.remote(num_cpus=1)(probe)
        reports = ray.get([remote_probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote({k: str(v) for k, v in folders.items()}, token) for n in nodes])
    finally:
        for path in written:
            path.unlink(missing_ok=True)
    check_nodes(reports, code, {k: str(v) for k, v in folders.items()}, str(folders["warm-start"]))
    remote = ray.remote(num_cpus=1)(checked_call)
    where = address or "a local cluster started here"
    log(f"[cluster] Ray: {where}, {len(nodes)} node(s), {cpus} CPUs; code and folders checked on every node",
        flush=True)
    return Cluster(where, cpus, len(nodes), lambda jobs: RayExecutor(ray, remote, code))


MIN_NESTED_CPUS = 2
"""A Ray task that sends runs of its own to the cluster holds one CPU while it waits for them: it does so only on a
cluster with at least this many, so that one is left for them."""


def current() -> Cluster | None:
    """The Ray cluster this process is connected to (a driver inside ``connect``, or a Ray worker: a unit that runs
    a protocol of runs itself, the full profile's verdict, sends them there as tasks of their own, which the cluster
    then schedules beside everyone else's instead of a second process pool on the worker's node); None when it is
    not connected, or the cluster has fewer than MIN_NESTED_CPUS CPUs (the runs then go to the local pool)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < MIN_NESTED_CPUS:
        return None
    remote, code = ray.remote(num_cpus=1)(checked_call), cache.code_fingerprint()
    return Cluster("the cluster this process is connected to", cpus, len(ray.nodes()),
                   lambda jobs: RayExecutor(ray, remote, code))
