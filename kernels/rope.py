"""RoPE in place, llama style: rotate the two halves of each head by position.

    x1' = x1 cos - x2 sin,   x2' = x2 cos + x1 sin      (x1, x2: first, second half)

The cos/sin tables (max_len, D/2) carry the frequency scaling (default, linear, llama3;
see engine/rope.py), so one kernel serves all three. Program (n, h) rotates one head of
one token; x may be a strided view (e.g. the q and k heads inside a fused qkv output).
"""

from __future__ import annotations

import torch

from kernels._triton import next_pow2, tl, triton


@triton.jit
def _rope_kernel(
    x_ptr,
    pos_ptr,
    cos_ptr,
    sin_ptr,
    s_xn,
    s_xh,
    s_c,
    HALF: tl.constexpr,
    BLOCK: tl.constexpr,
):
    n = tl.program_id(0)
    h = tl.program_id(1)
    i = tl.arange(0, BLOCK)
    ok = i < HALF
    pos = tl.load(pos_ptr + n).to(tl.int64)
    c = tl.load(cos_ptr + pos * s_c + i, mask=ok, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * s_c + i, mask=ok, other=0.0).to(tl.float32)
    head = x_ptr + n * s_xn + h * s_xh
    x1 = tl.load(head + i, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(head + HALF + i, mask=ok, other=0.0).to(tl.float32)
    tl.store(head + i, (x1 * c - x2 * s).to(x_ptr.dtype.element_ty), mask=ok)
    tl.store(head + HALF + i, (x2 * c + x1 * s).to(x_ptr.dtype.element_ty), mask=ok)


def rope_(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """x: (N, H, D), rotated in place; positions: (N,); cos, sin: (max_len, D/2)."""
    n, h, d = x.shape
    assert d % 2 == 0 and cos.shape == sin.shape and cos.shape[1] == d // 2
    assert x.stride(-1) == 1 and cos.stride(-1) == 1 and cos.stride() == sin.stride()
    assert positions.shape == (n,)
    if n == 0:
        return
    _rope_kernel[(n, h)](
        x,
        positions,
        cos,
        sin,
        x.stride(0),
        x.stride(1),
        cos.stride(0),
        HALF=d // 2,
        BLOCK=next_pow2(d // 2),
    )


def ref_rope_(
    x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> None:
    half = x.shape[-1] // 2
    c = cos[positions.long()].unsqueeze(1).float()  # (N, 1, D/2)
    s = sin[positions.long()].unsqueeze(1).float()
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    x.copy_(torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype))
