"""The policy with a leading run dimension: K Qwen3 models of one size as one parameter matrix θ of shape (K, P).

Row k of θ is run k's parameters flattened in the HF model's ``parameters()`` order (what ``flat_params`` gives),
and ``load_row`` puts a row back into an HF model. The forward pass is Qwen3's — embedding, RMSNorm, rotary
attention with q/k norms and grouped KV heads, SwiGLU MLP, tied head — written with batched matmuls over the run
dimension, so one op does K runs' work. Nothing mixes rows: the gradient of a sum of per-run losses lands in
θ.grad (K, P), row k run k's own. ``sample`` is the KV-cache sampler of ``model.sample`` for K runs at once,
each run drawing its uniforms from its own generator (the same draws as the run alone).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

from sim.llm.task import EOS, PAD


class Layout:
    """Names and shapes of one model's parameters, in ``parameters()`` order, and its rotary tables."""

    def __init__(self, model: torch.nn.Module):
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.config: Qwen3Config = model.config
        self.names = tuple(name for name, _ in named)
        self.shapes = tuple(tuple(p.shape) for _, p in named)
        self.sizes = tuple(p.numel() for _, p in named)
        self.rotary = Qwen3RotaryEmbedding(self.config)

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def weights(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """The (K, *shape) tensor of every parameter name, as differentiable pieces of θ (K, P)."""
        runs = theta.shape[0]
        return {name: piece.reshape(runs, *shape)
                for name, shape, piece in zip(self.names, self.shapes, theta.split(self.sizes, dim=1), strict=True)}

    def rotary_tables(self, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary cos and sin of positions 0..length−1, each (1, length, head_dim)."""
        self.rotary.to(device)
        probe = torch.empty(0, device=device)
        return self.rotary(probe, torch.arange(length, device=device)[None])


def stack(models) -> torch.Tensor:
    """θ (K, P): each model's trainable parameters flattened, one row per model."""
    return torch.stack([torch.cat([p.detach().reshape(-1) for p in m.parameters() if p.requires_grad])
                        for m in models])


@torch.no_grad()
def load_row(model: torch.nn.Module, row: torch.Tensor) -> torch.nn.Module:
    """Copy one row of θ into ``model``'s parameters (the inverse of ``stack`` for that row)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p, piece in zip(params, row.split([p.numel() for p in params]), strict=True):
        p.copy_(piece.view_as(p))
    return model


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3RMSNorm over the last dim; ``weight`` (K, d) broadcast over x's middle dims (x is (K, ..., d))."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight.view(weight.shape[0], *[1] * (x.dim() - 2), -1) * (x * torch.rsqrt(variance + eps))


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (K, ..., in) @ weight(K, out, in)ᵀ per run: one batched matmul."""
    runs, *middle, width = x.shape
    return torch.bmm(x.reshape(runs, -1, width), weight.transpose(1, 2)).view(runs, *middle, -1)


def embed(ids: torch.Tensor, table: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """Token embeddings (K, ..., hidden) of ids (K, ...) from each run's own table (K, V, hidden); as in
    ``nn.Embedding(padding_idx=...)``, the padding token's lookups send no gradient to its row."""
    runs, vocab, hidden = table.shape
    offsets = (torch.arange(runs, device=ids.device) * vocab).view(runs, *[1] * (ids.dim() - 1))
    x = F.embedding(ids + offsets, table.reshape(runs * vocab, hidden))
    return x if padding_idx is None else torch.where((ids == padding_idx)[..., None], x.detach(), x)


def attention(w: dict, prefix: str, config: Qwen3Config, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              cache: tuple[torch.Tensor, torch.Tensor] | None = None, start: int = 0,
              rows: torch.Tensor | None = None) -> torch.Tensor:
    """Qwen3 self-attention of x (K, n, s, hidden) at positions start..start+s−1, causal within x.

    With ``cache`` (keys, values), each (K·n', kv_heads, total, head_dim), the new keys and values are written
    at ``start`` (rows of x mapped to cache rows by ``rows``, or one to one) and attention reads the cache.
    """
    runs, n, s, _ = x.shape
    head_dim, eps = config.head_dim, config.rms_norm_eps

    def heads(name, norm=None):
        y = linear(x, w[f"{prefix}.{name}.weight"]).view(runs, n, s, -1, head_dim)
        if norm is not None:
            y = rms_norm(y, w[f"{prefix}.{norm}.weight"], eps)
        return y.reshape(runs * n, s, -1, head_dim).transpose(1, 2)

    q, k, v = heads("q_proj", "q_norm"), heads("k_proj", "k_norm"), heads("v_proj")
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    scale = head_dim**-0.5
    if cache is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, scale=scale, enable_gqa=True)
    else:
        keys, values = cache
        keys[:, :, start:start + s] = k if rows is None else k[rows]
        values[:, :, start:start + s] = v if rows is None else v[rows]
        if start == 0:  # prefill: causal within the prompt
            out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, scale=scale, enable_gqa=True)
        else:
            out = F.scaled_dot_product_attention(q, keys[:, :, :start + s], values[:, :, :start + s], scale=scale,
                                                 enable_gqa=True)
    out = out.transpose(1, 2).reshape(runs, n, s, -1)
    return linear(out, w[f"{prefix}.o_proj.weight"])


def hidden_states(w: dict, config: Qwen3Config, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  cache: list | None = None, start: int = 0, rows: torch.Tensor | None = None) -> torch.Tensor:
    """The final normed hidden states (K, n, s, hidden) of ids (K, n, s) at positions start.."""
    x = embed(ids, w["model.embed_tokens.weight"], config.pad_token_id)
    cos, sin = cos[:, start:start + ids.shape[2]], sin[:, start:start + ids.shape[2]]
    eps = config.rms_norm_eps
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        normed = rms_norm(x, w[f"{layer}.input_layernorm.weight"], eps)
        x = x + attention(w, f"{layer}.self_attn", config, normed, cos, sin,
                          None if cache is None else cache[i], start, rows)
        normed = rms_norm(x, w[f"{layer}.post_attention_layernorm.weight"], eps)
        gate = linear(normed, w[f"{layer}.mlp.gate_proj.weight"])
        x = x + linear(F.silu(gate) * linear(normed, w[f"{layer}.mlp.up_proj.weight"]),
                       w[f"{layer}.mlp.down_proj.weight"])
    return rms_norm(x, w["model.norm.weight"], eps)


def logits_of(w: dict, hidden: torch.Tensor) -> torch.Tensor:
    """The tied head: hidden (K, ..., hidden) @ embeddingᵀ per run."""
    return linear(hidden, w["model.embed_tokens.weight"])


def token_logprobs(layout: Layout, theta: torch.Tensor, prompts: torch.Tensor, responses: torch.Tensor,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(response token), entropy of π there), each (K, n, T), by one forward of prompts (K, n, L) + responses.

    Only the positions that predict a response token go through the head.
    """
    logp_all = response_logp_all(layout, theta, prompts, responses, temperature)
    logp = token_logp(logp_all, responses)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_logp(logp_all: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """log π of each response token (K, n, T) from ``response_logp_all``'s (K, n, T, V)."""
    return logp_all.gather(3, responses[..., None]).squeeze(3)


def response_logp_all(layout: Layout, theta: torch.Tensor, prompts: torch.Tensor, responses: torch.Tensor,
                      temperature: float = 1.0) -> torch.Tensor:
    """log π over the vocabulary at every position that predicts a response token, (K, n, T, V)."""
    prompt_len, total = prompts.shape[2], prompts.shape[2] + responses.shape[2]
    cos, sin = layout.rotary_tables(total, theta.device)
    w = layout.weights(theta)
    hidden = hidden_states(w, layout.config, torch.cat([prompts, responses], dim=2), cos, sin)
    logits = logits_of(w, hidden[:, :, prompt_len - 1:-1]).float() / temperature
    return torch.log_softmax(logits, dim=-1)


def shared_prefix_rows(prompts: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(distinct prompts (K, n/group, L), cache row → distinct row) when each prompt repeats ``group`` times in a
    row (GRPO's layout), else (prompts, None): the prompt's keys and values are then computed once per group."""
    runs, n, length = prompts.shape
    if group > 1 and n % group == 0:
        distinct = prompts[:, ::group]
        if torch.equal(distinct.repeat_interleave(group, 1), prompts):
            per_run = torch.arange(n, device=prompts.device) // group
            rows = (torch.arange(runs, device=prompts.device)[:, None] * (n // group) + per_run).reshape(-1)
            return distinct, rows
    return prompts, None


@torch.no_grad()
def sample(layout: Layout, theta: torch.Tensor, prompts: torch.Tensor, max_new_tokens: int,
           generators: list[torch.Generator] | None = None, temperature: float = 1.0, greedy: bool = False,
           group: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses of K runs to their equal-length ``prompts`` (K, n, L) through a preallocated KV cache.

    Returns (responses, logprobs, mask), each (K, n, max_new_tokens), as ``model.sample`` per run. Run k draws
    one row of uniforms from ``generators[k]`` per position while any of its responses is unfinished, none after,
    so its generator ends where the run alone would leave it. ``group``: prompts repeat this many times in a row.
    """
    config, (runs, n, prompt_len) = layout.config, prompts.shape
    device = theta.device
    prompts = prompts.to(device)
    total = prompt_len + max_new_tokens
    w = layout.weights(theta)
    cache = [(torch.empty((runs * n, config.num_key_value_heads, total, config.head_dim), device=device),
              torch.empty((runs * n, config.num_key_value_heads, total, config.head_dim), device=device))
             for _ in range(config.num_hidden_layers)]
    cos, sin = layout.rotary_tables(total, device)
    distinct, rows = shared_prefix_rows(prompts, group)
    hidden = hidden_states(w, config, distinct, cos, sin, cache, 0, rows)[:, :, -1:]
    logits = logits_of(w, hidden).reshape(-1, config.vocab_size)
    if rows is not None:
        logits = logits[rows]
    responses = torch.full((runs, n, max_new_tokens), PAD, dtype=torch.long, device=device)
    logprobs = torch.zeros((runs, n, max_new_tokens), device=device)
    mask = torch.zeros((runs, n, max_new_tokens), dtype=torch.bool, device=device)
    finished = torch.zeros((runs, n), dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        drawing = [not bool(done.all()) for done in finished]  # a run alone stops drawing once all its rows end
        logp = torch.log_softmax(logits.float() / temperature, dim=-1).view(runs, n, -1)
        if greedy:
            token = logp.argmax(-1)
        else:
            uniform = torch.stack([torch.rand(n, 1, generator=g) if live else torch.zeros(n, 1)
                                   for g, live in zip(generators, drawing, strict=True)]).to(device)
            token = _choose_runs(logp, uniform)
        live = ~finished
        responses[:, :, t] = torch.where(live, token, PAD)
        logprobs[:, :, t] = torch.where(live, logp.gather(2, token[..., None]).squeeze(2), 0.0)
        mask[:, :, t] = live
        finished = finished | (token == EOS)
        if t + 1 == max_new_tokens or bool(finished.all()):
            break
        hidden = hidden_states(w, config, token[..., None], cos, sin, cache, prompt_len + t)
        logits = logits_of(w, hidden).reshape(runs * n, -1)
    return responses, logprobs, mask


def _choose_runs(logp: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF tokens (K, n) from log-probabilities (K, n, V) and uniforms (K, n, 1), as ``model._choose``."""
    token = torch.searchsorted(logp.exp().cumsum(-1), uniform).squeeze(-1)
    return token.clamp_max(logp.shape[-1] - 1)


__all__ = ["Layout", "stack", "load_row", "token_logprobs", "response_logp_all", "token_logp", "sample",
           "shared_prefix_rows"]
