"""The policy: Qwen3 as ``transformers`` defines it (RMSNorm, rotary attention with q/k norms and grouped KV heads,
SwiGLU MLP, head tied to the embedding), with its parameter names, so a checkpoint is a Hugging Face one that
``Qwen3ForCausalLM`` loads too. Written out so that one ``forward`` serves the loss (whole sequences) and sampling (a
preallocated KV cache); weights load from safetensors only, so reading a checkpoint never runs code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from runtime.files import atomic_write_bytes
from sim.llm.task import BOS, EOS, PAD, VOCAB, through_first_eos

# Named sizes: (hidden, layers, heads, kv_heads, head_dim, mlp). "tiny" (19k parameters) is for tests,
# "small" (0.6M) for the quick figures, "cpu" (1.2M) the CPU default, "gpu" (25M) one GPU.
SIZES = {
    "tiny": (32, 2, 2, 1, 16, 64),
    "small": (128, 4, 4, 2, 32, 256),
    "cpu": (128, 6, 4, 2, 32, 384),
    "gpu": (512, 8, 8, 4, 64, 1536),
}
MAX_POSITIONS = 64
ROPE_THETA = 10000.0
RMS_EPS = 1e-6


def model_config(size: str) -> dict:
    """The Hugging Face ``Qwen3Config`` fields of a named size (vocabulary = the task's characters, tied head)."""
    hidden, layers, heads, kv_heads, head_dim, mlp = SIZES[size]
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": len(VOCAB),
            "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": mlp,
            "max_position_embeddings": MAX_POSITIONS, "tie_word_embeddings": True, "pad_token_id": PAD,
            "bos_token_id": BOS, "eos_token_id": EOS, "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_THETA,
            "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False, "torch_dtype": "float32"}


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding: x·cos + rotate_half(x)·sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm, self.k_norm = nn.RMSNorm(head_dim, RMS_EPS), nn.RMSNorm(head_dim, RMS_EPS)

    def forward(self, x, cos, sin, cache: torch.Tensor | None, start: int) -> torch.Tensor:
        n, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(n, s, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(n, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(n, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:  # cache (2, n, kv_heads, positions, head_dim): write this step's keys and values
            cache[0, :, :, start:start + s], cache[1, :, :, start:start + s] = k, v
            k, v = cache[0, :, :, :start + s], cache[1, :, :, :start + s]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and s > 1, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(n, s, -1))


class Qwen3(nn.Module):
    """Qwen3 causal LM with HF parameter names (``model.layers.0.self_attn.q_proj.weight``, ...), tied head."""

    def __init__(self, config: dict):
        super().__init__()
        c = self.config = config
        hidden, mlp, dim = c["hidden_size"], c["intermediate_size"], c["head_dim"]
        layer = lambda: nn.ModuleDict(dict(  # HF's decoder layer: its names, in its parameter order
            input_layernorm=nn.RMSNorm(hidden, RMS_EPS), post_attention_layernorm=nn.RMSNorm(hidden, RMS_EPS),
            self_attn=Attention(hidden, c["num_attention_heads"], c["num_key_value_heads"], dim),
            mlp=nn.ModuleDict(dict(gate_proj=nn.Linear(hidden, mlp, bias=False),
                                   up_proj=nn.Linear(hidden, mlp, bias=False),
                                   down_proj=nn.Linear(mlp, hidden, bias=False)))))
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], hidden)
        self.model.layers = nn.ModuleList(layer() for _ in range(c["num_hidden_layers"]))
        self.model.norm = nn.RMSNorm(hidden, RMS_EPS)
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        angles = torch.outer(torch.arange(c["max_position_embeddings"], dtype=torch.float32), inv_freq)
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin(), persistent=False)

    def forward(self, ids: torch.Tensor, cache: list[torch.Tensor] | None = None, start: int = 0) -> torch.Tensor:
        """Logits (n, s, vocab) of tokens ``ids`` (n, s) at positions start..start+s−1; with ``cache`` (one
        preallocated key/value tensor per layer) the keys and values of earlier positions come from it."""
        x = self.model.embed_tokens(ids)
        cos, sin = self.cos[start:start + ids.shape[1]].to(x.dtype), self.sin[start:start + ids.shape[1]].to(x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = x + layer.self_attn(layer.input_layernorm(x), cos, sin, None if cache is None else cache[i], start)
            h, mlp = layer.post_attention_layernorm(x), layer.mlp
            x = x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))  # SwiGLU
        return self.model.norm(x) @ self.model.embed_tokens.weight.T


