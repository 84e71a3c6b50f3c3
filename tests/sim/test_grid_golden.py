"""Saved-trajectory test: the toy grids' traces and summaries must not change under speed work.

``tests/data/grid_golden.npz`` holds every trace and summary tensor of small quadratic and bandit grids
covering each update path (none, GAC project / cap / skip / EMA threshold / EMA reference / per-row τ,
lr_scale, DC, SGD and Adam, gradient and update space, fixed and random staleness, divergence;
bandits with none / gac / tis / m2po / bapo). Regenerate only for an intended change in the numbers:
``python -m tests.sim.test_grid_golden``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit
from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "grid_golden.npz"

QUADRATIC = [
    setting("none", 0, 0.3), setting("none", 3, 0.3), setting("lr_scale", 3, 0.3), setting("dc", 2, 0.3),
    setting("gac", 3, 0.3), setting("gac", 3, 0.3, threshold=0.2), setting("gac", 3, 0.3, mode="cap", threshold=0.5),
    setting("gac", 5, 0.3, threshold=0.2, skip_threshold=0.5), setting("gac", 2, 0.3, threshold_rule="ema"),
    setting("gac", 3, 0.3, reference="ema"), setting("none", 4, 0.3, staleness_kind="random"),
    setting("gac", 4, 0.3, staleness_kind="random", mode="cap", threshold=0.3), setting("none", 0, 2.5),
    setting("none", 2, 0.05, optimizer="adam"), setting("lr_scale", 2, 0.05, optimizer="adam"),
    setting("gac", 2, 0.05, optimizer="adam"), setting("gac", 2, 0.05, optimizer="adam", space="update"),
]
BANDIT = [
    setting("none", 0, 0.5), setting("none", 3, 0.5), setting("gac", 3, 0.5), setting("tis", 3, 0.5),
    setting("m2po", 3, 0.5), setting("bapo", 3, 0.5), setting("gac", 4, 0.5, staleness_kind="random"),
    setting("none", 2, 0.05, optimizer="adam"),
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


def test_grids_reproduce_saved_trajectories_bit_for_bit():
    torch.manual_seed(0)  # the runs use their own generators; this only guards against global-RNG use
    saved = np.load(GOLDEN)
    fresh = flatten(golden_results())
    assert sorted(fresh) == sorted(saved.files), "recorded fields changed: regenerate only if intended"
    for key in saved.files:
        expected, got = saved[key], fresh[key]
        assert got.dtype == expected.dtype and got.shape == expected.shape, key
        assert np.array_equal(got, expected, equal_nan=True), f"{key} differs from the saved trajectory"


def test_cached_scaling_gives_gac_alignment_bit_for_bit_at_extreme_scales():
    """The grid's cosine from kept scalings equals ``gac.alignment``, also for subnormal, huge and zero rows."""
    from gac import alignment
    from sim.grid import _Scaled

    gen = torch.Generator().manual_seed(7)
    scales = torch.tensor([1.0, 2.0**-1070, 1e-300, 1e300, 1e307, 0.0, 3.0], dtype=torch.float64)[:, None]
    g = torch.randn(7, 5, generator=gen, dtype=torch.float64) * scales
    d = torch.randn(7, 5, generator=gen, dtype=torch.float64) * scales
    expected = alignment(g, d)
    assert torch.equal(_Scaled.of(g).cosine(_Scaled.of(d)), expected)
    assert expected[1] != 0 and expected[5] == 0  # the subnormal row has a cosine, the zero row none


if __name__ == "__main__":
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    tmp = GOLDEN.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **flatten(golden_results()))
    tmp.replace(GOLDEN)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
