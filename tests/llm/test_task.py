import torch

from sim.llm.task import EOS, PAD, AdditionTask, decode, encode


def ids(text: str, length: int, eos: bool = True) -> list[int]:
    out = encode(text) + ([EOS] if eos else [])
    return out + [PAD] * (length - len(out))


def test_verifier_on_known_right_and_wrong_answers():
    task = AdditionTask(digits=2)
    operands = torch.tensor([[12, 34], [99, 99], [5, 7], [12, 34], [12, 34], [0, 0], [99, 1]])
    L = task.answer_len
    responses = torch.tensor([
        ids("46", L),            # right
        ids("198", L),           # right, three digits
        ids("12", L),            # right with carry
        ids("046", L),           # leading zero: wrong
        ids("46", L, eos=False),  # no EOS: wrong (and not well formed)
        ids("0", L),             # right
        ids("10", L),            # wrong sum
    ])
    correct, formed = task.verify(operands, responses)
    assert correct.tolist() == [1, 1, 1, 0, 0, 1, 0]
    assert formed.tolist() == [1, 1, 1, 1, 0, 1, 1]
    reward, _, _ = AdditionTask(digits=2, format_weight=0.5).reward(operands, responses)
    assert reward.tolist() == [1.5, 1.5, 1.5, 0.5, 0.0, 1.5, 0.5]


def test_prompts_answers_and_tokenizer_roundtrip():
    task = AdditionTask(digits=3)
    operands = torch.tensor([[7, 993]])
    assert decode(task.prompts(operands)[0]) == "007+993="
    assert decode(task.answers(operands)[0]) == "1000"
    assert task.prompts(operands).shape == (1, task.prompt_len)


def test_split_is_disjoint_and_sized():
    task = AdditionTask(digits=2, heldout_fraction=0.1)
    a, b = torch.meshgrid(torch.arange(100), torch.arange(100), indexing="ij")
    fraction = task.is_heldout(a.reshape(-1), b.reshape(-1)).float().mean().item()
    assert 0.07 < fraction < 0.13
    g = torch.Generator().manual_seed(0)
    train = task.sample_operands(500, g)
    assert not task.is_heldout(train[:, 0], train[:, 1]).any()
    held = task.heldout_set(64)
    assert task.is_heldout(held[:, 0], held[:, 1]).all()
    assert torch.equal(held, task.heldout_set(64))
