"""The per-digit partial-credit reward that ``python -m experiments.snr --reward partial`` measures the SNR under (not
the paper's reward, exact match); apart from experiments/snr.py, whose command line loads no torch."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim.llm.task import PAD, AdditionTask


@dataclass(frozen=True)
class PartialCreditTask(AdditionTask):
    """Addition with per-digit partial credit: the reward is the share of the answer's tokens (the sum's digits and
    its closing EOS) that the response has right, position by position; 1 exactly when the answer is exact. Not the
    paper's reward (exact match)."""

    def verify(self, operands: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        answers = self.answers(operands)
        scored = answers != PAD
        return (((responses.cpu() == answers) & scored).sum(1) / scored.sum(1)).float()
