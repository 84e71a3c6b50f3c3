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
        """Token ids (n, prompt_len) of "<bos>a+b=" with zero-padded operands."""
        rows = [[BOS, *encode(f"{a:0{self.digits}d}+{b:0{self.digits}d}=")] for a, b in operands.tolist()]
        return torch.tensor(rows, dtype=torch.long)

    def answers(self, operands: torch.Tensor) -> torch.Tensor:
        """Target answer ids (n, answer_len): the sum's digits, EOS, then PAD."""
        out = torch.full((len(operands), self.answer_len), PAD, dtype=torch.long)
        for row, (a, b) in enumerate(operands.tolist()):
            ids = [*encode(str(a + b)), EOS]
            out[row, : len(ids)] = torch.tensor(ids)
        return out

    def verify(self, operands: torch.Tensor, responses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(correct, well_formed) per response, as float tensors in {0, 1}.

        correct: the text before the first EOS is exactly the decimal sum (no leading zeros, EOS
        required). well_formed: the response is one or more digits followed by EOS.
        """
        correct, formed = [], []
        for (a, b), ids in zip(operands.tolist(), responses.tolist(), strict=True):
            has_eos = EOS in ids
            body = ids[: ids.index(EOS)] if has_eos else ids
            text = "".join(VOCAB[i] for i in body)
            is_digits = len(body) > 0 and all(ch.isdigit() for ch in text)
            formed.append(float(has_eos and is_digits))
            correct.append(float(has_eos and text == str(a + b)))
        return torch.tensor(correct), torch.tensor(formed)

    def reward(self, operands: torch.Tensor, responses: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(reward, correct, well_formed): reward = correct + format_weight · well_formed."""
        correct, formed = self.verify(operands, responses)
        return correct + self.format_weight * formed, correct, formed
