import torch

from sim.llm.task import EOS, PAD, VOCAB, AdditionTask


def ids(text: str, length: int, eos: bool = True) -> list[int]:
    out = [VOCAB.index(ch) for ch in text] + ([EOS] if eos else [])
    return out + [PAD] * (length - len(out))


def text(ids) -> str:
    return "".join(VOCAB[i] for i in ids.tolist() if i not in (PAD, EOS)).replace("<bos>", "")


def test_verifier_on_known_right_and_wrong_answers():
    task = AdditionTask(digits=2)
    operands = torch.tensor([[12, 34], [99, 99], [5, 7], [12, 34], [12, 34], [0, 0], [99, 1]])
    L = task.answer_len
    responses = torch.tensor([
        ids("46", L),            # right
        ids("198", L),           # right, three digits
        ids("12", L),            # right with carry
        ids("046", L),           # leading zero: wrong
        ids("46", L, eos=False),  # no EOS: wrong
        ids("0", L),             # right
        ids("10", L),            # wrong sum
    ])
    assert task.verify(operands, responses).tolist() == [1, 1, 1, 0, 0, 1, 0]


def test_prompts_answers_and_tokenizer_roundtrip():
    task = AdditionTask(digits=3)
    operands = torch.tensor([[7, 993]])
    assert text(task.prompts(operands)[0]) == "007+993="
    assert text(task.answers(operands)[0]) == "1000"


def test_split_is_disjoint_and_sized():
    task = AdditionTask(digits=2)
    a, b = torch.meshgrid(torch.arange(100), torch.arange(100), indexing="ij")
    fraction = task.is_heldout(a.reshape(-1), b.reshape(-1)).float().mean().item()
    assert 0.07 < fraction < 0.13
    g = torch.Generator().manual_seed(0)
    train = task.sample_operands(500, g)
    assert not task.is_heldout(train[:, 0], train[:, 1]).any()
    held = task.heldout_set(64)
    assert task.is_heldout(held[:, 0], held[:, 1]).all()
    assert torch.equal(held, task.heldout_set(64))
