"""The Qwen3 model of sim/llm/model.py against Hugging Face's implementation, and its KV-cache sampler against a
full forward."""

import torch

from sim.llm.model import build_model, load_model, sample, save_model, token_logprobs
from sim.llm.task import EOS, AdditionTask


def test_logits_equal_transformers_qwen3(tiny_checkpoint, tmp_path):
    """The same checkpoint through transformers' Qwen3ForCausalLM (an independent implementation): the same logits,
    for the committed warm start and for a fresh model saved by save_model."""
    from transformers import Qwen3ForCausalLM

    fresh = tmp_path / "fresh"
    save_model(build_model("small", seed=3), fresh)
    ids = torch.randint(3, 15, (6, 11), generator=torch.Generator().manual_seed(0))
    for folder in (tiny_checkpoint, fresh):
        ours = load_model(folder)
        theirs = Qwen3ForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
        with torch.no_grad():
            assert torch.allclose(ours(ids), theirs(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


def test_kv_cache_sampler_matches_a_full_forward(tiny_checkpoint):
    """Log-probabilities the sampler records equal one full forward of prompt + response, for grouped prompts (the
    prefill shared by a group) and distinct ones, sampled and greedy; the mask ends at the first EOS."""
    model, task = load_model(tiny_checkpoint), AdditionTask(digits=1)
    operands = task.sample_operands(6, torch.Generator().manual_seed(1))
    for prompts, group in ((task.prompts(operands.repeat_interleave(4, 0)), 4), (task.prompts(operands), 1)):
        for temperature, greedy in ((1.0, False), (0.5, False), (1.0, True)):
            tokens, logp, mask = sample(model, prompts, task.answer_len, torch.Generator().manual_seed(2),
                                        temperature, greedy, group=group)
            with torch.no_grad():
                full, _ = token_logprobs(model, prompts, tokens, temperature)
            assert torch.allclose(logp * mask, full * mask, atol=1e-5)
            ends = (tokens == EOS).long().cumsum(1) - (tokens == EOS).long()
            assert torch.equal(mask, ends == 0)


def test_grouped_prefill_gives_the_samples_of_repeated_prompts(tiny_checkpoint):
    model, task = load_model(tiny_checkpoint), AdditionTask(digits=1)
    prompts = task.prompts(task.sample_operands(3, torch.Generator().manual_seed(4)).repeat_interleave(5, 0))
    grouped = sample(model, prompts, task.answer_len, torch.Generator().manual_seed(5), group=5)
    alone = sample(model, prompts, task.answer_len, torch.Generator().manual_seed(5), group=1)
    assert torch.equal(grouped[0], alone[0]) and torch.allclose(grouped[1], alone[1], atol=1e-6)


def test_save_and_load_roundtrip(tmp_path):
    model = build_model("tiny", seed=0)
    save_model(model, tmp_path / "m")
    again = load_model(tmp_path / "m")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                 strict=True))
