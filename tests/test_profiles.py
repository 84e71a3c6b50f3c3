"""The profile registry: one frozen dataclass per study, names from one Literal, one lookup that refuses in one line."""

import dataclasses
import typing

import pytest

from experiments import profiles


def test_each_study_holds_one_frozen_dataclass_under_known_names():
    names = set(typing.get_args(profiles.ProfileName))
    assert set(profiles.REGISTRY) == set(typing.get_args(profiles.Study))
    for study, table in profiles.REGISTRY.items():
        (kind,) = {type(entry) for entry in table.values()}  # one shape per study
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen, study
        assert set(table) <= names, study
        for name in table:
            assert profiles.lookup(study, name) is table[name]


def test_an_unknown_name_is_one_line_naming_the_study_and_its_profiles():
    with pytest.raises(ValueError) as err:
        profiles.lookup("toy", "gpu")  # a name other studies have
    assert str(err.value) == "unknown profile 'gpu' for toy; choose from smoke, quick, full"


def test_the_figure_profiles_exist_where_the_figures_read_them():
    for study in ("toy", "bound", "stability_map", "bandit_snr", "law", "verdict_toys", "llm_sweep", "testbed",
                  "signature", "llm_tuning", "verdict"):
        for name in ("quick", "full"):
            profiles.lookup(study, name)
    for study in ("llm_sweep", "testbed", "signature", "verdict"):  # the LLM figures' gpu profile
        profiles.lookup(study, "gpu")
    from experiments import verdict

    reported = {w for p in profiles.TESTBED.values() for w in p.warm_seeds}
    assert profiles.TUNING_WARM_SEED not in reported and profiles.HIGHSNR["tune"].warm_seeds == (0,)
    assert all(p.tuning_warm == profiles.TUNING_WARM_SEED for p in profiles.VERDICT.values())
    assert profiles.VERDICT_ARMS == tuple(verdict.ARMS)
