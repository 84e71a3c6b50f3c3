"""The per-step record can also go to TensorBoard, with the same metric names."""

import pytest

from sim.record import write_tensorboard
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
