"""Helpers shared by the plain-torch references."""

from __future__ import annotations

import torch

BLOCK_T = 16


def contiguous_kv(
    kv: torch.Tensor, block_row: torch.Tensor, num_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A sequence's first `num_tokens` keys and values from one layer's paged KV
    (NB, 2, H_kv, 16, D), as fp32 (H_kv, num_tokens, D) tensors."""
    blocks = block_row[: -(-num_tokens // BLOCK_T)].long()
    h_kv, d = kv.shape[2], kv.shape[4]
    k = kv[blocks, 0].transpose(0, 1).reshape(h_kv, -1, d)[:, :num_tokens].float()
    v = kv[blocks, 1].transpose(0, 1).reshape(h_kv, -1, d)[:, :num_tokens].float()
    return k, v