def build_model(size: str, seed: int) -> Qwen3:
    """A freshly initialised model of ``size``: N(0, 0.02) weights (HF's initializer_range), unit norms."""
    model = Qwen3(model_config(size))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    return model


def save_model(model: Qwen3, folder: Path) -> None:
    """``config.json`` and ``model.safetensors`` (Hugging Face's layout; the tied head is not stored twice), each
    written atomically with the umask's mode."""
    from safetensors.torch import save

    atomic_write_bytes(folder / "config.json", json.dumps(model.config, indent=1).encode())
    atomic_write_bytes(folder / "model.safetensors", save({k: v.detach().cpu().contiguous()
                                                           for k, v in model.state_dict().items()}))


def load_model(path: str | Path) -> Qwen3:
    """A model from a checkpoint folder (config.json + model.safetensors); one-line ValueError if it is not one."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"--model {path}: no readable config.json there ({type(err).__name__}); expected a folder "
                         "with config.json and model.safetensors") from None
    fields = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size")
    if not isinstance(config, dict) or any(not isinstance(config.get(f), int) for f in fields):
        raise ValueError(f"--model {path}: config.json lacks the Qwen3 fields {', '.join(fields)}")
    if config["vocab_size"] != len(VOCAB):
        raise ValueError(f"--model {path}: vocab_size {config['vocab_size']} != this task's {len(VOCAB)}")
    rope = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", ROPE_THETA))
    config = {**model_config("tiny"), **{f: config[f] for f in fields}, "rope_theta": rope,
              "max_position_embeddings": config.get("max_position_embeddings", MAX_POSITIONS)}
    model = Qwen3(config)
    try:
        weights = load_file(path / "model.safetensors")
        weights.pop("lm_head.weight", None)  # tied to the embedding
        model.load_state_dict(weights)
    except (OSError, SafetensorError, RuntimeError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ValueError(f"--model {path}: the weights cannot be loaded ({reason})") from None
    return model


@torch.no_grad()
def sample(model: Qwen3, prompts: torch.Tensor, max_new_tokens: int, generator: torch.Generator | None = None,
           temperature: float = 1.0, greedy: bool = False, group: int = 1) -> tuple[torch.Tensor, ...]:
    """Responses to ``prompts`` (n, L), each prompt ``group`` times in a row (its keys and values computed once):
    tokens, their log-probabilities and the mask through the first EOS, each (n, max_new_tokens). The uniforms come
    from the CPU generator (the same samples on any device) and the loop has a fixed length (no host sync)."""
    (n, length), c, weight = prompts.shape, model.config, model.model.embed_tokens.weight
    device = weight.device
    uniforms = None if greedy else torch.rand(max_new_tokens, n, 1, generator=generator).to(device)
    cache = [torch.empty(2, n // group, c["num_key_value_heads"], length + max_new_tokens, c["head_dim"],
                         device=device, dtype=weight.dtype) for _ in range(c["num_hidden_layers"])]
    logits = model(prompts[::group].to(device), cache, 0)[:, -1]
    if group > 1:
        cache = [c.repeat_interleave(group, dim=1) for c in cache]
        logits = logits.repeat_interleave(group, dim=0)
    tokens = torch.full((n, max_new_tokens), PAD, dtype=torch.long, device=device)
    logprobs = torch.zeros((n, max_new_tokens), device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        if greedy:
            token = logp.argmax(-1)
        else:  # inverse-CDF sampling
            token = torch.searchsorted(logp.exp().cumsum(-1), uniforms[t]).squeeze(1).clamp_max(logp.shape[-1] - 1)
        tokens[:, t] = torch.where(finished, PAD, token)
        logprobs[:, t] = torch.where(finished, 0.0, logp.gather(1, token[:, None]).squeeze(1))
        finished = finished | (token == EOS)
        if t + 1 < max_new_tokens:
            logits = model(token[:, None], cache, length + t)[:, -1]
    return tokens, logprobs, through_first_eos(tokens)  # tokens after the first EOS are PAD


def token_logprobs(model: Qwen3, prompts: torch.Tensor, responses: torch.Tensor, temperature: float = 1.0,
                   full: bool = False) -> tuple[torch.Tensor, ...]:
    """(log π(response token), entropy of π there), each (n, T) (``full``: and every token's log π (n, T, vocab))."""
    ids = torch.cat([prompts, responses], dim=1)
    logits = model(ids)[:, prompts.shape[1] - 1:-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(2, responses[:, :, None]).squeeze(2)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return (logp, entropy, logp_all) if full else (logp, entropy)

