"""The fast sampler against two independent paths: the HF-forward sampler and a full forward pass.

A wrong KV cache (stale positions, rows mixed up by the shared prefill) changes the log-probs of the
sampled tokens; the mutation tests patch such a cache in and expect the checks to catch it.
"""

import json

import pytest
import torch

from sim.llm import model as model_module
from sim.llm.model import build_model, load_model, sample, sample_reference, token_logprobs
from sim.llm.task import AdditionTask

TASK = AdditionTask(digits=2)


def grouped_prompts(n_prompts=8, group=4, seed=0):
    """GRPO's layout: each prompt repeated ``group`` times (the shared-prefill path)."""
    prompts = TASK.prompts(TASK.sample_operands(n_prompts, torch.Generator().manual_seed(seed)))
    return prompts.repeat_interleave(group, 0)


def distinct_prompts(n=24, seed=0):
    """Distinct prompts in unsorted order (the one-to-one prefill path)."""
    prompts = TASK.prompts(TASK.sample_operands(n, torch.Generator().manual_seed(seed)))
    prompts = torch.unique(prompts, dim=0)
    return prompts[torch.randperm(prompts.shape[0], generator=torch.Generator().manual_seed(seed))]


def max_error_against_full_forward(model, prompts, temperature=1.0, greedy=False, max_new_tokens=None):
    responses, logp, mask = sample(model, prompts, max_new_tokens or TASK.answer_len,
                                   torch.Generator().manual_seed(1), temperature, greedy)
    full, _ = token_logprobs(model, prompts, responses, temperature)
    # Relative to 1 + |log p|: float32 sums in another order differ by ~1e-5 at log p ≈ −5, and by up to 2e-5 where
    # temperature 0.5 doubles the logits of a model that is sure of itself (seen with the committed tiny warm start).
    return float(((logp[mask] - full[mask]).abs() / (1 + full[mask].abs())).max())


TOLERANCE = 1e-4
"""5× the largest rounding difference seen; a wrong KV cache (the mutation tests below) errs by more than 1e-3."""


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    # A trained model (EOS early, rows finish at different steps), a random one (full-length answers), and
    # a frozen copy like the trainer's behaviour policy (weights without grad change torch's matmul path).
    return {"trained": load_model(tiny_checkpoint).eval(), "random": build_model("tiny", seed=5).eval(),
            "frozen": load_model(tiny_checkpoint).eval().requires_grad_(False)}


@pytest.mark.parametrize("which", ["trained", "random", "frozen"])
@pytest.mark.parametrize("layout", [grouped_prompts, distinct_prompts])
@pytest.mark.parametrize("temperature,greedy", [(1.0, False), (0.5, False), (1.0, True)])
def test_same_tokens_and_logprobs_as_the_reference_sampler(models, which, layout, temperature, greedy):
    model, prompts = models[which], layout()
    g_fast, g_ref = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    fast = sample(model, prompts, TASK.answer_len, g_fast, temperature, greedy)
    ref = sample_reference(model, prompts, TASK.answer_len, g_ref, temperature, greedy)
    assert torch.equal(fast[0], ref[0]) and torch.equal(fast[2], ref[2])
    # The same modules on the same inputs: equal to the bit here (the trainer's records stay the same).
    assert torch.equal(fast[1], ref[1])
    # The trainer keeps drawing from the generator: both samplers must leave it in the same state.
    assert torch.equal(g_fast.get_state(), g_ref.get_state())


@pytest.mark.parametrize("layout", [grouped_prompts, distinct_prompts])
def test_logprobs_equal_a_full_forward(models, layout):
    for model in models.values():
        assert max_error_against_full_forward(model, layout()) < TOLERANCE
        assert max_error_against_full_forward(model, layout(), temperature=0.5, max_new_tokens=9) < TOLERANCE


def test_the_trained_model_finishes_rows_at_different_steps(models):
    # Guards the early-EOS path the comparisons above rely on.
    _, _, mask = sample(models["trained"], grouped_prompts(), TASK.answer_len, torch.Generator().manual_seed(1))
    lengths = mask.sum(1)
    assert lengths.min() < lengths.max()


def test_a_stale_cache_position_is_caught(models, monkeypatch):
    lean_forward = model_module._lean_forward

    def off_by_one(model, ids, cos, sin, cache, start, rows=None):
        # Decode steps write and read one position too early: the cache loses the last prompt token.
        return lean_forward(model, ids, cos, sin, cache, start - 1 if start else 0, rows)

    monkeypatch.setattr(model_module, "_lean_forward", off_by_one)
    assert max_error_against_full_forward(models["random"], grouped_prompts()) > 1e-3


def test_mixed_up_prefill_rows_are_caught(models, monkeypatch):
    unique = torch.unique

    def shifted_rows(x, **kwargs):
        # Every repeated prompt gets the keys and values of the next distinct prompt.
        distinct, rows = unique(x, **kwargs)
        return distinct, (rows + 1) % distinct.shape[0]

    monkeypatch.setattr(model_module.torch, "unique", shifted_rows)
    assert max_error_against_full_forward(models["random"], grouped_prompts()) > 1e-3


def test_training_records_are_the_same_with_either_sampler(tiny_args, tiny_checkpoint, monkeypatch):
    """The trainer samples K runs at once through ``stacked.sample``; with each run sampled alone through the
    HF forward and cache (``sample_reference`` on an HF model holding that run's row) the records are the same."""
    from sim.llm import stacked
    from sim.llm import train as train_module

    args = dict(method="tis", staleness=2, staleness_kind="random")
    fast = train_module.run_records(tiny_args(**args), log=lambda *a: None)["records"]
    model = load_model(tiny_checkpoint)

    def one_run_at_a_time(layout, theta, prompts, max_new_tokens, generators=None, temperature=1.0, greedy=False,
                          group=1):
        out = [sample_reference(stacked.load_row(model, row), p, max_new_tokens,
                                None if generators is None else generators[k], temperature, greedy)
               for k, (row, p) in enumerate(zip(theta, prompts, strict=True))]
        return tuple(torch.stack(parts) for parts in zip(*out, strict=True))

    monkeypatch.setattr(stacked, "sample", one_run_at_a_time)
    reference = train_module.run_records(tiny_args(**args), log=lambda *a: None)["records"]
    # json writes NaN (the schema's "not measured") as NaN on both sides, so unmeasured columns compare equal.
    assert json.dumps(reference) == json.dumps(fast)
