"""The TRL callback's metric names are the record schema's columns (sim/schema.py) under a gac/ prefix."""

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from gac.integrations import trl as gac_trl  # noqa: E402
from sim.schema import CORE  # noqa: E402

NOT_COLUMNS = {"grad_norm_after"}
"""Documented exceptions: logged, but deliberately not a record column (see gac_trl.METRICS)."""


def test_every_metric_is_a_schema_column_or_a_documented_exception():
    report = SimpleNamespace(cosine=0.5, regime="cap", parallel_scale=0.3, grad_norm_before=2.0, grad_norm_after=1.5)
    logged = gac_trl.report_metrics(report)
    assert all(name.startswith("gac/") for name in logged)
    names = {name.removeprefix("gac/") for name in logged}
    assert names == set(gac_trl.METRICS)
    assert names - NOT_COLUMNS <= set(CORE), f"not schema columns: {sorted(names - NOT_COLUMNS - set(CORE))}"
    assert NOT_COLUMNS <= names and all("not a record column" in gac_trl.METRICS[n] for n in NOT_COLUMNS)
    assert logged == {"gac/cos_prev": 0.5, "gac/regime": 1.0, "gac/parallel_scale": 0.3, "gac/grad_norm": 2.0,
                      "gac/grad_norm_after": 1.5}
