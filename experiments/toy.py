"""The toy scales (noisy quadratic and bandits): their problems, step sizes and the one profile table.

One place fixes the problems, step sizes and run lengths of every toy figure, so the figures agree
with each other; the LLM scale has its own table in ``experiments.llm``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.bandit import GaussianBandit, SoftmaxBandit
from sim.quadratic import QuadraticProblem

STALENESS = (0, 1, 2, 4, 8, 16)
HIGH_STALENESS = (8, 16)

QUADRATIC = QuadraticProblem(dim=100, condition_number=100.0, curvature_max=1.0, noise=0.1)
QUADRATIC_LR = 0.3
"""η with η·λ_max = 0.3: sync is far inside its stability region (a*(0) = 2)."""

GAUSSIAN = GaussianBandit(dim=10, condition_number=10.0, policy_std=0.5)
GAUSSIAN_LR = 0.2
KARMED = SoftmaxBandit(arms=10)
CONTEXTUAL = SoftmaxBandit(arms=10, contexts=16, features="linear", feature_dim=8)
SOFTMAX_LR = 1.0
BANDIT_GROUPS, BANDIT_GROUP_SIZE = 4, 16


@dataclass(frozen=True)
class Profile:
    quad_steps: int
    bandit_steps: int
    seeds: int
    record_every: int


# "smoke" is for tests only (tiny runs, numbers meaningless); the CLI offers quick and full.


PROFILES = {"smoke": Profile(quad_steps=40, bandit_steps=30, seeds=2, record_every=5),
            "quick": Profile(quad_steps=1000, bandit_steps=400, seeds=4, record_every=5),
            "full": Profile(quad_steps=3000, bandit_steps=1500, seeds=16, record_every=5)}


def profile_of(name: str) -> Profile:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}")
    return PROFILES[name]
