"""The experiments process pool: its workers exit when the process that started it is killed (kill -9)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PARENT = textwrap.dedent("""
    import os, sys, time
    from runtime.graph import process_pool

    def slow_job():
        print(os.getpid(), flush=True)  # the worker announces itself, then works for longer than the test
        time.sleep(300)

    if __name__ == "__main__":
        with process_pool(2) as pool:
            for _ in range(2):
                pool.submit(slow_job)
            time.sleep(300)
""")


def _running(pid: int) -> bool:
    """Alive and not a zombie (a re-parented worker may wait unreaped where pid 1 does not reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and re-parenting are POSIX")
def test_workers_exit_when_the_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    workers = []
    try:
        workers = [int(parent.stdout.readline()) for _ in range(2)]  # both jobs are running in their workers
        assert all(_running(pid) for pid in workers)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30  # a generous bound on the 0.5 s watchdog poll, not a speed check
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(pid) for pid in workers), "workers outlived their parent"
    finally:
        parent.kill()
        parent.wait()
        for pid in workers:  # only if the check failed: do not leave them behind
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
