"""The synthetic task: multi-digit addition with a verifiable answer, and its character tokenizer.

A problem is "ab+cd=" with both operands zero-padded to ``digits`` characters (every prompt has the
same length, so a batch needs no padding on the left); the answer is the sum's decimal digits
followed by EOS. A fixed hash of (a, b) puts about ``heldout_fraction`` of all problems in a held-out
split that training never samples. Reward = exact-match correctness; a format term (answer is only
digits, terminated by EOS) is computed and reported separately, added to the reward only with a weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD, BOS, EOS = 0, 1, 2
CHARS = "0123456789+="
VOCAB = ["<pad>", "<bos>", "<eos>", *CHARS]
TOKEN_ID = {ch: i for i, ch in enumerate(VOCAB)}
DIGIT_IDS = torch.tensor([TOKEN_ID[str(d)] for d in range(10)])


def digit_ids(numbers: torch.Tensor, width: int) -> torch.Tensor:
    """Token ids (n, width) of ``numbers`` (n,) in decimal, zero-padded on the left."""
    powers = 10 ** torch.arange(width - 1, -1, -1)
    return DIGIT_IDS[numbers[:, None] // powers % 10]


def encode(text: str) -> list[int]:
    """Character ids of ``text`` (characters must be digits, '+' or '=')."""
    try:
        return [TOKEN_ID[ch] for ch in text]
    except KeyError as err:
        raise ValueError(f"character {err.args[0]!r} is not in the task's vocabulary {CHARS!r}") from None


def decode(ids) -> str:
    """Text of token ids up to the first EOS (PAD and BOS dropped)."""
    out = []
    for i in (ids.tolist() if torch.is_tensor(ids) else ids):
        if i == EOS:
            break
        if i not in (PAD, BOS):
            out.append(VOCAB[i])
    return "".join(out)


@dataclass(frozen=True)
class AdditionTask:
    """Addition of two ``digits``-digit numbers (difficulty = digits); held-out split by a fixed hash."""

    digits: int = 2
    """Operand width in decimal digits (the difficulty): operands are uniform in [0, 10^digits)."""
    heldout_fraction: float = 0.1
    """Fraction of all (a, b) pairs reserved for held-out evaluation (never sampled for training)."""
    format_weight: float = 0.0
    """Weight of the format term in the reward (0: reward is exact-match correctness only)."""

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 6:
            raise ValueError(f"task digits must be in 1..6, got {self.digits}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if self.format_weight < 0.0:
            raise ValueError(f"format_weight must be >= 0, got {self.format_weight}")

    @property
    def prompt_len(self) -> int:
        """BOS + a + '+' + b + '='."""
        return 2 * self.digits + 3

    @property
    def answer_len(self) -> int:
        """Tokens the policy may generate: the sum has at most digits + 1 digits, then EOS."""
        return self.digits + 2

    def is_heldout(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Fixed split: a multiplicative hash of (a, b) modulo 1000 below heldout_fraction·1000."""
        key = (a * 1_000_003 + b * 7_919 + 12_345) * 2_654_435_761 % 4_294_967_296
        return (key % 1000) < int(round(self.heldout_fraction * 1000))

    def sample_operands(self, n: int, generator: torch.Generator, heldout: bool = False) -> torch.Tensor:
        """``n`` operand pairs (n, 2) from the train split (or the held-out split), by rejection."""
        high = 10 ** self.digits
        chunks, have = [], 0
        while have < n:
            pairs = torch.randint(0, high, (2 * n + 16, 2), generator=generator)
            pairs = pairs[self.is_heldout(pairs[:, 0], pairs[:, 1]) == heldout]
            chunks.append(pairs)
            have += len(pairs)
        return torch.cat(chunks)[:n]

    def heldout_set(self, n: int, seed: int = 1234) -> torch.Tensor:
        """A fixed set of ``n`` distinct held-out operand pairs (the same for every run), fewer when the split holds
        fewer (1 digit: about 10).

        Distinct, so that ``n`` problems measure accuracy with standard error ≤ 0.5/√n (1000: ≤ 0.016). Up to 3
        digits every held-out pair is enumerated and the first ``n`` of a seeded permutation taken; wider operands
        are drawn by rejection, duplicates dropped in order.
        """
        high = 10 ** self.digits
        if high * high <= 1_000_000:
            grid = torch.cartesian_prod(torch.arange(high), torch.arange(high))
            pairs = grid[self.is_heldout(grid[:, 0], grid[:, 1])]
            order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))
            return pairs[order[:n]]
        generator, seen, chosen = torch.Generator().manual_seed(seed), set(), []
        while len(chosen) < n:
            for a, b in self.sample_operands(n, generator, heldout=True).tolist():
                if (a, b) not in seen and len(chosen) < n:
                    seen.add((a, b))
                    chosen.append((a, b))
        return torch.tensor(chosen, dtype=torch.long)

    def train_set(self, n: int, seed: int) -> torch.Tensor:
        """``n`` distinct train-split operand pairs chosen by ``seed`` (all of them when the split holds fewer):
        the finite supervised data set of a warm start."""
        high = 10 ** self.digits
        if high * high <= 1_000_000:
            grid = torch.cartesian_prod(torch.arange(high), torch.arange(high))
            pairs = grid[~self.is_heldout(grid[:, 0], grid[:, 1])]
            return pairs[torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))[:n]]
        pairs = torch.unique(self.sample_operands(2 * n, torch.Generator().manual_seed(seed)), dim=0)
        return pairs[torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))[:n]]

    def prompts(self, operands: torch.Tensor) -> torch.Tensor:
        """Token ids (n, prompt_len) of "<bos>a+b=" with zero-padded operands, computed as tensors."""
        n = len(operands)
        column = lambda token: torch.full((n, 1), TOKEN_ID[token], dtype=torch.long)
        return torch.cat([torch.full((n, 1), BOS, dtype=torch.long), digit_ids(operands[:, 0], self.digits),
                          column("+"), digit_ids(operands[:, 1], self.digits), column("=")], dim=1)

    def answers(self, operands: torch.Tensor) -> torch.Tensor:
        """Target answer ids (n, answer_len): the sum's digits (no leading zeros), EOS, then PAD."""
        total = operands.sum(1)
        width = self.digits + 1
        length = (total.clamp_min(1).double().log10().floor().long() + 1).clamp_max(width)  # digits of the sum
        padded = digit_ids(total, width)  # zero-padded to `width`; shift left by the leading zeros
        position = torch.arange(self.answer_len)[None]
        source = (position + width - length[:, None]).clamp_max(width - 1)
        out = torch.where(position < length[:, None], padded.gather(1, source), PAD)
        return torch.where(position == length[:, None], EOS, out)

    def verify(self, operands: torch.Tensor, responses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(correct, well_formed) per response, as float tensors in {0, 1}.

        correct: the tokens up to and including the first EOS are exactly the decimal sum and EOS. well_formed: the
        response is one or more digits followed by EOS.
        """
        responses = responses.cpu()
        answers = self.answers(operands)
        through_eos = torch.cumsum((answers == EOS).long(), dim=1) - (answers == EOS).long() == 0
        correct = ((responses == answers) | ~(through_eos | (answers == EOS))).all(1)
        is_eos = responses == EOS
        first = torch.where(is_eos.any(1), is_eos.long().argmax(1), -1)
        before = torch.arange(responses.shape[1])[None] < first[:, None]
        is_digit = (responses >= DIGIT_IDS[0]) & (responses <= DIGIT_IDS[-1])
        formed = (first >= 1) & (is_digit | ~before).all(1)
        return correct.float(), formed.float()

    def reward(self, operands: torch.Tensor, responses: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(reward, correct, well_formed): reward = correct + format_weight · well_formed."""
        correct, formed = self.verify(operands, responses)
        return correct + self.format_weight * formed, correct, formed
