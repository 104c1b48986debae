"""Model architecture description, read from GGUF metadata or an HF `config.json`.

`ModelArgs` is frozen: it is what the checkpoint says, never what the runtime discovers
(number of KV blocks, EOS ids found in the tokenizer live elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are stretched for contexts longer than pre-training."""

    kind: Literal["linear", "llama3"]
    factor: float
    """Context extension factor; `linear` divides every frequency by it."""
    low_freq_factor: float = 1.0
    """llama3 only: wavelengths above original_max / low_freq_factor are fully scaled."""
    high_freq_factor: float = 4.0
    """llama3 only: wavelengths below original_max / high_freq_factor are kept."""
    original_max_position_embeddings: int = 8192
    """llama3 only: the pre-training context length."""

    def __post_init__(self) -> None:
        if self.factor <= 0:
            raise ValueError(f"rope scaling factor must be > 0, got {self.factor}")
        if self.kind == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("llama3 rope scaling needs high_freq_factor > low_freq_factor")


@dataclass(frozen=True)
class ModelArgs:
    """A Llama-family decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU."""

    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    max_seq_len: int
    """The model's context window: prompt + generated tokens never exceed it."""
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    tie_embeddings: bool = True
    head_dim: int = 0
    """0 means dim // n_heads."""

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")

    @property
    def q_per_kv(self) -> int:
        return self.n_heads // self.n_kv_heads

    def kv_bytes_per_token(self, bytes_per_elem: int) -> int:
        """2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_elem

    def num_params(self) -> int:
        d, f, hd = self.dim, self.ffn_dim, self.head_dim
        attn = d * (self.n_heads * hd) * 2 + d * (self.n_kv_heads * hd) * 2
        per_layer = attn + 3 * d * f + 2 * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return self.n_layers * per_layer + self.vocab_size * d + d + head

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> ModelArgs:
        arch = meta["general.architecture"]
        if arch != "llama":
            raise ValueError(f"unsupported GGUF architecture {arch!r} (only 'llama' for now)")

        def key(name: str, default: Any = None) -> Any:
            value = meta.get(f"{arch}.{name}", default)
            if value is None:
                raise ValueError(f"GGUF metadata lacks {arch}.{name}")
            return value

        n_heads = int(key("attention.head_count"))
        dim = int(key("embedding_length"))
        vocab = meta.get(f"{arch}.vocab_size") or len(meta["tokenizer.ggml.tokens"])
        return cls(
            vocab_size=int(vocab),
            dim=dim,
            n_layers=int(key("block_count")),
            n_heads=n_heads,
            n_kv_heads=int(key("attention.head_count_kv", n_heads)),
            ffn_dim=int(key("feed_forward_length")),
            max_seq_len=int(key("context_length")),
            norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=float(key("rope.freq_base", 10000.0)),
            rope_scaling=_gguf_rope_scaling(meta, arch),
            tie_embeddings=not meta.get("has_output_weight", False),
            head_dim=int(meta.get(f"{arch}.attention.key_length", 0) or 0),
        )

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any]) -> ModelArgs:
        model_type = cfg.get("model_type", "llama")
        if model_type not in ("llama", "mistral", "qwen2"):
            raise ValueError(f"unsupported HF model_type {model_type!r}")
        if cfg.get("attention_bias") or model_type == "qwen2":
            raise ValueError("attention biases are not supported yet")
        n_heads = int(cfg["num_attention_heads"])
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            dim=int(cfg["hidden_size"]),
            n_layers=int(cfg["num_hidden_layers"]),
            n_heads=n_heads,
            n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            ffn_dim=int(cfg["intermediate_size"]),
            max_seq_len=int(cfg.get("max_position_embeddings", 2048)),
            norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=float(cfg.get("rope_theta") or _rope_params(cfg).get("rope_theta", 1e4)),
            rope_scaling=_hf_rope_scaling(cfg),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            head_dim=int(cfg.get("head_dim") or 0),
        )


def _rope_params(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """HF moved scaling into `rope_parameters` in v5; older files use `rope_scaling`."""
    return cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}


def _hf_rope_scaling(cfg: Mapping[str, Any]) -> RopeScaling | None:
    params = _rope_params(cfg)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return None
    if kind == "linear":
        return RopeScaling(kind="linear", factor=float(params["factor"]))
    if kind == "llama3":
        return RopeScaling(
            kind="llama3",
            factor=float(params["factor"]),
            low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_position_embeddings=int(params["original_max_position_embeddings"]),
        )
    raise ValueError(f"unsupported rope scaling type {kind!r}")


def _gguf_rope_scaling(meta: Mapping[str, Any], arch: str) -> RopeScaling | None:
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if kind in ("none", None):
        return None
    if kind == "linear":
        return RopeScaling(kind="linear", factor=float(meta[f"{arch}.rope.scaling.factor"]))
    raise ValueError(f"unsupported GGUF rope scaling type {kind!r}")
