"""experiments.verdict_toys: every arm where it applies, fig8's protocol recomputed from the per-run rows, the CLI."""

from __future__ import annotations

import csv
import math

import pandas as pd
import pytest

from experiments import tuning, verdict_toys
from experiments.profiles import lookup
from experiments.verdict_toys import COLUMNS, GAC_SPACES, LR_GRID, OPTIMIZERS, SIM_ARMS, SIM_STRUCTURES, STALENESS


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke table and its per-run rows, computed once (cached in a temporary folder, as conftest does)."""
    import runtime.cache

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime.cache, "CACHE_DIR", tmp_path_factory.mktemp("verdict-cache"))
        rows = pd.DataFrame(verdict_toys.toy_verdict_rows("smoke"))
        runs = {(sim, structure): pd.DataFrame(verdict_toys.run_rows(sim, structure, "smoke"))
                for sim, structures in SIM_STRUCTURES.items() for structure in structures}
    return rows, runs


@pytest.fixture(scope="module")
def smoke_rows(smoke):
    return smoke[0]


def test_every_arm_where_it_applies(smoke_rows):
    assert list(smoke_rows.columns) == list(COLUMNS)
    for sim, structures in SIM_STRUCTURES.items():
        for structure in structures:
            for optimizer in OPTIMIZERS:
                cell = smoke_rows[(smoke_rows["sim"] == sim) & (smoke_rows["structure"] == structure)
                                  & (smoke_rows["optimizer"] == optimizer)]
                expected = {("sync", 0)} | {(arm, s) for arm in SIM_ARMS[sim] if arm != "sync" for s in STALENESS}
                assert set(zip(cell["arm"], cell["staleness"], strict=True)) == expected, (sim, structure, optimizer)
    assert not smoke_rows[smoke_rows["sim"] == "quadratic"]["arm"].isin(["tis", "kl_target", "vcpo"]).any()
    assert set(smoke_rows[smoke_rows["arm"] == "vcpo"]["sim"]) == {"bandit_gaussian"}
    assert set(smoke_rows[smoke_rows["arm"] == "vcpo"]["step_control"]) == {"vcpo"}
    assert smoke_rows[smoke_rows["sim"] == "quadratic"]["kl_behaviour"].isna().all()
    combos = smoke_rows[smoke_rows["arm"].isin(["gac+tis", "kl_target+gac"])]
    assert combos["gac_space"].isin(GAC_SPACES).all() and (combos["direction_control"] == "gac").all()
    assert set(smoke_rows[smoke_rows["arm"] == "kl_target+gac"]["step_control"]) == {"kl_target"}
    assert smoke_rows["best_lr"].isin(LR_GRID).all()


def _recomputed(runs: pd.DataFrame, optimizer: str, arm: str, staleness: int) -> tuple[float, float]:
    """(best lr on the tuning seeds, mean final gap on the reporting seeds there), from the per-run rows."""
    p = lookup("verdict_toys", "smoke")
    runs = runs[(runs["optimizer"] == optimizer) & (runs["key"] == arm) & (runs["staleness"] == staleness)]
    tuned = runs[runs["seed"] < p.tuning_seeds].groupby("lr")["final_gap"].mean()
    best = float(tuned[tuned == tuned.min()].index.min())
    return best, float(runs[(runs["seed"] >= p.tuning_seeds) & (runs["lr"] == best)]["final_gap"].mean())


@pytest.mark.parametrize("sim,structure,optimizer,arm,staleness", [
    ("bandit_gaussian", "llm", "adam", "tis", 16), ("bandit_gaussian", "one_update", "sgd_momentum", "naive", 4),
    ("quadratic", "one_update", "sgd_momentum", "gac_momentum", 16), ("quadratic", "one_update", "adam", "sync", 0),
    ("bandit_gaussian", "llm", "adam", "vcpo", 16)])
def test_rows_follow_the_protocol(smoke, sim, structure, optimizer, arm, staleness):
    smoke_rows, runs = smoke
    row = smoke_rows[(smoke_rows["sim"] == sim) & (smoke_rows["structure"] == structure)
                     & (smoke_rows["optimizer"] == optimizer) & (smoke_rows["arm"] == arm)
                     & (smoke_rows["staleness"] == staleness)].iloc[0]
    best, final = _recomputed(runs[(sim, structure)], optimizer, arm, staleness)
    assert row["best_lr"] == best and row["final"] == pytest.approx(final, rel=1e-12)
    cell = smoke_rows[(smoke_rows["sim"] == sim) & (smoke_rows["structure"] == structure)
                      & (smoke_rows["optimizer"] == optimizer)]
    sync = cell[cell["arm"] == "sync"]["final"].iloc[0]
    naive = cell[(cell["arm"] == "naive") & (cell["staleness"] == max(staleness, 4))]["final"].iloc[0]
    if arm not in ("sync",) and math.isfinite(naive) and naive != sync:
        assert row["gap_recovered"] == pytest.approx((naive - row["final"]) / (naive - sync))


def test_step_size_picked_on_reporting_seeds_is_caught(monkeypatch, smoke):
    """Mutation: the protocol picks each arm's step size on the reporting seeds (leaks the reported numbers)."""
    _, runs = smoke
    real = tuning.pick_lrs
    p = lookup("verdict_toys", "smoke")
    reporting = list(range(p.tuning_seeds, p.tuning_seeds + p.reporting_seeds))
    monkeypatch.setattr(tuning, "pick_lrs", lambda table, seeds: real(table, reporting))
    rows = pd.DataFrame(verdict_toys.toy_verdict_rows("smoke"))
    alone = rows[rows["arm"].isin(list(verdict_toys.ARMS))]
    mismatches = sum(r.best_lr != _recomputed(runs[(r.sim, r.structure)], r.optimizer, r.arm, r.staleness)[0]
                     for r in alone.itertuples(index=False))
    assert mismatches > 0


def test_cli_writes_the_table_and_refuses_a_bad_path(tmp_path, monkeypatch, capsys, smoke_rows):
    asked = []
    monkeypatch.setattr(verdict_toys, "toy_verdict_rows",
                        lambda profile: asked.append(profile) or smoke_rows.to_dict("records"))
    out = tmp_path / "verdict.csv"
    assert verdict_toys.main(["--profile", "full", "--out", str(out)]) == 0
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert asked == ["full"] and list(rows[0]) == list(COLUMNS) and len(rows) == len(smoke_rows)
    assert [float(r["final"]) for r in rows] == pytest.approx(smoke_rows["final"].tolist(), nan_ok=True)
    with pytest.raises(SystemExit):
        verdict_toys.main(["--profile", "quick", "--out", str(tmp_path / "missing" / "x.csv")])
    assert "--out must be a .csv" in capsys.readouterr().err
