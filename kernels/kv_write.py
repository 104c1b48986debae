"""KV write ("reshape and cache"): scatter this step's K/V rows into their slots.

Token n's K and V, each (H_kv, D), go to kv[blocks[n], 0 or 1, :, offsets[n], :] of one
layer laid out (NB, 2, H_kv, 16, D). Program (n, h) copies one head's row of each.
"""

from __future__ import annotations

import torch

from kernels._triton import next_pow2, tl, triton


@triton.jit
def _kv_write_kernel(
    k_ptr,
    v_ptr,
    kv_ptr,
    blocks_ptr,
    offsets_ptr,
    s_kn,
    s_kh,
    s_vn,
    s_vh,
    s_kvb,
    s_kvkv,
    s_kvh,
    s_kvt,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    n = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    block = tl.load(blocks_ptr + n).to(tl.int64)
    slot = tl.load(offsets_ptr + n)
    dst = kv_ptr + block * s_kvb + h * s_kvh + slot * s_kvt + d
    k = tl.load(k_ptr + n * s_kn + h * s_kh + d, mask=d_ok)
    v = tl.load(v_ptr + n * s_vn + h * s_vh + d, mask=d_ok)
    tl.store(dst, k.to(kv_ptr.dtype.element_ty), mask=d_ok)
    tl.store(dst + s_kvkv, v.to(kv_ptr.dtype.element_ty), mask=d_ok)


def kv_write(
    kv: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor
) -> None:
    """kv: (NB, 2, H_kv, 16, D) one layer, written in place; k, v: (N, H_kv, D);
    blocks, offsets: (N,) int32 or int64."""
    n, h, d = k.shape
    assert v.shape == k.shape and kv.shape[2] == h and kv.shape[4] == d and kv.shape[1] == 2
    assert blocks.shape == offsets.shape == (n,)
    assert k.stride(-1) == 1 and v.stride(-1) == 1 and kv.stride(-1) == 1
    if n == 0:
        return
    _kv_write_kernel[(n, h)](
        k,
        v,
        kv,
        blocks,
        offsets,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        kv.stride(0),
        kv.stride(1),
        kv.stride(2),
        kv.stride(3),
        D=d,
        BLOCK_D=next_pow2(d),
    )


def ref_kv_write(
    kv: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor
) -> None:
    b, o = blocks.long(), offsets.long()
    kv[b, 0, :, o] = k.to(kv.dtype)  # indices split by a slice: (N, H_kv, D)
    kv[b, 1, :, o] = v.to(kv.dtype)
