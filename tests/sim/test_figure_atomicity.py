"""A figure's files are published together: a failed run leaves the old set, a finished one has its marker."""

import sys
import types

import pytest

from paper_figs.common import Results
from paper_figs.driver import plot_figure
from sim.record import atomic_write_bytes, is_complete, publish_together


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
    assert (tmp_path / "fake_fig.complete").read_text().split() == ["fake_fig.csv", "fake_fig.png"]
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
