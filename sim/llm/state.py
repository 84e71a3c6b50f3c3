"""The state of a batch of GRPO runs in lockstep, and of each run in it: the types the trainer's modules share.

``BatchState`` holds θ and AdamW's state as (K, P) rows, GAC's placement state, the probes' previous vectors and the
step; ``RunState`` what one run carries alone. The trainer's step (``batched``), its controls, probes and
checkpoints all read and write these; this module imports none of them, so the package has no import circle
(an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

import gac
from gac.cosine64 import Float64Vector, as_float64, cosine64
from sim.llm.args import Args
from sim.llm.rows import AdamWRows
from sim.llm.stacked import Layout
from sim.llm.task import AdditionTask
from sim.staleness import VersionRing


class NonFiniteError(FloatingPointError):
    """A non-finite loss or gradient; the message names the RL step (and the run, in a batch of several)."""


@dataclass
class PrevRows:
    """Each run's previous vector (as float64, kept for the next cosine) and which runs have one yet."""

    vector: Float64Vector | None = None
    known: torch.Tensor | None = None

    def cosine(self, current: Float64Vector) -> list[float]:
        """cos(current row, previous row) per run; NaN where a run has no previous vector yet."""
        if self.vector is None:
            return [math.nan] * current.source.shape[0]
        cos = cosine64(current, self.vector)
        return torch.where(self.known, cos, torch.full_like(cos, math.nan)).tolist()

    def set(self, current: Float64Vector, rows: torch.Tensor) -> None:
        """The runs ``rows`` (bool, K) take ``current``'s row as their previous vector; the others keep theirs."""
        if self.vector is None or bool(rows.all()):
            self.vector, self.known = current, rows.clone() if self.known is None else self.known | rows
            return
        pick = rows[:, None]
        self.vector = Float64Vector(torch.where(pick, current.source, self.vector.source),
                                    torch.where(pick, current.scaled, self.vector.scaled),
                                    torch.where(rows, current.sq, self.vector.sq))
        self.known = self.known | rows

    def state_dict(self) -> dict:
        return {"source": None if self.vector is None else self.vector.source, "known": self.known}

    @classmethod
    def from_state_dict(cls, state: dict) -> PrevRows:
        source = state["source"]
        return cls(None if source is None else as_float64(source), state["known"])


@dataclass
class RunState:
    """What one run of the batch carries alone: its args, staleness schedule and ring, generator, records."""

    args: Args
    schedule: torch.Tensor
    ring: VersionRing
    generator: torch.Generator
    warm_info: dict
    records: list = field(default_factory=list)
    diverged_at: int | None = None


@dataclass
class BatchState:
    """K runs in lockstep: θ and the optimizer state as (K, P) rows, the per-run parts in ``runs``."""

    runs: list[RunState]
    layout: Layout
    task: AdditionTask
    heldout: torch.Tensor
    theta: torch.Tensor
    reference: torch.Tensor
    adam: AdamWRows
    gac_state: gac.GACState | None = None
    space_state: gac.GACState | None = None
    step_grad_reference: torch.Tensor | None = None
    prev: dict = field(default_factory=lambda: {name: PrevRows() for name in ("raw", "applied", "delta", "step_grad")})
    step: int = 0

    @property
    def args(self) -> Args:
        """The first run's args: their shared fields are every run's."""
        return self.runs[0].args

    @property
    def live(self) -> list[int]:
        """Indices of the runs still training (a run marked diverged stops; the others go on)."""
        return [k for k, run in enumerate(self.runs) if run.diverged_at is None]


__all__ = ["BatchState", "NonFiniteError", "PrevRows", "RunState"]
