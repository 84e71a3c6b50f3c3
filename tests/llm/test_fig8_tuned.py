"""fig8_tuned end to end at tiny size: toy grids of the smoke profile, a tiny LLM grid (sync and BAPO)."""

import math

import pandas as pd

import runtime.cache
from experiments import profiles, tuning
from paper_figs import fig8_tuned
from tests.figures import make_figure


def test_fig8_writes_figure_and_tables(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime.cache, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(tuning, "LLM_METHODS", ("bapo",))
    monkeypatch.setitem(profiles.LLM_TUNING, "smoke", profiles.LLMTuning(
        base=dict(size="tiny", model=str(tiny_checkpoint), digits=1, steps=2, prompts_per_step=4, group_size=4,
                  minibatches=2, eval_every=2, eval_problems=8, temperature=0.5, ratio_to="proximal"),
        staleness=(2,), lrs=(1e-3, 3e-3, 1e-2, 3e-2), tuning_seeds=1, reporting_seeds=1))
    make_figure(fig8_tuned.NAME, "smoke", tmp_path)
    for suffix in (".png", ".pdf", ".csv", "_table.csv", "_quadratic_s16.csv"):
        assert (tmp_path / f"{fig8_tuned.NAME}{suffix}").stat().st_size > 0
    table = pd.read_csv(tmp_path / f"{fig8_tuned.NAME}_table.csv")
    assert set(table["sim"]) == {"quadratic", "bandit_gaussian", "llm"}
    assert set(table[table["sim"] == "llm"]["method"]) == {"sync", "bapo"}
    # one winner per (sim, staleness >= 1), and it has the lowest reported mean there
    for _, rows in table[table["staleness"] > 0].groupby(["sim", "staleness"]):
        assert rows["winner"].sum() == 1
        assert rows[rows["winner"]]["mean"].iloc[0] == rows["mean"].min()
    robust = pd.read_csv(tmp_path / f"{fig8_tuned.NAME}_quadratic_s16.csv")
    assert set(robust["method"]) == {"sync", "naive", "gac", "lr_scale", "dc"}
    assert all(math.isnan(r) or r >= 1 for r in table["robust_range"])
