"""Saved-trajectory test: the toy grids' traces and summaries must not change under speed work.

``tests/data/grid_golden.npz`` holds every trace and summary tensor of small quadratic and bandit grids
covering each update path (naive, GAC project / cap / skip / EMA threshold / EMA reference / per-row τ,
lr_scale, DC, SGD and Adam, gradient and update space, fixed and random staleness, divergence;
bandits with naive / gac / tis / m2po / bapo). Regenerate only for an intended change in the numbers:
``python -m tests.sim.test_grid_golden``.

Bits are pinned only within one machine (the grids computed twice). The saved file, written on another machine,
is compared with a tolerance: float fields within ``RTOL`` of each trajectory's scale (its largest finite |value|
over the steps; a summary field's over the rows), so near-zero entries do not blow up; integer and boolean fields
(GAC regimes, divergence flags and steps) exactly; NaN and ±inf in the same places. Why ``RTOL = 1e-10``: another
CPU's kernels (e.g. ``ATEN_CPU_CAPABILITY=default`` vs ``avx2``) round differently, about one ulp (1.1e-16) per
reduction; the grids amplify a relative change of every step size by 1e-15 to 1.1e-12 of scale (measured),
so ~1e3×, and the observed cross-kernel differences are ≤ 3e-13. 1e-10 leaves 300× margin over that, and a
relative change of 1e-12 in the step sizes already moves the trajectories by 9e-10.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit
from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "grid_golden.npz"
RTOL = 1e-10

QUADRATIC = [
    setting("naive", 0, 0.3), setting("naive", 3, 0.3), setting("lr_scale", 3, 0.3), setting("dc", 2, 0.3),
    setting("gac", 3, 0.3), setting("gac", 3, 0.3, threshold=0.2), setting("gac", 3, 0.3, mode="cap", threshold=0.5),
    setting("gac", 5, 0.3, threshold=0.2, skip_threshold=0.5), setting("gac", 2, 0.3, threshold_rule="ema"),
    setting("gac", 3, 0.3, reference="ema"), setting("naive", 4, 0.3, staleness_kind="random"),
    setting("gac", 4, 0.3, staleness_kind="random", mode="cap", threshold=0.3), setting("naive", 0, 2.5),
    setting("naive", 2, 0.05, optimizer="adam"), setting("lr_scale", 2, 0.05, optimizer="adam"),
    setting("gac", 2, 0.05, optimizer="adam"), setting("gac", 2, 0.05, optimizer="adam", space="update"),
]
BANDIT = [
    setting("naive", 0, 0.5), setting("naive", 3, 0.5), setting("gac", 3, 0.5), setting("tis", 3, 0.5),
    setting("m2po", 3, 0.5), setting("bapo", 3, 0.5), setting("gac", 4, 0.5, staleness_kind="random"),
    setting("naive", 2, 0.05, optimizer="adam"),
]


def golden_results() -> dict:
    """The grids of the saved trajectories, run fresh."""
    quadratic = QuadraticProblem(dim=12, condition_number=50.0, noise=0.3)
    return {
        "quadratic": run_quadratic(quadratic, QUADRATIC, 40, seeds=2, seed=3),
        "gaussian": run_bandit(GaussianBandit(dim=6), BANDIT, 30, seeds=2, seed=5, groups=2, group_size=4),
        "softmax": run_bandit(SoftmaxBandit(arms=4, contexts=3, features="linear", feature_dim=3), BANDIT, 30,
                              seeds=2, seed=6, groups=3, group_size=4),
    }


def flatten(results: dict) -> dict[str, np.ndarray]:
    """name/traces/field and name/summary/field → array, plus each grid's recorded steps."""
    arrays = {}
    for name, result in results.items():
        arrays[f"{name}/steps"] = result.steps.numpy()
        for kind, values in (("traces", result.traces), ("summary", result.summary)):
            for field, tensor in values.items():
                arrays[f"{name}/{kind}/{field}"] = tensor.numpy()
    return arrays


def golden_mismatches(saved, fresh: dict[str, np.ndarray], rtol: float = RTOL) -> list[str]:
    """The fields of ``fresh`` that differ from ``saved`` beyond the cross-machine tolerance (see the docstring)."""
    bad = []
    for key in saved.files:
        expected, got = saved[key], fresh[key]
        if got.dtype != expected.dtype or got.shape != expected.shape:
            bad.append(f"{key}: {got.dtype}{got.shape} != saved {expected.dtype}{expected.shape}")
        elif expected.dtype.kind != "f":  # regimes, divergence flags and steps: the decisions, exactly
            if not np.array_equal(got, expected):
                bad.append(f"{key}: {int((got != expected).sum())} discrete entries differ")
        elif not np.array_equal(np.isfinite(got), np.isfinite(expected)) or not np.array_equal(
                got[~np.isfinite(got)], expected[~np.isfinite(expected)], equal_nan=True):
            bad.append(f"{key}: NaN/inf in other places")
        else:
            finite = np.isfinite(expected)  # the same places in both (checked above)
            scale = np.where(finite, np.abs(expected), 0.0)
            scale = scale.max(axis=0, keepdims=True) if "/traces/" in key else scale.max()
            error = np.abs(np.where(finite, got, 0.0) - np.where(finite, expected, 0.0))
            if (error > rtol * scale).any():
                bad.append(f"{key}: off by {float((error / np.maximum(scale, 1e-300)).max()):.1e} of its scale")
    return bad


@pytest.fixture(scope="module")
def fresh_grids() -> dict[str, np.ndarray]:
    torch.manual_seed(0)  # the runs use their own generators; this only guards against global-RNG use
    return flatten(golden_results())


def test_grids_are_bit_identical_when_run_twice_on_this_machine(fresh_grids):
    again = flatten(golden_results())
    assert sorted(again) == sorted(fresh_grids)
    for key, values in fresh_grids.items():
        assert np.array_equal(values, again[key], equal_nan=True), f"{key} differs between two runs"


def test_grids_reproduce_saved_trajectories_within_cross_machine_tolerance(fresh_grids):
    saved = np.load(GOLDEN)
    assert sorted(fresh_grids) == sorted(saved.files), "recorded fields changed: regenerate only if intended"
    assert golden_mismatches(saved, fresh_grids) == []


if __name__ == "__main__":
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    tmp = GOLDEN.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **flatten(golden_results()))
    tmp.replace(GOLDEN)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
