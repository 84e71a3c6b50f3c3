"""The policy: a Qwen3-architecture causal LM (``transformers``) built from a small config in code.

Nothing is downloaded. ``build_model(size)`` makes a fresh model from a named size; ``load_model``
reads a local checkpoint directory (``save_pretrained`` format). ``sample`` is the rollout sampler:
one prefill, then one token at a time through the model's KV cache, every prompt of the batch at
once; its uniforms come from a CPU generator, so samples do not depend on the device's RNG.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

from sim.llm.task import EOS, PAD, VOCAB

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

# transformers 5 renamed the KV-cache argument `past_key_values` to `cache`; support both.
_CACHE_ARG = "cache" if "cache" in inspect.signature(Qwen3ForCausalLM.forward).parameters else "past_key_values"


def _step(model, ids: torch.Tensor, cache=None):
    """One cached forward: (logits at the last position, the updated cache)."""
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **({_CACHE_ARG: cache} if cache is not None else {}))
    return out.logits[:, -1], getattr(out, _CACHE_ARG)

# Named sizes: (hidden, layers, heads, kv_heads, head_dim, mlp). "tiny" (19k parameters) is for tests,
# "small" (0.6M) for the quick figure sweep, "cpu" (1.2M) the CPU default, "gpu" (25M) one GPU.
SIZES = {
    "tiny": (32, 2, 2, 1, 16, 64),
    "small": (128, 4, 4, 2, 32, 256),
    "cpu": (128, 6, 4, 2, 32, 384),
    "gpu": (512, 8, 8, 4, 64, 1536),
}


def model_config(size: str) -> Qwen3Config:
    """The Qwen3Config of a named size (vocabulary = the task's characters, tied embeddings)."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choose from {', '.join(SIZES)}")
    hidden, layers, heads, kv_heads, head_dim, mlp = SIZES[size]
    return Qwen3Config(
        vocab_size=len(VOCAB), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, head_dim=head_dim, intermediate_size=mlp, max_position_embeddings=64,
        tie_word_embeddings=True, pad_token_id=PAD, bos_token_id=1, eos_token_id=EOS,
        attention_dropout=0.0, use_sliding_window=False, attn_implementation="sdpa")


def build_model(size: str, seed: int) -> Qwen3ForCausalLM:
    """A freshly initialised model of ``size`` (initialisation seeded by ``seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(model_config(size)).float()


def check_model_dir(path: str | Path) -> Qwen3Config:
    """The config of a local checkpoint directory; one-line ValueError if absent, unreadable or not this task's."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise ValueError(f"--model {path}: no config.json there (expected a save_pretrained directory)")
    try:
        config = Qwen3Config.from_pretrained(path, local_files_only=True)
    except Exception as err:  # transformers raises several kinds (OSError, JSONDecodeError, TypeError)
        raise ValueError(f"--model {path}: config.json is not a readable model config ({type(err).__name__})") from None
    if config.vocab_size != len(VOCAB):
        raise ValueError(f"--model {path}: vocab_size {config.vocab_size} != this task's {len(VOCAB)}")
    return config


def load_model(path: str | Path) -> Qwen3ForCausalLM:
    """A model from a local checkpoint directory (config.json + weights); fails with one line if absent."""
    check_model_dir(path)
    return Qwen3ForCausalLM.from_pretrained(Path(path), local_files_only=True, torch_dtype=torch.float32)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def sample(model, prompts: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None,
           temperature: float = 1.0, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses for equal-length ``prompts`` (n, L) with the KV cache.

    Returns (responses, logprobs, mask), each (n, max_new_tokens): token ids (PAD after EOS), the
    sampling policy's log-probability of each token (temperature included), and which tokens belong
    to the response (up to and including the first EOS).
    """
    device = next(model.parameters()).device
    prompts = prompts.to(device)
    n = prompts.shape[0]
    logits, cache = _step(model, prompts)
    responses = torch.full((n, max_new_tokens), PAD, dtype=torch.long, device=device)
    logprobs = torch.zeros((n, max_new_tokens), device=device)
    mask = torch.zeros((n, max_new_tokens), dtype=torch.bool, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        if greedy:
            token = logp.argmax(-1)
        else:
            # Inverse-CDF sampling from CPU uniforms: the same samples on every device.
            uniform = torch.rand(n, 1, generator=generator).to(device)
            token = torch.searchsorted(logp.exp().cumsum(-1), uniform).squeeze(1).clamp_max(logp.shape[-1] - 1)
        live = ~finished
        responses[:, t] = torch.where(live, token, PAD)
        logprobs[:, t] = torch.where(live, logp.gather(1, token[:, None]).squeeze(1), 0.0)
        mask[:, t] = live
        finished = finished | (token == EOS)
        if t + 1 == max_new_tokens or bool(finished.all()):
            break
        logits, cache = _step(model, token[:, None], cache)
    return responses, logprobs, mask


def token_logprobs(model, prompts: torch.Tensor, responses: torch.Tensor,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(response token), entropy of π at that position), each (n, T), by one full forward."""
    prompt_len = prompts.shape[1]
    ids = torch.cat([prompts, responses], dim=1)
    logits = model(input_ids=ids).logits[:, prompt_len - 1 : -1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(2, responses[:, :, None]).squeeze(2)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
