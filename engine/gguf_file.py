"""Reading a GGUF file: metadata as plain Python values, tensors dequantised to fp32.

Tensors come back under Hugging Face names in HF orientation (out_features, in_features)
so one converter serves GGUF and safetensors alike. llama.cpp's converter permutes the
rows of Q and K so its RoPE can rotate adjacent pairs; we rotate halves (HF style), so
those rows are un-permuted here. A mismatch shows up as wrong logits, which the tests
against `transformers` catch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


class GGUFFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._reader = GGUFReader(self.path)
        self.metadata: dict[str, Any] = {n: f.contents() for n, f in self._reader.fields.items()}
        self.metadata["has_output_weight"] = any(
            t.name == "output.weight" for t in self._reader.tensors
        )

    def tensor_types(self) -> set[str]:
        return {t.tensor_type.name for t in self._reader.tensors}

    def hf_tensors(self, n_heads: int, n_kv_heads: int) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, fp32 tensor) for every weight, Q/K rows un-permuted."""
        for t in self._reader.tensors:
            name = _hf_name(t.name)
            if name is None:
                continue  # e.g. rope_freqs: not a weight of ours
            array = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
            w = torch.from_numpy(array.reshape(tuple(reversed(t.shape.tolist()))).copy())
            if name.endswith("q_proj.weight"):
                w = _unpermute(w, n_heads)
            elif name.endswith("k_proj.weight"):
                w = _unpermute(w, n_kv_heads)
            yield name, w


def _hf_name(gguf_name: str) -> str | None:
    stem, _, suffix = gguf_name.rpartition(".")
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        hf = _LAYER_NAMES.get(part)
        return None if hf is None else f"model.layers.{layer}.{hf}.{suffix}"
    hf = _TOP_NAMES.get(stem)
    return None if hf is None else f"{hf}.{suffix}"


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's (head, pair, half) -> (head, half, pair) row interleave."""
    out, d_in = w.shape
    return w.view(n_head, out // n_head // 2, 2, d_in).transpose(1, 2).reshape(out, d_in)
