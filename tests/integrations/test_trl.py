"""GAC inside TRL's GRPOTrainer, end to end on CPU: a tiny Qwen3 built in code, an in-memory task."""

import math

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import gac  # noqa: E402
from gac.integrations.trl import add_gac  # noqa: E402


def char_tokenizer() -> PreTrainedTokenizerFast:
    chars = list("0123456789+=")
    vocab = {"<pad>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")


def tiny_qwen3(vocab_size: int) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=1, tie_word_embeddings=True)
    return Qwen3ForCausalLM(config)


def addition_dataset(n: int = 16) -> Dataset:
    gen = torch.Generator().manual_seed(0)
    pairs = torch.randint(0, 50, (n, 2), generator=gen).tolist()
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in pairs])


def digit_reward(completions, answer, **kwargs):
    """Exact match, plus a small shaping term (share of digit characters) so that groups have variance."""
    return [float(c == a) + sum(ch.isdigit() for ch in c) / 8 for c, a in zip(completions, answer, strict=True)]


def test_grpo_trainer_with_gac_logs_finite_metrics(tmp_path):
    tokenizer = char_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, max_steps=2, logging_steps=1, report_to=[], bf16=False,
                      save_strategy="no", seed=0, learning_rate=1e-3)
    trainer = GRPOTrainer(model=tiny_qwen3(len(tokenizer)), reward_funcs=digit_reward, args=args,
                          train_dataset=addition_dataset(), processing_class=tokenizer)
    callback = add_gac(trainer, gac.GACConfig(threshold=0.0))
    trainer.train()
    assert callback.tracker.step == 2  # GAC ran at both optimizer steps
    logged = [row for row in trainer.state.log_history if "gac/cosine" in row]
    assert len(logged) == 2
    for row in logged:
        for key in ("gac/cosine", "gac/regime", "gac/parallel_scale", "gac/grad_norm_before", "gac/grad_norm_after"):
            assert math.isfinite(row[key])
    assert logged[0]["gac/cosine"] == 0.0  # no reference yet at the first step
    assert logged[1]["gac/grad_norm_before"] > 0  # a real gradient reached GAC
    assert logged[1]["gac/grad_norm_after"] <= logged[1]["gac/grad_norm_before"] + 1e-9
