"""The committed staleness × step-size law (docs/data/staleness_lr_scaling{,_fit}.csv, full profile) against today's
code (experiments.staleness_lr) and theory."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments import staleness_lr as law

DATA = Path(__file__).resolve().parents[2] / "docs" / "data"


def test_committed_llm_rows_name_the_llm_rule_and_toy_rows_the_gap_rule():
    table = pd.read_csv(DATA / "staleness_lr_scaling.csv")
    for row in table.itertuples():
        assert row.criterion_rule == law.criterion_rule(row.criterion, row.steps, row.scale)
        assert ("held-out accuracy" in row.criterion_rule) == (row.scale == "llm" and row.criterion == "progress")


def test_committed_table_and_fits_agree_with_each_other_and_with_theory():
    """docs/data/staleness_lr_scaling{,_fit}.csv (full profile): the documented columns, every fitted exponent
    recomputed from the table's max_stable_lr, theory's from its formula, and naive's boundary on the quadratic at
    a*(s) (within the finite-run excess the README explains: at most 5 %)."""
    table = pd.read_csv(DATA / "staleness_lr_scaling.csv")
    fits = pd.read_csv(DATA / "staleness_lr_scaling_fit.csv")
    provenance = ("code", "command")  # experiments.results_tables.PROVENANCE: where the fits came from
    assert tuple(table.columns) == law.COLUMNS
    assert tuple(c for c in fits.columns if c not in provenance) == law.FIT_COLUMNS
    scales = set(table.scale)
    assert set(law.SCALES) <= scales <= set(law.ALL_SCALES)  # the toy scales, and the LLM testbed once it was run
    assert len(table) == len(scales) * len(law.CRITERIA) * len(law.METHODS) * len(law.STALENESS)
    assert set(fits.scale) == scales
    for fit in fits.itertuples():
        rows = table[(table.scale == fit.scale) & (table.criterion == fit.criterion) & (table.method == fit.method)]
        rows = rows.sort_values("staleness")
        assert fit.theory_exponent == pytest.approx(law.fit_exponent(rows.staleness, law.theory_step(fit.method,
                                                                                                   rows.staleness)))
        if fit.cells_censored:
            assert math.isnan(fit.exponent)
            continue
        assert fit.exponent == pytest.approx(law.fit_exponent(rows.staleness, rows.max_stable_lr), abs=1e-9)
        assert fit.exponent_low <= fit.exponent <= fit.exponent_high
    naive = table[(table.scale == "quadratic") & (table.criterion == "progress") & (table.method == "naive")]
    assert np.all((naive.max_stable_lr / naive.theory_lr).between(0.98, 1.05))


def test_committed_high_snr_law_is_the_walks_grid_and_its_fits_recompute():
    """docs/data/staleness_lr_highsnr{,_fit}.csv: every cell of the high-SNR scale; each per-seed boundary the
    geometric middle of its final bracket: between two neighbouring points a < b of the walk's grid, at a^(1−f)·b^f
    with f an odd multiple of 1/2^(r+1) after the command's r zooms (--refinements r); the quorum between the smallest
    and largest seed's, the bracket ratio 2^(1/2^r), and each fitted exponent recomputed from the table."""
    table = pd.read_csv(DATA / "staleness_lr_highsnr.csv")
    fits = pd.read_csv(DATA / "staleness_lr_highsnr_fit.csv")
    provenance = ("code", "command")
    assert tuple(c for c in table.columns if c not in provenance) == law.COLUMNS
    assert set(table.scale) == {"llm_highsnr"} and set(table.criterion) == {"progress"}
    assert sorted(zip(table.method, table.staleness, strict=True)) == sorted(law.cells())
    low, high = law.SEARCH_RANGE["llm_highsnr"]
    grid = law.walk_grid(low, high, law.lookup("law", "full").llm_grid_points, law.DESCEND["llm_highsnr"])
    (zooms,) = {int(c.split("--refinements ")[1].split()[0]) for c in table.command}
    for column in ("max_stable_lr", "lr_all_seeds", "lr_any_seed"):
        for value in table[column]:
            k = np.searchsorted(grid, value) - 1
            f = np.log(value / grid[k]) / np.log(grid[k + 1] / grid[k]) * 2 ** (zooms + 1)
            assert 0 <= k < len(grid) - 1 and abs(f - round(f)) < 1e-6 and round(f) % 2 == 1, (column, value)
    assert (table.lr_all_seeds <= table.max_stable_lr).all() and (table.max_stable_lr <= table.lr_any_seed).all()
    assert np.allclose(table.bracket_ratio, 2.0 ** (1 / 2**zooms))
    for fit in fits.itertuples():
        rows = table[table.method == fit.method].sort_values("staleness")
        assert fit.exponent == pytest.approx(law.fit_exponent(rows.staleness, rows.max_stable_lr), abs=1e-9)
        assert fit.exponent_low <= fit.exponent + 1e-9 and fit.exponent <= fit.exponent_high + 1e-9
