"""Paged attention in plain torch: the CPU path, and the reference the kernels match.

Decode sequences are attended to together: their KV tiles are gathered with one
`index_select` per layer into a (2, B, H_kv, T, D) buffer padded to the longest
context, and grouped-query attention runs as two batched matmuls, with the G = H_q/H_kv
query heads of each KV head stacked as rows, so KV heads are never repeated in memory.
Prefill chunks are attended to one at a time with SDPA and a causal mask offset by the
tokens already cached.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.batch import AttentionPlan
from engine.kv_cache import KVCache


def paged_attention(
    q: torch.Tensor, kv: KVCache, layer: int, plan: AttentionPlan, scale: float
) -> torch.Tensor:
    """q: (N, H_q, D) for the batch's rows -> (N, H_q, D).

    The K/V of these rows must already be written to the cache.
    """
    layer_offset = layer * kv.layer_stride_rows()
    parts = []
    if plan.num_decode:
        rows = plan.decode_tile_rows + layer_offset
        parts.append(_decode(q[: plan.num_decode], kv, rows, plan.decode_bias, scale))
    for span in plan.prefills:
        q_span = q[span.row_start : span.row_start + span.num_tokens]
        parts.append(_prefill(q_span, kv, span.tile_rows + layer_offset, span.mask, scale))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def gather_kv(kv: KVCache, tile_rows: torch.Tensor) -> torch.Tensor:
    """tile_rows: (2, *batch, H_kv, nb) -> (2, *batch, H_kv, nb*16, D) contiguous copy."""
    flat = kv.tiles.index_select(0, tile_rows.reshape(-1))
    return flat.view(*tile_rows.shape[:-1], -1, kv.spec.head_dim)


def _decode(
    q: torch.Tensor, kv: KVCache, tile_rows: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    b, h_q, d = q.shape
    h_kv = tile_rows.shape[2]
    k, v = gather_kv(kv, tile_rows).unbind(0)  # each (B, H_kv, T, D)
    qg = q.unflatten(1, (h_kv, h_q // h_kv))  # (B, H_kv, G, D)
    scores = torch.matmul(qg, k.transpose(-1, -2)).mul_(scale).add_(bias)  # (B, H_kv, G, T)
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v).view(b, h_q, d)  # (B, H_kv, G, D) -> (B, H_q, D)


def _prefill(
    q: torch.Tensor, kv: KVCache, tile_rows: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    k, v = gather_kv(kv, tile_rows).unbind(0)  # each (H_kv, T, D)
    qh = q.transpose(0, 1).unsqueeze(0)  # (1, H_q, N, D)
    o = F.scaled_dot_product_attention(
        qh, k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask, scale=scale, enable_gqa=True
    )  # (1, H_q, N, D)
    return o.squeeze(0).transpose(0, 1)
