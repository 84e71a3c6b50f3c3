"""The golden-CSV comparison (tests/golden_csv.py) can fail: a change of a figure's numbers far below any visible
one, a flipped divergence flag, a NaN moved, a row lost; and it lets through what another CPU's kernels change."""

import math

import numpy as np
import pandas as pd
import pytest

from experiments import bound
from paper_figs.driver import make_figure
from tests.golden_csv import GOLDEN_DIR, RTOL, golden_mismatches


@pytest.fixture(scope="module")
def fig4():
    return pd.read_csv(GOLDEN_DIR / "fig4_stability_region.csv")


def test_goldens_are_small_and_hold_decisions(fig4):
    assert len(fig4) <= 100 and fig4["diverged"].any() and not fig4["diverged"].all()
    assert golden_mismatches(fig4.copy(), fig4) == []


def test_kernel_sized_noise_passes_and_a_real_change_fails(fig4):
    rng = np.random.default_rng(0)
    noisy, changed = fig4.copy(), fig4.copy()
    for column in fig4.select_dtypes(float).columns:
        values = fig4[column].to_numpy(float)
        if not np.isfinite(values).any():  # an all-empty column (no parameters)
            continue
        scale = np.abs(values[np.isfinite(values)]).max()
        noisy[column] = values + rng.uniform(-1, 1, len(values)) * 1e-3 * RTOL * scale  # 1e-12: far above an ulp
    assert golden_mismatches(noisy, fig4) == []
    changed["mean_cos_prev"] = fig4["mean_cos_prev"] * (1 + 1e-6)
    assert any(line.startswith("mean_cos_prev:") for line in golden_mismatches(changed, fig4))


@pytest.mark.parametrize("change, expected", [
    (lambda t: t.assign(diverged=t["diverged"].where(t.index != 0, not t["diverged"].iloc[0])), "diverged"),
    (lambda t: t.assign(final_objective=t["final_objective"].where(t.index != 0, math.inf)), "NaN/inf"),
    (lambda t: t.iloc[:-1], "rows"),
    (lambda t: t.drop(columns="boundary"), "columns"),
])
def test_discrete_changes_fail(fig4, change, expected):
    assert any(expected in line for line in golden_mismatches(change(fig4.copy()), fig4))


def test_a_step_size_moved_by_1e_6_moves_fig7_beyond_the_tolerance(tmp_path, monkeypatch):
    """The pipeline mutation: fig7's smoke settings at η × (1 + 1e-6) (a change no plot would show) differ from the
    golden by more than RTOL; unchanged, they match (the same run is the smoke test's)."""
    moved = [dict(s, eta_fraction=s["eta_fraction"] * (1 + 1e-6)) for s in bound.SMOKE_SETTINGS]
    monkeypatch.setitem(bound.PROFILES, "smoke", (moved, *bound.PROFILES["smoke"][1:]))
    make_figure("fig7_bound", "smoke", tmp_path)
    bad = golden_mismatches(tmp_path / "fig7_bound.csv", GOLDEN_DIR / "fig7_bound.csv")
    assert any(line.startswith(("eta:", "measured_avg:")) for line in bad), bad
    # ... and by a move of the change's own size (1e-6), not by noise the tolerance should have absorbed
    assert golden_mismatches(tmp_path / "fig7_bound.csv", GOLDEN_DIR / "fig7_bound.csv", rtol=1e-4) == []
