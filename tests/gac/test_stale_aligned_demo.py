"""The teaching demo of notebooks 01 and 03 (run_quadratic on a 200-dim noisy quadratic, η·λ_max = 0.5):
stale gradients align and diverge; GAC keeps the run finite."""

from sim.grid import setting
from sim.quadratic import QuadraticProblem, run_quadratic

FLAT = QuadraticProblem(dim=200, condition_number=100, curvature_max=0.5, noise=0.1)


def test_stale_gradients_align_and_diverge_gac_stays_finite():
    settings = [setting("naive", 0, 1.0), setting("naive", 8, 1.0), setting("gac", 8, 1.0, threshold=0.0)]
    grid = run_quadratic(FLAT, settings, steps=300, seeds=4)
    cos, loss, diverged = grid.traces["cos_prev"], grid.traces["objective"], grid.summary["diverged"]
    sync, stale, controlled = (grid.rows_of(i) for i in range(3))
    after_warmup = slice(50, 90)  # before the stale runs diverge
    assert cos[after_warmup, sync].mean() < 0.2
    assert cos[after_warmup, stale].mean() > 0.8
    assert not diverged[sync].any() and diverged[stale].all() and not diverged[controlled].any()
    assert loss[-1, controlled].median() < 10 * loss[-1, sync].median()
