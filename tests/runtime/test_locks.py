"""runtime.files.exclusive_lock: exactly one of two processes racing for a lock wins, every time."""

from __future__ import annotations

import multiprocessing

import pytest

from runtime.files import exclusive_lock

TRIALS = 200
"""The old check-then-write pid lock let both processes in about one of 40 such trials, so 200 trials catch it with
probability ≈ 1 − 0.974^200 ≈ 99.5 %; the flock never did."""


def _contender(path: str, barrier, results) -> None:
    for trial in range(TRIALS):
        barrier.wait()  # both processes try at the same moment
        try:
            with exclusive_lock(f"{path}.{trial}", "the test folder"):
                results.put((trial, True))
                barrier.wait()  # hold the lock until the other one has tried
        except ValueError:
            results.put((trial, False))
            barrier.wait()


def test_two_processes_racing_for_a_lock_exactly_one_wins_each_trial(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2, timeout=30), context.Queue()
    workers = [context.Process(target=_contender, args=(str(tmp_path / "lock"), barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in range(2 * TRIALS)]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    winners = {trial: sum(won for t, won in outcomes if t == trial) for trial in range(TRIALS)}
    assert winners == dict.fromkeys(range(TRIALS), 1)
    assert list(tmp_path.iterdir()) == []  # released locks leave no file behind


def test_held_lock_names_holder_and_how_to_clear_it_and_the_same_process_may_reenter(tmp_path):
    path = tmp_path / ".lock"
    with exclusive_lock(path, "--out-dir x"):
        with exclusive_lock(path, "--out-dir x"):  # main → train: the holder enters again
            assert "pid" in path.read_text()
        assert path.exists()  # still held by the outer block
    assert not path.exists()


def test_a_lock_held_by_another_process_is_refused_in_one_line(tmp_path):
    context = multiprocessing.get_context("fork")
    held, release = context.Event(), context.Event()

    def hold():
        with exclusive_lock(tmp_path / ".lock", "--out-dir x"):
            held.set()
            release.wait(30)

    holder = context.Process(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(ValueError, match=f"--out-dir x is in use by pid {holder.pid}: ") as error:
            with exclusive_lock(tmp_path / ".lock", "--out-dir x"):
                pass
        assert "delete" in str(error.value) and "\n" not in str(error.value)
    finally:
        release.set()
        holder.join(30)
