"""fig10 stays readable: arms of one family color differ in line style; cell labels contrast with their cell."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from paper_figs import fig10_verdict  # noqa: E402
from sim.stabilizers import NO_CONTROL  # noqa: E402


def _tuning_row(arm: str, direction: str, lr: float) -> dict:
    return {"arm": arm, "lr": lr, "score": lr * 1e3, "staleness": 16, "direction_control": direction,
            "objective_fn": NO_CONTROL, "step_control": NO_CONTROL}


def test_gac_placements_share_a_color_but_not_a_line_style():
    tuning = [_tuning_row(arm, direction, lr) for arm, direction in
              (("gac_gradient", "gac"), ("gac_update", "gac"), ("gac_momentum", "gac")) for lr in (1e-4, 3e-4)]
    fig, ax = plt.subplots()
    fig10_verdict.plot_tuning_or_runs(ax, tuning, [])
    lines = ax.get_lines()
    assert len({line.get_color() for line in lines}) == 1
    assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 3
    plt.close(fig)


def test_cell_labels_are_white_on_dark_cells_and_black_on_light_ones():
    fig, ax = plt.subplots()
    image = ax.imshow(np.array([[0.0, 2.0]]), cmap="Reds", vmin=0, vmax=2)
    assert fig10_verdict.text_color(image, 0.0) == "black"  # Reds' lightest cell
    assert fig10_verdict.text_color(image, 2.0) == "white"  # its darkest
    assert fig10_verdict.text_color(image, float("nan")) == "black"  # the "—" of a missing cell
    plt.close(fig)
