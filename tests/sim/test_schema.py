"""Every simulator's rows have exactly the columns ``sim.schema.columns(sim)`` declares, in order."""

import math

import pytest

from sim import schema
from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit, sim_name
from sim.grid import setting
from sim.llm import train
from sim.quadratic import QuadraticProblem, run_quadratic

GRID = [setting("naive", 0, 0.1), setting("gac", 2, 0.1), setting("tis", 2, 0.1)]
BANDITS = [GaussianBandit(dim=3), SoftmaxBandit(arms=4), SoftmaxBandit(arms=4, contexts=3, features="linear",
                                                                        feature_dim=2)]


def _check(rows, sim):
    assert rows, sim
    for row in rows:
        assert tuple(row) == schema.columns(sim), (sim, tuple(row))
        assert row["sim"] == sim


def test_quadratic_rows_have_exactly_the_schema_columns():
    rows = run_quadratic(QuadraticProblem(dim=4), [setting("naive", 0, 0.1), setting("gac", 2, 0.1)], 12,
                         seeds=2).records()
    _check(rows, "quadratic")
    assert all(math.isnan(r["cos_halves"]) for r in rows)  # not measured by this simulator: NaN, not absent
    assert {r["regime"] for r in rows if r["method"] in ("sync", "naive")} == {schema.NO_REGIME}


@pytest.mark.parametrize("problem", BANDITS, ids=["gaussian", "karmed", "contextual"])
def test_bandit_rows_have_exactly_the_schema_columns(problem):
    rows = run_bandit(problem, GRID, 10, seeds=2, groups=2, group_size=4).records()
    _check(rows, sim_name(problem))
    assert all(math.isfinite(r["kl_behaviour"]) and r["kl_behaviour"] >= 0 for r in rows)  # measured, renamed


def test_bandit_sim_names_are_schema_names():
    assert [sim_name(p) for p in BANDITS] == ["bandit_gaussian", "bandit_softmax", "bandit_contextual"]


def test_llm_rows_have_exactly_the_schema_columns(tiny_checkpoint, tmp_path):
    args = train.Args(size="tiny", model=str(tiny_checkpoint), digits=1, steps=2, prompts_per_step=4, group_size=4,
                      minibatches=2, eval_every=1, eval_problems=8, temperature=0.5, progress=False,
                      out_dir=str(tmp_path / "run"))
    _check(train.run_records(args)["records"], "llm")


