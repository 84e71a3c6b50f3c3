"""ZeroRedundancyOptimizer is refused at wrap time in one line (issue 51, item 6): it shards the optimizer state over
the ranks and saves only its own consolidated state, so GAC's reference (kept in the wrapped optimizer's state)
would be missing from a checkpoint and a resume would crash."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import gac


def test_zero_redundancy_optimizer_is_refused_at_wrap_time(tmp_path):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 2)
        zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=0.1)
        with pytest.raises(ValueError, match="ZeroRedundancyOptimizer") as info:
            gac.wrap(zero, gac.GACConfig(threshold=0.3))
        assert "\n" not in str(info.value) and "FSDP" in str(info.value)
        assert not getattr(zero, "_gac_wrapped", False)  # refused before anything was changed
    finally:
        dist.destroy_process_group()
