"""Settings shared by the toy-simulator figures (quadratic and bandits), and the panel interface.

One place fixes the problems, step sizes and run lengths of every toy figure, so the figures agree
with each other. A figure made of panels (fig1, fig3) keeps a list of ``Panel``: ``run(profile,
device)`` returns record rows (with a ``sim`` column) and ``plot(axes, rows)`` draws them; the LLM
panels are appended to the same lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

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


@dataclass(frozen=True)
class Panel:
    """One panel of a multi-panel figure: runs produce rows (with a ``sim`` column), plot draws them."""

    name: str
    run: Callable[[str, str], list[dict]]
    plot: Callable[..., None]
    n_axes: int = 0
    """How many stacked axes ``plot`` draws on (0: the figure's default)."""


def stability_boundary(staleness: int) -> float:
    """a*(s) = 2 sin(π / (2(2s+1))): x_{t+1} = x_t − a x_{t−s} is stable iff 0 < a < a*(s).

    From theory/ when it is importable (``theory.stability.stability_boundary_closed_form``), else
    the same closed form here.
    """
    try:
        from theory.stability import stability_boundary_closed_form
    except ImportError:
        return 2.0 * math.sin(math.pi / (2 * (2 * staleness + 1)))
    return float(stability_boundary_closed_form(staleness))


def seed_median(rows: list[dict], key: str, **match) -> tuple[list[int], list[float]]:
    """Steps and the median over seeds of ``key`` among rows matching ``match`` (NaN-aware)."""
    by_step: dict[int, list[float]] = {}
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            by_step.setdefault(row["step"], []).append(row[key])
    steps = sorted(by_step)
    values = [float(torch.tensor(by_step[s], dtype=torch.float64).nanmedian()) for s in steps]
    return steps, values


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average (NaN-aware) for readable cosine traces."""
    if window <= 1:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    out = []
    for i in range(len(t)):
        chunk = t[max(0, i - window + 1): i + 1]
        chunk = chunk[~chunk.isnan()]
        out.append(float(chunk.mean()) if len(chunk) else float("nan"))
    return out
