"""The process pool that computes missing runs in parallel; its workers end when the process that started it dies.

Without that, a ``kill -9`` of a parallel ``paper_figs`` run leaves the workers re-parented, computing on, then
idle at hundreds of MB each. Each worker runs a watchdog thread that polls its parent's pid (portable: no
signals or prctl, whose Linux death signal follows the creating thread rather than the process).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

PARENT_POLL_S = 0.5
"""How often a worker checks that its parent is alive."""


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)  # re-parented: the pool's process is gone, and with it whoever wanted this result


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: start the watchdog (it exits at once if the parent is already gone)."""
    threading.Thread(target=_watch_parent, args=(parent,), name="exit-with-parent", daemon=True).start()


def process_pool(jobs: int) -> ProcessPoolExecutor:
    """``jobs`` spawned worker processes (fresh interpreters: no forked torch state) that exit with this process."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_exit_with_parent, initargs=(os.getpid(),))
