"""Which parameter version produced the data (or gradient) used at step t.

Two models share these schedules: stale-gradient g_t = ∇f(θ_{t−s}) and
stale-data (rollouts from π_{θ_{t−s}}). Sync is s = 0; bounded-random staleness draws
s_t ∈ {0..s_max} uniformly each step; the first steps use θ_0 (version = max(0, t − s_t)).
Buffers hold only s_max + 1 versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

KINDS = ("fixed", "random")


@dataclass(frozen=True)
class Staleness:
    """A staleness schedule: ``fixed`` s at every step, or ``random`` s_t ~ U{0..max_staleness}."""

    max_staleness: int
    kind: str = "fixed"

    def __post_init__(self) -> None:
        if isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int):
            raise ValueError(f"staleness must be an integer, got {self.max_staleness!r}")
        if self.max_staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {self.max_staleness}")
        if self.kind not in KINDS:
            raise ValueError(f"staleness kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def capacity(self) -> int:
        """How many past versions a buffer must hold: s_max + 1."""
        return self.max_staleness + 1

    def sample(self, steps: int, generator: torch.Generator | None = None, batch: tuple[int, ...] = ()) -> torch.Tensor:
        """Staleness s_t for steps 0..steps−1 (shape (steps, *batch)), as int64."""
        shape = (steps, *batch)
        if self.kind == "fixed" or self.max_staleness == 0:
            return torch.full(shape, self.max_staleness, dtype=torch.int64)
        return torch.randint(0, self.max_staleness + 1, shape, generator=generator, dtype=torch.int64)


class VersionRing:
    """Ring buffer of the last ``capacity`` versions of any object (e.g. a model state_dict)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"VersionRing capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._slots: list[tuple[int, Any] | None] = [None] * capacity

    def push(self, version: int, value: Any) -> None:
        self._slots[version % self.capacity] = (version, value)

    def get(self, version: int) -> Any:
        slot = self._slots[version % self.capacity]
        if slot is None or slot[0] != version:
            held = sorted(s[0] for s in self._slots if s is not None)
            raise KeyError(f"version {version} is not in the ring (holds {held})")
        return slot[1]

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "slots": list(self._slots)}

    def load_state_dict(self, state: dict) -> None:
        self.capacity, self._slots = int(state["capacity"]), list(state["slots"])


class TensorVersionBuffer:
    """Past versions of a batched state x of shape (B, ...): row b can read its own version.

    Costs memory for ``capacity`` versions only. ``get(versions)`` gathers, for each row b, the row
    b of the stored version ``versions[b]`` — one indexing op for a whole grid of runs.
    """

    def __init__(self, initial: torch.Tensor, capacity: int):
        if capacity < 1:
            raise ValueError(f"TensorVersionBuffer capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.data = initial.unsqueeze(0).repeat(capacity, *([1] * initial.dim())).clone()
        self.stored = torch.zeros(capacity, dtype=torch.int64)  # which version each slot holds

    def push(self, version: int, x: torch.Tensor) -> None:
        self.data[version % self.capacity] = x
        self.stored[version % self.capacity] = version

    def get(self, versions_per_row: torch.Tensor) -> torch.Tensor:
        slots = versions_per_row % self.capacity
        if not torch.equal(self.stored[slots], versions_per_row):
            raise KeyError("TensorVersionBuffer: a requested version was evicted or never pushed")
        rows = self.data.shape[1]
        # Row b of slot k is row k·B + b of the flattened store: one index_select, faster than a 2-D gather.
        flat = self.data.reshape(self.capacity * rows, *self.data.shape[2:])
        return flat.index_select(0, slots * rows + torch.arange(rows, device=slots.device))
