"""The toy scales (noisy quadratic and bandits): their problems and step sizes, and the sweeps of the multi-scale
figures (fig1's cosine panels, fig3's divergence panels).

One place fixes the problems and step sizes of every toy figure, so the figures agree with each other; their run
lengths are the ``toy`` profiles of ``experiments.profiles``.
"""

from __future__ import annotations

from experiments.profiles import lookup
from sim.bandit import GaussianBandit, SoftmaxBandit, run_bandit
from sim.grid import GridResult, Setting, setting
from sim.quadratic import QuadraticProblem, run_quadratic

STALENESS = (0, 1, 2, 4, 8, 16)

QUADRATIC = QuadraticProblem(dim=100, condition_number=100.0, curvature_max=1.0, noise=0.1)
QUADRATIC_LR = 0.3
"""η with η·λ_max = 0.3: sync is far inside its stability region (a*(0) = 2)."""

GAUSSIAN = GaussianBandit(dim=10, condition_number=10.0, policy_std=0.5)
GAUSSIAN_LR = 0.2
KARMED = SoftmaxBandit(arms=10)
CONTEXTUAL = SoftmaxBandit(arms=10, contexts=16, features="linear", feature_dim=8)
SOFTMAX_LR = 1.0
BANDIT_GROUPS, BANDIT_GROUP_SIZE = 4, 16


def async_settings(lr: float) -> list[Setting]:
    """Naive async at every staleness of STALENESS (s = 0 is sync)."""
    return [setting("naive", s, lr) for s in STALENESS]


def with_run_summary(result: GridResult) -> list[dict]:
    """Per-step rows, each carrying its run's mean cosine after warm-up (run_mean_cos_prev), its mean cosine over
    all steps before divergence (run_mean_cos_prev_alive) and whether it diverged (run_diverged)."""
    summary = {(r["label"], r["staleness"], r["seed"]): r for r in result.summary_rows()}
    rows = result.records()
    for row in rows:
        s = summary[(row["label"], row["staleness"], row["seed"])]
        row["run_mean_cos_prev"] = s["mean_cos_prev"]
        row["run_mean_cos_prev_alive"] = s["mean_cos_prev_alive"]
        row["run_diverged"] = s["diverged"]
    return rows


COSINE_BANDITS = {"bandit_gaussian": (GAUSSIAN, GAUSSIAN_LR), "bandit_softmax": (KARMED, SOFTMAX_LR)}


def cosine_rows(sim: str, profile: str, device: str = "cpu") -> list[dict]:
    """fig1's toy panels: naive async at every staleness on ``sim`` (quadratic or a COSINE_BANDITS key)."""
    p = lookup("toy", profile)
    if sim == "quadratic":
        result = run_quadratic(QUADRATIC, async_settings(QUADRATIC_LR), p.quad_steps, p.seeds, seed=0,
                               record_every=p.record_every, progress=True, device=device)
    else:
        problem, lr = COSINE_BANDITS[sim]
        result = run_bandit(problem, async_settings(lr), p.bandit_steps, p.seeds, seed=0, groups=BANDIT_GROUPS,
                            group_size=BANDIT_GROUP_SIZE, record_every=p.record_every, progress=True)
    return with_run_summary(result)


DIVERGENCE_STALENESS = 16


def divergence_settings(lr: float) -> list[Setting]:
    """fig3: sync, naive async and async + GAC (the registry's default configuration) at DIVERGENCE_STALENESS."""
    s = DIVERGENCE_STALENESS
    return [setting("naive", 0, lr), setting("naive", s, lr), setting("gac", s, lr)]


def divergence_rows(sim: str, profile: str, device: str = "cpu") -> list[dict]:
    """fig3's toy panels: per-step records of ``divergence_settings`` on the quadratic or the Gaussian bandit."""
    p = lookup("toy", profile)
    if sim == "quadratic":
        return run_quadratic(QUADRATIC, divergence_settings(QUADRATIC_LR), p.quad_steps, p.seeds,
                             record_every=p.record_every, progress=True, device=device).records()
    if sim != "bandit_gaussian":
        raise ValueError(f"fig3 has no {sim!r} panel; choose quadratic or bandit_gaussian")
    return run_bandit(GAUSSIAN, divergence_settings(GAUSSIAN_LR), p.bandit_steps, p.seeds, groups=BANDIT_GROUPS,
                      group_size=BANDIT_GROUP_SIZE, record_every=p.record_every, progress=True).records()
