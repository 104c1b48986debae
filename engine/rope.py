"""Rotary position embeddings, llama style (rotate-half), with linear and llama3 scaling.

Each head's dimension is split into two halves (x1, x2); position p rotates pair
(x1[i], x2[i]) by angle p * inv_freq[i]:

    x1' = x1 cos - x2 sin,   x2' = x2 cos + x1 sin

The cos/sin table is computed once for the whole context window and indexed by position,
so mixed batches need no special case.
"""

from __future__ import annotations

import math

import torch

from engine.config import ModelArgs, RopeScaling


def inv_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    """(head_dim/2,) fp64 inverse frequencies after scaling."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling is None:
        return inv
    if scaling.kind == "linear":
        return inv / scaling.factor
    return _llama3_scale(inv, scaling)


def _llama3_scale(inv: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    """Long wavelengths are divided by `factor`, short ones kept, the band between blended."""
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    blended = (1 - smooth) * inv / s.factor + smooth * inv
    out = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
    in_band = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(in_band, blended, out)


def rope_table(args: ModelArgs, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (max_seq_len, head_dim/2)."""
    inv = inv_frequencies(args.head_dim, args.rope_theta, args.rope_scaling)
    angles = torch.outer(torch.arange(args.max_seq_len, dtype=torch.float64), inv)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rope_for_positions(
    cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-width (N, 1, D) cos and signed sin for a step, built once and used by every layer.

    With sin_signed = [-sin, sin], rotating halves is x * cos + swap_halves(x) * sin_signed.
    """
    c = cos.index_select(0, positions)
    s = sin.index_select(0, positions)
    return torch.cat((c, c), -1).unsqueeze(1), torch.cat((-s, s), -1).unsqueeze(1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x: (N, heads, D); cos, sin_signed: (N, 1, D) from `rope_for_positions`."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    return torch.addcmul(x * cos, swapped, sin_signed)
