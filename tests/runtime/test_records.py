"""Records written as CSV or JSON lines read back with their types."""

from runtime.files import read_records, write_records
from sim.schema import make_row
from tests.records import same_records


def test_records_read_back_from_csv_and_jsonl_have_their_types(tmp_path):
    rows = [make_row("quadratic", step=step, seed=0, method="gac", staleness=8, objective=1.0 / (step + 1),
                     grad_norm=float("nan") if step == 0 else 2.0, cos_prev=0.1 * step, cos_applied=0.0,
                     regime="project", parallel_scale=0.0, diverged=step == 2)
            for step in range(3)]
    for suffix in (".csv", ".jsonl"):
        back = read_records(write_records(rows, tmp_path / f"r{suffix}"))
        assert same_records(back, rows), suffix
        assert [type(back[0][k]) for k in ("step", "objective", "diverged", "regime")] == [int, float, bool, str]
