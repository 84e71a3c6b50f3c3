"""The before/after CSV comparison: equal within float reordering and documented added columns, nothing else."""

from experiments.compare_csv import compare, main
from runtime.files import write_records

BASE = [{"step": 0, "kl_behaviour": 0.1, "objective": 1.0 / 3.0, "regime": "keep"},
        {"step": 1, "kl_behaviour": 0.2, "objective": float("nan"), "regime": "skip"}]


def _pair(tmp_path, new_rows):
    write_records(BASE, tmp_path / "old.csv")
    write_records(new_rows, tmp_path / "new.csv")
    return compare(tmp_path / "old.csv", tmp_path / "new.csv")


def test_float_reordering_and_nan_columns_are_equal(tmp_path):
    new = [dict(r, cos_halves=float("nan")) for r in BASE]
    new[0]["objective"] *= 1 + 1e-15  # float reordering
    result = _pair(tmp_path, new)
    assert result.equal, result.notes
    assert any("cos_halves" in n for n in result.notes)


def test_a_changed_value_a_filled_new_column_or_a_lost_row_differ(tmp_path):
    assert not _pair(tmp_path, [dict(BASE[0], objective=1.0 / 3.0 + 1e-9), dict(BASE[1])]).equal
    assert not _pair(tmp_path, [dict(r, extra=1.0) for r in BASE]).equal
    assert not _pair(tmp_path, [dict(BASE[0])]).equal
    assert not _pair(tmp_path, [dict(BASE[0], regime="project"), dict(BASE[1])]).equal


def test_a_filled_new_column_passes_only_when_allowed(tmp_path):
    new = [dict(r, entropy=0.5) for r in BASE]
    write_records(BASE, tmp_path / "old.csv")
    write_records(new, tmp_path / "new.csv")
    assert not compare(tmp_path / "old.csv", tmp_path / "new.csv").equal
    assert compare(tmp_path / "old.csv", tmp_path / "new.csv", allow_added=("entropy",)).equal


def test_cli_exit_code(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_records(BASE, tmp_path / "a" / "fig.csv")
    write_records([dict(r) for r in BASE], tmp_path / "b" / "fig.csv")
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    write_records([dict(BASE[0])], tmp_path / "b" / "fig.csv")
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1


def test_tolerance_is_relative_only_and_int_equals_float(tmp_path):
    """rel_tol bounds |a − b| / |b| at every magnitude (no absolute floor), and 2 equals 2.0."""
    small = [{"step": 0, "objective": 1e-12}, {"step": 1, "objective": 5.0}]
    write_records(small, tmp_path / "old.csv")
    write_records([{"step": 0.0, "objective": 1e-12 * (1 + 1e-13)}, {"step": 1.0, "objective": 5.0}],
                  tmp_path / "new.csv")
    assert compare(tmp_path / "old.csv", tmp_path / "new.csv").equal
    write_records([{"step": 0, "objective": 2e-12}, {"step": 1, "objective": 5.0}], tmp_path / "new.csv")
    assert not compare(tmp_path / "old.csv", tmp_path / "new.csv").equal  # an absolute 1e-12 apart
    assert compare(tmp_path / "old.csv", tmp_path / "new.csv", rel_tol=0.6).equal


def test_cli_prints_one_verdict_per_csv_and_names_the_difference(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_records(BASE, tmp_path / "a" / "fig.csv")
    write_records([dict(BASE[0], regime="project"), dict(BASE[1])], tmp_path / "b" / "fig.csv")
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("fig.csv: DIFFERENT") and "regime" in out
