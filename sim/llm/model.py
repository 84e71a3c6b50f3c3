"""The policy: a Qwen3-architecture causal LM (``transformers``) built from a small config in code.

Nothing is downloaded. ``build_model(size)`` makes a fresh model from a named size; ``load_model``
reads a local checkpoint directory (``save_pretrained`` format). ``sample`` is the rollout sampler:
one prefill of the distinct prompts, then one token at a time through a preallocated KV cache, every
prompt of the batch at once, calling the HF modules directly; its uniforms come from a CPU generator,
so samples do not depend on the device's RNG. ``sample_reference`` is the same sampler through the
HF forward and cache (slower; the independent path of the tests and the benchmark's baseline).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

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


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
"""The weight files ``save_pretrained`` writes (one of them, with or without shards)."""


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
    if not any((path / name).exists() for name in WEIGHT_FILES):
        raise ValueError(f"--model {path}: no weights there (none of {', '.join(WEIGHT_FILES)}); save the model "
                         "with save_pretrained into that folder")
    return config


def load_model(path: str | Path) -> Qwen3ForCausalLM:
    """A model from a local checkpoint directory (config.json + weights); one-line ValueError if absent or damaged."""
    check_model_dir(path)
    try:
        return Qwen3ForCausalLM.from_pretrained(Path(path), local_files_only=True, torch_dtype=torch.float32)
    except Exception as err:  # safetensors, torch and transformers raise several kinds for truncated weights
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ValueError(f"--model {path}: the weights cannot be loaded ({reason}); save the model again with "
                         "save_pretrained") from None


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _choose(logits: torch.Tensor, generator, temperature: float, greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(next token, log-probability of every token) from the last position's logits."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    if greedy:
        return logp.argmax(-1), logp
    # Inverse-CDF sampling from CPU uniforms: the same samples on every device.
    uniform = torch.rand(logp.shape[0], 1, generator=generator).to(logp.device)
    token = torch.searchsorted(logp.exp().cumsum(-1), uniform).squeeze(1).clamp_max(logp.shape[-1] - 1)
    return token, logp


def _decode(logits: torch.Tensor, advance, max_new_tokens: int, generator, temperature: float,
            greedy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decode loop shared by both samplers: ``advance(token, t)`` feeds token t and returns the next logits.

    One row of uniforms per generated position, none after every row has finished, so the generator
    ends in the same state whichever sampler ran.
    """
    n, device = logits.shape[0], logits.device
    responses = torch.full((n, max_new_tokens), PAD, dtype=torch.long, device=device)
    logprobs = torch.zeros((n, max_new_tokens), device=device)
    mask = torch.zeros((n, max_new_tokens), dtype=torch.bool, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        token, logp = _choose(logits, generator, temperature, greedy)
        live = ~finished
        responses[:, t] = torch.where(live, token, PAD)
        logprobs[:, t] = torch.where(live, logp.gather(1, token[:, None]).squeeze(1), 0.0)
        mask[:, t] = live
        finished = finished | (token == EOS)
        if t + 1 == max_new_tokens or bool(finished.all()):
            break
        logits = advance(token, t)
    return responses, logprobs, mask


@torch.no_grad()
def sample_reference(model, prompts: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None,
                     temperature: float = 1.0, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sample`` through the model's own forward and HF cache (the slow reference kept for tests and benchmarks)."""
    prompts = prompts.to(next(model.parameters()).device)
    logits, cache = _step(model, prompts)
    state = {"cache": cache}

    def advance(token, t):
        logits, state["cache"] = _step(model, token[:, None], state["cache"])
        return logits

    return _decode(logits, advance, max_new_tokens, generator, temperature, greedy)


def _attention_block(attn, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                     values: torch.Tensor, start: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Qwen3 self-attention of positions start.. (x: (n, s, hidden)) writing k, v into the preallocated cache.

    The same modules and order of operations as ``Qwen3Attention`` with SDPA; only the cache differs.
    """
    n, s, _ = x.shape
    q = attn.q_norm(attn.q_proj(x).view(n, s, -1, attn.head_dim)).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(x).view(n, s, -1, attn.head_dim)).transpose(1, 2)
    v = attn.v_proj(x).view(n, s, -1, attn.head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    keys[:, :, start:start + s] = k if rows is None else k[rows]
    values[:, :, start:start + s] = v if rows is None else v[rows]
    if start == 0:  # prefill: attend causally within the prompt (what the HF forward does)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, scale=attn.scaling, enable_gqa=True)
    else:
        out = F.scaled_dot_product_attention(q, keys[:, :, :start + s], values[:, :, :start + s],
                                             scale=attn.scaling, enable_gqa=True)
    return attn.o_proj(out.transpose(1, 2).reshape(n, s, -1))


def _lean_forward(model, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor,
                  start: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Logits at the last position of ``ids`` (u, s) placed at positions start..start+s−1, through the HF modules.

    ``rows`` (n,) maps each cache row to a row of ``ids`` (prefill of distinct prompts only); None: one to one.
    """
    body = model.model
    x = body.embed_tokens(ids)
    cos, sin = cos[:, start:start + ids.shape[1]], sin[:, start:start + ids.shape[1]]
    for layer, (keys, values) in zip(body.layers, cache, strict=True):
        x = x + _attention_block(layer.self_attn, layer.input_layernorm(x), cos, sin, keys, values, start, rows)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    # The last position sliced as HF's forward slices it, a (u, 1, hidden) view: torch's matmul rounds
    # such an input one way or another depending on whether the weights require grad; this matches both.
    logits = model.lm_head(body.norm(x)[:, -1:])[:, -1]
    return logits if rows is None else logits[rows]


@torch.no_grad()
def sample(model, prompts: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None,
           temperature: float = 1.0, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses for equal-length ``prompts`` (n, L) with a preallocated KV cache.

    Returns (responses, logprobs, mask), each (n, max_new_tokens): token ids (PAD after EOS), the
    sampling policy's log-probability of each token (temperature included), and which tokens belong
    to the response (up to and including the first EOS). Same tokens and log-probs as
    ``sample_reference``, without the HF forward's per-call machinery.
    """
    device = next(model.parameters()).device
    prompts = prompts.to(device)
    config, (n, prompt_len) = model.config, prompts.shape
    total = prompt_len + max_new_tokens
    cache = torch.empty((config.num_hidden_layers, 2, n, config.num_key_value_heads, total, config.head_dim),
                        device=device, dtype=model.dtype)
    # Rotary cos/sin of every position, once (the HF forward recomputes them at each step).
    cos, sin = model.model.rotary_emb(cache, torch.arange(total, device=device)[None])
    # GRPO repeats each prompt G times: the prompt's keys and values are computed once and shared.
    distinct, rows = torch.unique(prompts, dim=0, return_inverse=True)
    if distinct.shape[0] == n:
        distinct, rows = prompts, None
    logits = _lean_forward(model, distinct, cos, sin, cache, 0, rows)
    return _decode(logits, lambda token, t: _lean_forward(model, token[:, None], cos, sin, cache, prompt_len + t),
                   max_new_tokens, generator, temperature, greedy)


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
