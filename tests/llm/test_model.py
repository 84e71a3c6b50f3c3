import torch

from sim.llm.model import build_model, load_model, sample, token_logprobs
from sim.llm.task import EOS, AdditionTask


def test_kv_cache_sampler_matches_a_full_forward(tiny_checkpoint):
    model = load_model(tiny_checkpoint).eval()
    task = AdditionTask(digits=2)
    g = torch.Generator().manual_seed(0)
    prompts = task.prompts(task.sample_operands(16, g))
    responses, logp, mask = sample(model, prompts, task.answer_len, torch.Generator().manual_seed(1))
    full, _ = token_logprobs(model, prompts, responses)
    assert torch.allclose(logp[mask], full[mask], atol=1e-5)
    again, _, _ = sample(model, prompts, task.answer_len, torch.Generator().manual_seed(1))
    assert torch.equal(responses, again)
    # Nothing after the first EOS belongs to the response.
    after_eos = torch.cumsum((responses == EOS).long(), 1) - (responses == EOS).long() > 0
    assert not (mask & after_eos).any()


def test_save_and_load_roundtrip(tmp_path):
    model = build_model("tiny", seed=3)
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
