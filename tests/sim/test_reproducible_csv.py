"""Same seed, same CSV: a figure recomputed from scratch (cache bypassed) writes byte-identical files."""

from paper_figs import figs1_bandit_snr
from runtime import cache
from tests.figures import make_figure


def test_same_seed_gives_a_byte_identical_figure_csv(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    csv = f"{figs1_bandit_snr.NAME}.csv"
    for out in ("a", "b"):  # force: recompute both times instead of reading the first result back
        make_figure(figs1_bandit_snr.NAME, "smoke", tmp_path / out, force=True)
    first = (tmp_path / "a" / csv).read_bytes()
    assert first == (tmp_path / "b" / csv).read_bytes()
    assert first.count(b"\n") > 1 + len(figs1_bandit_snr.PROBLEMS)  # rows of runs, not an empty table
