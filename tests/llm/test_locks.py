"""The warm-start lock (``exclusive_lock(..., wait=True)``, an ``fcntl.flock``): waiting processes take turns, never
both inside, and a lock left by a killed trainer does not block the next one (the kernel drops a flock when its
holder's descriptors close, however the process ends). The out-dir lock's race and kill tests are in
tests/runtime/test_locks.py and tests/llm/test_train.py."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from runtime.files import exclusive_lock
from sim.llm import warmstart

ROUNDS = 40


def _take_turns(path: str, log: str, barrier) -> None:
    barrier.wait()
    for _ in range(ROUNDS):
        with exclusive_lock(path, "warm start", wait=True):
            with open(log, "a") as handle:  # one write per line: appends of two processes do not mix within a line
                handle.write(f"in {os.getpid()}\n")
            time.sleep(0.002)  # long enough that an unlocked peer would get in between
            with open(log, "a") as handle:
                handle.write(f"out {os.getpid()}\n")


def lock_turns(tmp_path) -> list[list[str]]:
    """The (in, out) pairs two processes logged while waiting for one lock ROUNDS times each."""
    context = multiprocessing.get_context("fork")
    barrier, log = context.Barrier(2, timeout=30), tmp_path / "log"
    workers = [context.Process(target=_take_turns, args=(str(tmp_path / ".lock"), str(log), barrier)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    lines = log.read_text().split()
    return [lines[i:i + 4] for i in range(0, len(lines), 4)]


def test_processes_waiting_for_the_warm_start_lock_are_never_both_inside(tmp_path):
    turns = lock_turns(tmp_path)
    assert len(turns) == 2 * ROUNDS
    assert all(kind_in == "in" and kind_out == "out" and pid_in == pid_out for kind_in, pid_in, kind_out, pid_out
               in turns)


def test_lock_turns_check_catches_a_lock_that_does_not_exclude(tmp_path, monkeypatch):
    import contextlib

    monkeypatch.setattr(sys.modules[__name__], "exclusive_lock", lambda *a, **k: contextlib.nullcontext())
    turns = lock_turns(tmp_path)
    assert not all(t[0] == "in" and t[2] == "out" and t[1] == t[3] for t in turns)


def test_a_warm_start_lock_left_by_a_killed_trainer_does_not_block(tmp_path, monkeypatch):
    monkeypatch.setattr(warmstart, "RUNS_DIR", tmp_path)
    config = warmstart.WarmStartConfig(size="tiny", digits=1, max_steps=2, eval_every=1, eval_problems=4,
                                       batch_size=4, target_accuracy=0.0, ceiling_accuracy=1.0)
    target = warmstart.warm_start_path(config)
    lock = target.parent / f".{target.name}.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom runtime.files import exclusive_lock\n"
                               "with exclusive_lock(sys.argv[1], 'warm start', wait=True):\n"
                               "    print('held', flush=True)\n    time.sleep(60)", str(lock)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # SIGKILL mid-training: no cleanup runs, its lock file stays
    holder.wait()
    assert lock.exists() and f"pid {holder.pid}" in lock.read_text()

    def blocked(*_):
        raise TimeoutError("warm_start still waits for the lock of a killed process")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(60)
    try:
        path, info = warmstart.warm_start(config, log=lambda *a: None)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert path == target and info["steps"] == 2 and not lock.exists()


@pytest.mark.parametrize("wait", [False, True])
def test_the_lock_file_is_not_trusted_only_the_flock(tmp_path, wait):
    """A lock file with a live-looking pid but no flock (what a check-then-write lock would refuse on) is taken."""
    lock = tmp_path / ".lock"
    lock.write_text(f"pid {os.getppid()}: python -m sim.llm\n")
    with exclusive_lock(lock, "--out-dir x", wait=wait):
        assert f"pid {os.getpid()}" in lock.read_text()
    assert not lock.exists()
