"""A figure's files are published together: a failed run leaves the old set, a finished one has its marker."""

import hashlib
import multiprocessing
import subprocess
import sys
import threading
import time
import types

import pytest

from paper_figs.common import Results
from paper_figs.driver import FigureArgs, make_figures, plot_figure
from runtime.files import atomic_write_bytes, is_complete, publish_together


def _fake_figure(monkeypatch, fail: bool):
    def plot(results, out_dir):
        atomic_write_bytes(out_dir / "fake_fig.csv", b"new\n")
        if fail:
            raise RuntimeError("killed after the CSV")
        atomic_write_bytes(out_dir / "fake_fig.png", b"png")

    monkeypatch.setitem(sys.modules, "paper_figs.fake_fig", types.SimpleNamespace(plot=plot))


def test_a_failing_figure_leaves_the_previous_set_untouched(tmp_path, monkeypatch):
    _fake_figure(monkeypatch, fail=False)
    plot_figure("fake_fig", Results("quick"), tmp_path)
    assert is_complete(tmp_path, "fake_fig")
    listed = [line.split() for line in (tmp_path / "fake_fig.complete").read_text().splitlines()]
    assert [name for name, _ in listed] == ["fake_fig.csv", "fake_fig.png"]
    assert listed[0][1] == hashlib.sha256(b"new\n").hexdigest()
    atomic_write_bytes(tmp_path / "fake_fig.csv", b"old\n")
    _fake_figure(monkeypatch, fail=True)
    with pytest.raises(RuntimeError):
        plot_figure("fake_fig", Results("quick"), tmp_path)
    assert (tmp_path / "fake_fig.csv").read_bytes() == b"old\n"  # not the failed run's CSV
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake_fig.complete", "fake_fig.csv", "fake_fig.png"]


def test_a_set_interrupted_while_publishing_has_no_marker(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    atomic_write_bytes(staging / "f.csv", b"1")
    publish_together(staging, tmp_path / "out", "f")
    assert is_complete(tmp_path / "out", "f")
    (tmp_path / "out" / "f.csv").unlink()  # a file the marker lists is gone
    assert not is_complete(tmp_path / "out", "f")
    assert not is_complete(tmp_path / "out", "never_written")
    (tmp_path / "out" / "f.csv").write_bytes(b"2")  # a file the marker lists, replaced by another run's
    assert not is_complete(tmp_path / "out", "f")


TRIALS = 50
FILES = 100
"""Before publishers took turns, two processes publishing 100 files each at the same moment left a finished marker
over a mix of both sets in about one trial of ten: 50 trials catch it with probability ≈ 1 − 0.9^50 ≈ 99.5 %."""


def _publisher(out: str, tag: str, barrier) -> None:
    from pathlib import Path

    for trial in range(TRIALS):
        staging = Path(out) / f"staging-{tag}-{trial}"
        staging.mkdir()
        for i in range(FILES):
            (staging / f"f{i:02d}.csv").write_text(f"{tag}\n")
        barrier.wait()  # both publish at the same moment
        publish_together(staging, Path(out) / f"trial{trial}", "f")
        staging.rmdir()


def test_two_runs_publishing_into_one_folder_never_leave_a_marker_over_a_mix(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2, timeout=60)
    workers = [context.Process(target=_publisher, args=(str(tmp_path), tag, barrier)) for tag in "ab"]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    for trial in range(TRIALS):
        out = tmp_path / f"trial{trial}"
        assert is_complete(out, "f")
        tags = {(out / f"f{i:02d}.csv").read_text() for i in range(FILES)}
        assert len(tags) == 1, f"trial {trial}: a finished marker over a mix of two runs' files"


def test_a_second_run_into_a_used_out_folder_waits_for_the_first_naming_it(tmp_path, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from runtime.files import exclusive_lock\n"
                               f"with exclusive_lock({str(tmp_path / '.lock')!r}, 'x'):\n"
                               "    print('held', flush=True); sys.stdin.readline()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        _fake_figure(monkeypatch, fail=False)
        lines, done = [], []
        args = FigureArgs(names=("fake_fig",), out=tmp_path)
        second = threading.Thread(target=lambda: done.append(
            make_figures(args, 1, log=lambda *a, **k: lines.append(" ".join(map(str, a))), declared={"fake_fig": []})))
        second.start()
        for _ in range(200):
            if any("waiting" in line for line in lines):
                break
            time.sleep(0.05)
        waiting = [line for line in lines if "waiting" in line]
        assert waiting and f"pid {holder.pid}" in waiting[0] and str(tmp_path) in waiting[0]
        assert not is_complete(tmp_path, "fake_fig") and not done  # nothing computed or drawn while it waits
    finally:
        holder.communicate("\n", timeout=30)
    second.join(timeout=60)
    assert done and is_complete(tmp_path, "fake_fig")
