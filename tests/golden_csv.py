"""Golden figure CSVs: a few small, deterministic figures (toy simulations and theory, float64) written at the smoke
profile and saved under ``tests/data/golden/``; the figure tests compare what they write with them.

Comparison (``golden_mismatches``): the same columns and rows; text, integer and boolean columns (labels, seeds,
divergence flags and steps: the figure's discrete decisions) exactly; float columns with NaN and ±inf in the same
places and the finite values within ``RTOL`` of the column's scale (its largest finite |value|), so near-zero
entries do not blow up. Why ``RTOL = 1e-9``: the simulations run in float64 and their trajectories agree across CPU
kernels to ≤ 3e-13 of their scale (tests/sim/test_grid_golden.py, which measured it and pins 1e-10); a figure column
is a mean, std, min or max over seeds or a window of those trajectories, or a closed-form theory value, which adds a
few ulps, not an amplification, and a column of small stds (scale 1e-2 against trajectories of scale 1) turns 3e-13
into 3e-11 of its own scale. 1e-9 leaves 30× over that; a change of the figure's numbers (a step size, a window,
a statistic) moves them by far more (fig7's smoke run at η × (1 + 1e-6) moved ``eta`` and ``measured_avg`` beyond it).

Regenerate only for an intended change in the numbers: ``python -m tests.golden_csv`` (say why in CHANGELOG.md).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

GOLDEN_DIR = Path(__file__).resolve().parent / "data" / "golden"
RTOL = 1e-9
FIGURES = {"fig2_cosine_vs_staleness": ("fig2_cosine_vs_staleness.csv",),
           "fig4_stability_region": ("fig4_stability_region.csv",),
           "fig7_bound": ("fig7_bound.csv", "fig7_bound_tightness.csv")}
"""figure → the CSVs of its smoke run that are saved (small: 4 to 73 rows)."""


def golden_mismatches(written: Path | pd.DataFrame, golden: Path | pd.DataFrame, rtol: float = RTOL) -> list[str]:
    """What differs between a written figure CSV and its golden beyond the cross-machine tolerance (module doc)."""
    new = written if isinstance(written, pd.DataFrame) else pd.read_csv(written)
    old = golden if isinstance(golden, pd.DataFrame) else pd.read_csv(golden)
    if list(new.columns) != list(old.columns):
        return [f"columns differ: {list(new.columns)} != golden {list(old.columns)}"]
    if len(new) != len(old):
        return [f"{len(new)} rows != golden {len(old)}"]
    bad = []
    for column in old.columns:
        a, b = new[column], old[column]
        if b.dtype.kind != "f" or a.dtype.kind != "f":  # labels, ints, flags: the decisions, exactly
            if not a.astype(str).equals(b.astype(str)):
                bad.append(f"{column}: {int((a.astype(str) != b.astype(str)).sum())} entries differ")
            continue
        x, y = a.to_numpy(float), b.to_numpy(float)
        if not (np.array_equal(np.isfinite(x), np.isfinite(y))
                and np.array_equal(x[~np.isfinite(x)], y[~np.isfinite(y)], equal_nan=True)):
            bad.append(f"{column}: NaN/inf in other places")
            continue
        finite = np.isfinite(y)
        if not finite.any():
            continue
        scale = np.abs(y[finite]).max()
        error = np.abs(x[finite] - y[finite]).max()
        if error > rtol * scale:
            bad.append(f"{column}: off by {error / max(scale, 1e-300):.1e} of its scale")
    return bad


def write_goldens() -> None:
    """Run each figure of FIGURES at the smoke profile (every unit recomputed) and save its CSVs as the goldens."""
    from tests.figures import make_figure

    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, files in FIGURES.items():
            make_figure(name, "smoke", Path(tmp), force=True)
            for file in files:
                shutil.copyfile(Path(tmp) / file, GOLDEN_DIR / f"{file}.tmp")
                (GOLDEN_DIR / f"{file}.tmp").replace(GOLDEN_DIR / file)
                print(f"wrote {GOLDEN_DIR / file}")


if __name__ == "__main__":
    write_goldens()
