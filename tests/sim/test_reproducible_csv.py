"""Same seed, same CSV: a figure recomputed from scratch (cache bypassed) writes byte-identical files."""

from experiments import cache
from paper_figs import figs1_bandit_snr


def test_same_seed_gives_a_byte_identical_figure_csv(tmp_path, monkeypatch):
    monkeypatch.setenv("GAC_LAB_FORCE", "1")  # recompute both times instead of reading the first result back
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path / "cache")
    csv = f"{figs1_bandit_snr.NAME}.csv"
    figs1_bandit_snr.main("smoke", tmp_path / "a")
    figs1_bandit_snr.main("smoke", tmp_path / "b")
    first = (tmp_path / "a" / csv).read_bytes()
    assert first == (tmp_path / "b" / csv).read_bytes()
    assert first.count(b"\n") > 1 + len(figs1_bandit_snr.PROBLEMS)  # rows of runs, not an empty table
