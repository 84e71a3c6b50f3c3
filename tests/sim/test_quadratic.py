"""The vectorized quadratic: determinism, grid = separate runs = a plain per-run loop, divergence marking."""

import torch

import gac
from sim.grid import setting
from sim.quadratic import DIVERGENCE_FACTOR, NoiseStream, QuadraticProblem, run_quadratic
from tests.records import same_records

PROBLEM = QuadraticProblem(dim=6, condition_number=10.0, noise=0.3)
GRID = [setting("naive", 0, 0.3), setting("naive", 3, 0.3), setting("lr_scale", 3, 0.3),
        setting("dc", 2, 0.3), setting("gac", 3, 0.3), setting("gac", 3, 0.3, mode="cap", threshold=0.5),
        setting("gac", 2, 0.3, threshold_rule="ema"), setting("naive", 4, 0.3, staleness_kind="random"),
        setting("gac", 2, 0.05, optimizer="adam", space="update")]


def test_same_seed_same_records_other_seed_differs():
    a = run_quadratic(PROBLEM, GRID, 30, seeds=2, seed=7).records()
    b = run_quadratic(PROBLEM, GRID, 30, seeds=2, seed=7).records()
    c = run_quadratic(PROBLEM, GRID, 30, seeds=2, seed=8).records()
    assert same_records(a, b)  # NaN (a cosine against a zero vector) equal to NaN
    assert [r["objective"] for r in a] != [r["objective"] for r in c]


def test_grid_equals_each_setting_alone():
    grid = run_quadratic(PROBLEM, GRID, 40, seeds=3, seed=1)
    for i, s in enumerate(GRID):
        alone = run_quadratic(PROBLEM, [s], 40, seeds=3, seed=1)
        for name in ("objective", "cos_prev", "cos_applied", "parallel_scale", "regime"):
            torch.testing.assert_close(grid.traces[name][:, grid.rows_of(i)], alone.traces[name], rtol=0, atol=0,
                                       equal_nan=True, msg=f"{s} {name}")


def _loop_run(problem, staleness, lr, method, steps, seeds, seed, dc_lambda=0.04):
    """Plain per-run loop of the same arithmetic (one run at a time, explicit history list)."""
    curv = problem.curvatures()
    stream = NoiseStream(seed, seeds, problem.dim)
    draws = [stream.next()[1] for _ in range(steps)]
    cfg = gac.GACConfig(threshold=0.0)
    losses = torch.zeros(steps, seeds, dtype=torch.float64)
    for k in range(seeds):
        x = torch.full((problem.dim,), problem.init_scale, dtype=torch.float64)
        history, prev = [x.clone()], torch.zeros(problem.dim, dtype=torch.float64)
        for t in range(steps):
            stale = history[max(0, t - staleness)]
            g = curv * stale + problem.noise * draws[t][k]
            step_lr = lr / (1 + staleness) if method == "lr_scale" else lr
            if method == "dc":
                g_used = g + dc_lambda * g * g * (x - stale)
            elif method == "gac":
                g_used = gac.control(g, prev, cfg).grad
            else:
                g_used = g
            prev = g
            x = x - step_lr * g_used
            history.append(x.clone())
            losses[t, k] = 0.5 * (curv * x * x).sum()
    return losses


def test_grid_equals_plain_per_run_loop():
    settings = [setting("naive", 2, 0.3), setting("lr_scale", 3, 0.3), setting("dc", 2, 0.3), setting("gac", 3, 0.3)]
    grid = run_quadratic(PROBLEM, settings, 25, seeds=2, seed=3)
    for i, s in enumerate(settings):
        loop = _loop_run(PROBLEM, s.staleness, s.lr, s.method, 25, 2, 3)
        assert torch.allclose(grid.traces["objective"][:, grid.rows_of(i)], loop, rtol=1e-12, atol=1e-14), s


def test_divergence_is_marked_and_frozen():
    problem = QuadraticProblem(dim=4, condition_number=2.0, noise=0.0)
    result = run_quadratic(problem, [setting("naive", 4, 1.0), setting("naive", 0, 0.5)], 200, seeds=1)
    assert bool(result.summary["diverged"][0]) and not bool(result.summary["diverged"][1])
    step = int(result.summary["diverged_step"][0])
    assert result.traces["objective"][step, 0] > DIVERGENCE_FACTOR * 0.5 * problem.curvatures().sum()
    assert torch.isnan(result.traces["cos_prev"][step + 1:, 0]).all()
    assert result.summary["final_objective"][0] == float("inf")
    rows = result.records()
    assert any(r["diverged"] for r in rows) and len(rows) == 400  # marked, never dropped


def test_gac_skip_leaves_params_and_adam_state():
    # Noise-free, s large: consecutive gradients identical ⇒ cos = 1 > τ_skip ⇒ the step after a kept one skips; a
    # skip restarts the reference (gac.update), so the step after it is kept: skip and keep alternate.
    problem = QuadraticProblem(dim=3, noise=0.0)
    result = run_quadratic(problem, [setting("gac", 5, 0.1, threshold=0.5, skip_threshold=0.9)], 10, seeds=1)
    regimes, objective = result.traces["regime"][:, 0], result.traces["objective"][:, 0]
    assert regimes[1::2].eq(gac.SKIP).all() and regimes[0::2].eq(gac.KEEP).all()
    assert torch.equal(objective[1::2], objective[0::2])  # the objective after a skipped step: θ left as it was
    assert (objective[2::2] < objective[1:-1:2]).all()  # ... a kept one moves it


def test_run_started_at_the_optimum_is_not_marked_diverged():
    # Regression: the divergence limit was 1e6 * f(x_0), i.e. 0 when x_0 = 0, so noise alone "diverged".
    from sim.grid import setting
    from sim.quadratic import QuadraticProblem, run_quadratic

    problem = QuadraticProblem(dim=20, condition_number=10.0, noise=0.1, init_scale=0.0)
    stable = run_quadratic(problem, [setting("naive", 0, 0.3)], steps=50, seeds=2)
    assert not any(stable.summary["diverged"].tolist())
    unstable = run_quadratic(problem, [setting("naive", 8, 1.0)], steps=400, seeds=2)  # a = 1 > a*(8)
    assert all(unstable.summary["diverged"].tolist())
