"""The TRL callback's metric names are the record schema's columns (sim/schema.py) under a gac/ prefix."""

import importlib
import importlib.util
import math
from types import SimpleNamespace

import pytest

from sim.schema import CORE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (the optional extra: pip install -e '.[trl]')")


@pytest.fixture(scope="module")
def gac_trl():
    """gac.integrations.trl, imported here rather than at collection (it imports transformers)."""
    return importlib.import_module("gac.integrations.trl")

NOT_COLUMNS = {"grad_norm_after"}
"""Documented exceptions: logged, but deliberately not a record column (see gac_trl.METRICS)."""


def test_every_metric_is_a_schema_column_or_a_documented_exception(gac_trl):
    report = SimpleNamespace(cosine=0.5, regime="cap", parallel_scale=0.3, grad_norm_before=2.0, grad_norm_after=1.5)
    logged = gac_trl.report_metrics(report)
    assert all(name.startswith("gac/") for name in logged)
    names = {name.removeprefix("gac/") for name in logged}
    assert names == set(gac_trl.METRICS)
    assert names - NOT_COLUMNS <= set(CORE), f"not schema columns: {sorted(names - NOT_COLUMNS - set(CORE))}"
    assert NOT_COLUMNS <= names and all("not a record column" in gac_trl.METRICS[n] for n in NOT_COLUMNS)
    assert logged == {"gac/cos_prev": 0.5, "gac/regime": 1.0, "gac/parallel_scale": 0.3, "gac/grad_norm": 2.0,
                      "gac/grad_norm_after": 1.5}


def test_a_nan_cosine_is_left_out_of_the_logged_mean(gac_trl):
    """A step with nothing measured (no reference yet, or a zero gradient) reports cosine NaN: the logged mean is
    over the measured steps, and NaN only when none was measured (not 0, which would read as "orthogonal")."""
    callback = gac_trl.GACCallback()
    reports = [SimpleNamespace(cosine=c, regime="keep", parallel_scale=1.0, grad_norm_before=n, grad_norm_after=n)
               for c, n in ((float("nan"), 0.0), (0.6, 2.0), (0.2, 4.0))]
    for report in reports:
        callback.optimizer = SimpleNamespace(last_report=report)
        callback.on_optimizer_step(None, None, None)
    metrics = callback.pop_metrics()
    assert metrics["gac/cos_prev"] == pytest.approx(0.4) and metrics["gac/grad_norm"] == pytest.approx(2.0)
    callback.on_optimizer_step(None, None, None)  # the last report again: measured
    callback.optimizer = SimpleNamespace(last_report=reports[0])
    callback.on_optimizer_step(None, None, None)
    assert callback.pop_metrics()["gac/cos_prev"] == pytest.approx(0.2)
    callback.on_optimizer_step(None, None, None)
    assert math.isnan(callback.pop_metrics()["gac/cos_prev"])
