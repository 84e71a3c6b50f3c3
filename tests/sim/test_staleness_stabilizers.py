"""Staleness schedules/buffers and each stabilizer against hand-computed examples."""

import math
import os
import stat

import pytest
import torch

import gac
from runtime.files import atomic_write_bytes, read_records, write_records
from sim import stabilizers
from sim.grid import setting
from sim.schema import columns, make_row
from sim.staleness import Staleness, TensorVersionBuffer, VersionRing
from tests.records import same_records


def test_random_staleness_in_bounds_and_fixed():
    gen = torch.Generator().manual_seed(0)
    draws = Staleness(4, "random").sample(500, gen)
    assert draws.min() == 0 and draws.max() == 4
    assert Staleness(2).sample(3).tolist() == [2, 2, 2]
    with pytest.raises(ValueError):
        Staleness(-1)


def test_version_ring_returns_right_version_and_evicts():
    ring = VersionRing(3)
    for v in range(5):
        ring.push(v, f"theta{v}")
    assert [ring.get(v) for v in (2, 3, 4)] == ["theta2", "theta3", "theta4"]
    with pytest.raises(KeyError):
        ring.get(1)


def test_tensor_buffer_rows_read_their_own_version():
    buf = TensorVersionBuffer(torch.zeros(3, 2), capacity=3)
    for v in range(1, 5):
        buf.push(v, torch.full((3, 2), float(v)) + torch.arange(3.0)[:, None] * 10)
    got = buf.get(torch.tensor([4, 3, 2]))
    assert got[:, 0].tolist() == [4.0, 13.0, 22.0]
    with pytest.raises(KeyError):
        buf.get(torch.tensor([1, 4, 4]))
    assert buf.data.shape[0] == 3  # memory for s_max + 1 versions only


def test_dc_by_hand():
    g, now, stale = torch.tensor([2.0, -1.0]), torch.tensor([1.0, 1.0]), torch.tensor([0.5, 2.0])
    # g + λ g⊙g⊙(θ_t − θ_{t−s}) with λ = 0.5: [2 + .5·4·.5, −1 + .5·1·(−1)] = [3, −1.5]
    assert stabilizers.delay_compensated_gradient(g, now, stale, 0.5).tolist() == [3.0, -1.5]


def test_tis_weights_by_hand():
    w = stabilizers.tis_weights(torch.tensor([0.0, math.log(1.5), math.log(5.0)]), tis_cap=2.0)
    assert torch.allclose(w, torch.tensor([1.0, 1.5, 2.0]))


def test_m2po_mask_by_hand_and_rows_agree():
    log_r = torch.tensor([0.1, -0.3, 0.0, 0.5])  # squares .01 .09 0 .25; prefix means 0, .005, .0333, .0875
    assert stabilizers.m2po_mask(log_r, m2_threshold=0.04).tolist() == [True, True, True, False]
    gen = torch.Generator().manual_seed(1)
    rows = torch.randn(5, 12, generator=gen, dtype=torch.float64) * 0.3
    taus = torch.tensor([0.01, 0.04, 0.1, 1.0, 0.0], dtype=torch.float64)
    batched = stabilizers.m2po_mask_rows(rows, taus)
    for i in range(5):
        assert batched[i].tolist() == stabilizers.m2po_mask(rows[i], m2_threshold=float(taus[i])).tolist()


def test_gac_config_from_registry_and_errors():
    cfg = stabilizers.gac_config(threshold_rule="ema", mode="cap")
    assert isinstance(cfg.threshold, gac.EMAThreshold) and cfg.mode == "cap"
    with pytest.raises(ValueError):
        stabilizers.gac_config(space="weights")
    with pytest.raises(ValueError):
        setting("gac", 4, 0.1, bogus=1)
    with pytest.raises(ValueError):
        setting("gac", 4, 0.1, space="update")  # update space needs Adam
    with pytest.raises(ValueError):
        setting("naive", -1, 0.1)


def test_record_row_and_writers(tmp_path):
    row = make_row("quadratic", step=3, seed=0, method="gac", staleness=8, objective=1.5, grad_norm=2.0, cos_prev=0.7,
                   cos_applied=0.1, regime="project", parallel_scale=0.0, lr=0.1, diverged=False)
    assert list(row) == list(columns("quadratic"))
    write_records([row], tmp_path / "r.csv")
    write_records([row], tmp_path / "r.jsonl")
    assert read_records(tmp_path / "r.csv")[0]["regime"] == "project"
    back = read_records(tmp_path / "r.jsonl")[0]
    assert list(back) == list(row)
    assert same_records([back], [row]) and same_records(read_records(tmp_path / "r.csv"), [row])  # typed, NaN too


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_follow_the_umask(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        path = atomic_write_bytes(tmp_path / "out.csv", b"a\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_bytes() == b"a\n" and not list(tmp_path.glob(".*.tmp"))
