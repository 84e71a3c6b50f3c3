"""The theory modules' command lines (tyro): named tables print, a wrong name or number is refused before any work."""

from __future__ import annotations

import io

import pytest

from theory import mutation_sample, placement, tables


def test_tables_prints_the_named_table(monkeypatch, capsys):
    monkeypatch.setitem(tables.TABLES, "bound", lambda: "| the bound table |")
    tables.main(["bound"])
    assert capsys.readouterr().out.split() == ["###", "bound", "|", "the", "bound", "table", "|"]


@pytest.mark.parametrize("module", [tables, placement])
def test_an_unknown_table_is_refused_before_any_work(module, monkeypatch, capsys):
    for name in list(module.TABLES):
        monkeypatch.setitem(module.TABLES, name, lambda: pytest.fail("a table was computed"))
    with pytest.raises(SystemExit) as exit_info:
        module.main(["no_such_table"])
    assert exit_info.value.code == 2
    assert "no_such_table" in capsys.readouterr().err


def test_placement_all_prints_every_table_once(monkeypatch, capsys):
    for name in list(placement.TABLES):
        monkeypatch.setitem(placement.TABLES, name, lambda name=name: f"<{name}>")
    placement.main([])
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("<")] == [f"<{n}>" for n in placement.TABLES]


def test_mutation_sample_scores_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("theory.cosine.x_snr__mutmut_1: killed\n"
                                                 "theory.cosine.x_snr__mutmut_2: survived\n"))
    mutation_sample.main(["score"])
    out = capsys.readouterr().out
    assert "1 /    2 killed  50.0 %  (complete)" in out and "survived: theory.cosine.x_snr__mutmut_2" in out


def test_mutation_sample_pick_refuses_a_bad_count():
    with pytest.raises(SystemExit, match="N must be >= 1, got 0"):
        mutation_sample.main(["pick", "0"])
