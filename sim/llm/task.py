"""The synthetic task: "<bos>ab+cd=" → the sum's digits then EOS, over a character vocabulary; reward = exact match.

Operands are zero-padded to ``digits`` characters, so every prompt has the same length (no left padding). A fixed
hash of (a, b) puts about a tenth of all problems in a held-out split that training never samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD, BOS, EOS = 0, 1, 2
VOCAB = ["<pad>", "<bos>", "<eos>", *"0123456789+="]
PLUS, EQUALS = VOCAB.index("+"), VOCAB.index("=")
DIGIT_IDS = torch.arange(VOCAB.index("0"), VOCAB.index("9") + 1)
HELDOUT_PER_MILLE = 100
"""The held-out split's share of all (a, b) pairs, per thousand."""


def digit_ids(numbers: torch.Tensor, width: int) -> torch.Tensor:
    """Token ids (n, width) of ``numbers`` (n,) in decimal, zero-padded on the left."""
    return DIGIT_IDS[numbers[:, None] // 10 ** torch.arange(width - 1, -1, -1) % 10]


def through_first_eos(tokens: torch.Tensor) -> torch.Tensor:
    """Mask (n, T) of the tokens up to and including the first EOS of each row."""
    return torch.cumsum((tokens == EOS).long(), dim=1) - (tokens == EOS).long() == 0


@dataclass(frozen=True)
class AdditionTask:
    """Addition of two ``digits``-digit numbers (the difficulty)."""

    digits: int = 2
    """Operand width in decimal digits: operands are uniform in [0, 10^digits)."""

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 6:
            raise ValueError(f"task digits must be in 1..6, got {self.digits}")

    @property
    def answer_len(self) -> int:
        """Tokens the policy may generate: the sum has at most digits + 1 digits, then EOS."""
        return self.digits + 2

    def is_heldout(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The fixed split: a multiplicative hash of (a, b)."""
        key = (a * 1_000_003 + b * 7_919 + 12_345) * 2_654_435_761 % 4_294_967_296
        return (key % 1000) < HELDOUT_PER_MILLE

    def sample_operands(self, n: int, generator: torch.Generator, heldout: bool = False) -> torch.Tensor:
        """``n`` operand pairs (n, 2) from the train split (or the held-out split), by rejection."""
        chunks, have = [], 0
        while have < n:
            pairs = torch.randint(0, 10 ** self.digits, (2 * n + 16, 2), generator=generator)
            chunks.append(pairs[self.is_heldout(pairs[:, 0], pairs[:, 1]) == heldout])
            have += len(chunks[-1])
        return torch.cat(chunks)[:n]

    def distinct_pairs(self, n: int, seed: int, heldout: bool) -> torch.Tensor:
        """``n`` distinct operand pairs of one split chosen by ``seed`` (all of them when it holds fewer); a smaller
        ``n`` gives the first ``n`` of the same pairs. Up to 3 digits the split is enumerated and permuted, wider
        operands are drawn and repeats dropped."""
        high, generator = 10 ** self.digits, torch.Generator().manual_seed(seed)
        if high * high <= 1_000_000:
            grid = torch.cartesian_prod(torch.arange(high), torch.arange(high))
            pairs = grid[self.is_heldout(grid[:, 0], grid[:, 1]) == heldout]
            return pairs[torch.randperm(len(pairs), generator=generator)[:n]]
        chosen: dict = {}
        while len(chosen) < n:
            chosen |= dict.fromkeys(map(tuple, self.sample_operands(n, generator, heldout).tolist()))
        return torch.tensor(list(chosen)[:n], dtype=torch.long)

    def heldout_set(self, n: int) -> torch.Tensor:
        """The fixed held-out problems of every evaluation (distinct: standard error ≤ 0.5/√n)."""
        return self.distinct_pairs(n, 1234, heldout=True)

    def prompts(self, operands: torch.Tensor) -> torch.Tensor:
        """Token ids (n, 2·digits + 3) of "<bos>a+b="."""
        column = lambda token: torch.full((len(operands), 1), token, dtype=torch.long)
        return torch.cat([column(BOS), digit_ids(operands[:, 0], self.digits), column(PLUS),
                          digit_ids(operands[:, 1], self.digits), column(EQUALS)], dim=1)

    def answers(self, operands: torch.Tensor) -> torch.Tensor:
        """Target answer ids (n, answer_len): the sum's digits (no leading zeros), EOS, then PAD."""
        total, width = operands.sum(1), self.digits + 1
        length = (total.clamp_min(1).double().log10().floor().long() + 1).clamp_max(width)  # digits of the sum
        position = torch.arange(self.answer_len)[None]
        source = (position + width - length[:, None]).clamp_max(width - 1)  # skip the zero-padding's leading zeros
        out = torch.where(position < length[:, None], digit_ids(total, width).gather(1, source), PAD)
        return torch.where(position == length[:, None], EOS, out)

    def verify(self, operands: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """The reward: 1.0 where a response's tokens up to and including its first EOS are the sum and EOS, else 0."""
        answers = self.answers(operands)  # one EOS each
        return ((responses.cpu() == answers) | ~through_first_eos(answers)).all(1).float()
