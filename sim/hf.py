"""Bridges from the LLM task (``sim.llm``) to Hugging Face trainers (TRL, the ``trl`` extra), for GAC in TRL
(docs/usage.md, tests/integrations/test_trl.py): a tokenizer with the task's character ids (so ``sim.llm.model``
checkpoints work with it), the model as a ``transformers`` one, a dataset of prompts and answers, and an exact-match
reward. The trainer (``sim.llm``) uses none of it."""

from __future__ import annotations

import torch

from sim.llm.task import BOS, EOS, PAD, VOCAB, AdditionTask


def hf_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` over the task's vocabulary (ids as in sim.llm.task)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({token: i for i, token in enumerate(VOCAB)}, unk_token=VOCAB[PAD]))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()  # characters join without spaces
    # Prompts start with <bos>, as in sim.llm.task.AdditionTask.prompts.
    backend.post_processor = processors.TemplateProcessing(single=f"{VOCAB[BOS]} $A",
                                                           special_tokens=[(VOCAB[BOS], BOS)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=VOCAB[PAD], bos_token=VOCAB[BOS],
                                   eos_token=VOCAB[EOS])


def hf_model(source):
    """``sim.llm.model``'s Qwen3 — a model, or a checkpoint folder ``save_model`` wrote (Hugging Face's layout) — as
    a ``transformers`` Qwen3ForCausalLM with the same weights, for trainers that need a ``PreTrainedModel``."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if not isinstance(source, torch.nn.Module):
        return Qwen3ForCausalLM.from_pretrained(source, local_files_only=True, dtype=torch.float32)
    config = Qwen3Config(**{k: v for k, v in source.config.items() if k not in ("architectures", "torch_dtype")})
    model = Qwen3ForCausalLM(config).float()
    model.load_state_dict(source.state_dict(), strict=False)  # the head is tied to the embedding
    model.tie_weights()
    return model


def grpo_dataset(task: AdditionTask, n: int, seed: int = 0):
    """``n`` training-split problems as a ``datasets.Dataset`` with columns prompt ("ab+cd=") and answer."""
    from datasets import Dataset

    operands = task.sample_operands(n, torch.Generator().manual_seed(seed))
    return Dataset.from_list([{"prompt": f"{a:0{task.digits}d}+{b:0{task.digits}d}=", "answer": str(a + b)}
                              for a, b in operands.tolist()])


def exact_match_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """TRL reward function: 1.0 where the completion (special tokens stripped) is exactly the sum."""
    return [float(completion.strip() == target) for completion, target in zip(completions, answer, strict=True)]
