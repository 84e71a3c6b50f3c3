"""The per-step record can also go to TensorBoard, with the same metric names."""

import pytest

from runtime.files import write_tensorboard
from sim.schema import make_row

pytest.importorskip("tensorboard")


def test_tensorboard_scalars_have_record_names_and_values(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = [make_row("quadratic", step=step, seed=seed, method="gac", staleness=8, objective=1.0 / (step + 1),
                     grad_norm=2.0, cos_prev=0.1 * step, cos_applied=0.0, regime="project", parallel_scale=0.0,
                     diverged=False)
            for seed in (0, 1) for step in range(3)]
    folders = write_tensorboard(rows, tmp_path)
    assert len(folders) == 2  # one run per seed
    events = EventAccumulator(str(folders[1]))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"objective", "grad_norm", "cos_prev", "cos_applied", "parallel_scale", "diverged"} <= tags
    assert "regime" not in tags  # strings are not scalars
    cos = [(e.step, round(e.value, 6)) for e in events.Scalars("cos_prev")]
    assert cos == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert [round(e.value, 6) for e in events.Scalars("objective")] == [1.0, 0.5, round(1 / 3, 6)]


def test_records_read_back_from_csv_have_their_types_and_give_the_same_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from runtime.files import read_records, write_records
    from tests.records import same_records

    rows = [make_row("quadratic", step=step, seed=0, method="gac", staleness=8, objective=1.0 / (step + 1),
                     grad_norm=float("nan") if step == 0 else 2.0, cos_prev=0.1 * step, cos_applied=0.0,
                     regime="project", parallel_scale=0.0, diverged=step == 2)
            for step in range(3)]
    for suffix in (".csv", ".jsonl"):
        back = read_records(write_records(rows, tmp_path / f"r{suffix}"))
        assert same_records(back, rows), suffix
        assert [type(back[0][k]) for k in ("step", "objective", "diverged", "regime")] == [int, float, bool, str]
    folders = write_tensorboard(read_records(tmp_path / "r.csv"), tmp_path / "tb")
    events = EventAccumulator(str(folders[0]))
    events.Reload()
    assert {"objective", "grad_norm", "cos_prev", "diverged"} <= set(events.Tags()["scalars"])
    assert [e.value for e in events.Scalars("diverged")] == [0.0, 0.0, 1.0]
