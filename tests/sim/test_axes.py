"""The three stabilizer axes: method names compose one choice per axis; the braking and KL-target factors."""

import math

import pytest
import torch

from sim import stabilizers
from sim.stabilizers import STALE_DATA, STALE_GRADIENT, Combination, parse_method, record_method


def test_names_compose_in_any_order_to_one_canonical_name():
    assert parse_method("gac+tis") == parse_method("tis+gac") == Combination("tis", "gac", "none")
    assert parse_method("kl_target+gac+bapo", STALE_DATA).name == "bapo+gac+kl_target"
    assert parse_method("naive").name == "naive" and parse_method("naive").parts == ()
    assert parse_method("dc+braking+lr_scale", STALE_GRADIENT) == Combination("dc", "braking", "lr_scale")
    with pytest.raises(ValueError, match="stale-gradient"):
        parse_method("gac+kl_target", STALE_GRADIENT)  # no behaviour policy, no KL to it


def test_the_records_method_is_the_canonical_name_and_sync_is_naive_at_staleness_zero():
    assert record_method(parse_method("naive"), 0) == "sync" and record_method(parse_method("naive"), 4) == "naive"
    assert record_method(parse_method("gac+tis"), 0) == record_method(parse_method("tis+gac"), 3) == "tis+gac"
    for old in ("none", "naive+gac", "sync"):  # one name for naive async; sync is a record name, not a method
        with pytest.raises(ValueError, match="unknown method|cannot be combined"):
            parse_method(old)


def test_every_registry_entry_sits_on_one_axis():
    axes = {name: entry.axis for name, entry in stabilizers.STABILIZERS.items()}
    assert axes == {"naive": "objective", "gac": "direction", "braking": "direction", "lr_scale": "step",
                    "kl_target": "step", "dc": "objective", "tis": "objective", "m2po": "objective",
                    "bapo": "objective", "vcpo": "step"}


@pytest.mark.parametrize("c", [-1.0, -0.3, 0.0, 0.5, 1.0])
def test_braking_factor(c):
    expected = 1 - 0.7 * c  # Adaptive Braking: brake along the velocity, push back against it
    assert stabilizers.braking_scale(c, 0.7) == pytest.approx(expected)
    assert float(stabilizers.braking_scale(torch.tensor(c), 0.7)) == pytest.approx(expected)
    assert stabilizers.braking_scale(math.nan, 0.7) == 1.0


@pytest.mark.parametrize("kl,expected", [(0.0, 1.0), (0.005, 1.0), (0.01, 1.0), (0.04, 0.25), (10.0, 0.05)])
def test_kl_target_factor(kl, expected):
    assert stabilizers.kl_target_factor(kl, 0.01, 0.05) == pytest.approx(expected)
    if kl > 0:
        assert float(stabilizers.kl_target_factor(torch.tensor(kl, dtype=torch.float64), 0.01, 0.05)) == \
            pytest.approx(expected)


def test_axis_configs_refuse_bad_values_in_one_line():
    for config, bad in [(stabilizers.BrakingConfig, dict(braking_alpha=2.5)),
                        (stabilizers.KLTargetConfig, dict(kl_target=0.0)),
                        (stabilizers.KLTargetConfig, dict(kl_floor=0.0))]:
        with pytest.raises(ValueError) as err:
            config(**bad)
        assert "\n" not in str(err.value)
