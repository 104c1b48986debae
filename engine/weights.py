"""Hugging Face weight names -> pdserve's fused, transposed module state.

HF (out, in)                                  pdserve (in, out)
self_attn.{q,k,v}_proj.weight           ->    attention.wqkv.weight   [q | k | v]
self_attn.o_proj.weight                 ->    attention.wo.weight
mlp.{gate,up}_proj.weight               ->    feed_forward.w13.weight [gate | up]
mlp.down_proj.weight                    ->    feed_forward.w2.weight
model.embed_tokens.weight (vocab, dim)  ->    tok_embeddings.weight   (dim, vocab)
lm_head.weight                          ->    output.weight (untied models only)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from engine.config import ModelArgs

_PER_LAYER = {
    "input_layernorm.weight": "attention_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
_FUSED = {
    "attention.wqkv.weight": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "attention.wo.weight": ("self_attn.o_proj",),
    "feed_forward.w13.weight": ("mlp.gate_proj", "mlp.up_proj"),
    "feed_forward.w2.weight": ("mlp.down_proj",),
}


def convert_hf_state(
    tensors: Iterable[tuple[str, torch.Tensor]], args: ModelArgs, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    hf = dict(tensors)
    out: dict[str, torch.Tensor] = {}

    def take(name: str) -> torch.Tensor:
        try:
            return hf.pop(name)
        except KeyError:
            raise ValueError(f"checkpoint lacks tensor {name!r}") from None

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype).contiguous()

    for i in range(args.n_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        for hf_name, ours in _PER_LAYER.items():
            out[dst + ours] = cast(take(src + hf_name))
        for ours, parts in _FUSED.items():
            w = torch.cat([take(f"{src}{p}.weight") for p in parts], dim=0)  # (out, in)
            out[dst + ours] = cast(w.t())
    embed = take("model.embed_tokens.weight")
    out["tok_embeddings.weight"] = cast(embed.t())
    out["norm.weight"] = cast(take("model.norm.weight"))
    lm_head = hf.pop("lm_head.weight", None)
    if not args.tie_embeddings:
        if lm_head is None:
            raise ValueError("untied model without lm_head.weight")
        out["output.weight"] = cast(lm_head.t())
    leftovers = [k for k in hf if "rotary_emb" not in k]
    if leftovers:
        raise ValueError(f"unexpected tensors in checkpoint: {leftovers[:5]}")
    return out
