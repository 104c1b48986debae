"""Block pack/unpack: gather KV blocks (optionally a slice of KV heads) into one
contiguous buffer, and scatter such a buffer back into a cache.

This is what KV transfer needs when prefill and decode use different tensor-parallel
degrees: a decode rank holding heads [h0, h0 + n) reads just those tiles.

    cache  (NB, L, 2, H, 16, D)         buffer  (n_blocks, L, 2, n_heads, 16, D)

Program (i, r) copies one [16 x D] tile: block i of the list, r = (layer, kv, head).
"""

from __future__ import annotations

import torch

from kernels._triton import next_pow2, tl, triton

TILE_T = 16


@triton.jit
def _tile_copy_kernel(
    src_ptr,
    dst_ptr,
    src_ids_ptr,
    dst_ids_ptr,
    src_head0,
    dst_head0,
    n_heads,
    s_b,
    s_l,
    s_kv,
    s_h,
    s_t,
    d_b,
    d_l,
    d_kv,
    d_h,
    d_t,
    SRC_INDEXED: tl.constexpr,
    DST_INDEXED: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TILE_T: tl.constexpr,
):
    i = tl.program_id(0)
    r = tl.program_id(1)
    head = r % n_heads
    kv = (r // n_heads) % 2
    layer = r // (2 * n_heads)
    src_block = i
    if SRC_INDEXED:
        src_block = tl.load(src_ids_ptr + i).to(tl.int64)
    dst_block = i
    if DST_INDEXED:
        dst_block = tl.load(dst_ids_ptr + i).to(tl.int64)
    t = tl.arange(0, TILE_T)
    d = tl.arange(0, BLOCK_D)
    ok = d[None, :] < D
    src = src_ptr + src_block * s_b + layer * s_l + kv * s_kv + (src_head0 + head) * s_h
    dst = dst_ptr + dst_block * d_b + layer * d_l + kv * d_kv + (dst_head0 + head) * d_h
    tile = tl.load(src + t[:, None] * s_t + d[None, :], mask=ok)
    tl.store(dst + t[:, None] * d_t + d[None, :], tile, mask=ok)


def _check(cache: torch.Tensor, buf: torch.Tensor, head0: int, n_heads: int) -> None:
    assert cache.dim() == buf.dim() == 6 and cache.shape[4] == TILE_T
    assert cache.shape[1:3] == buf.shape[1:3] and cache.shape[4:] == buf.shape[4:]
    assert buf.shape[3] == n_heads and head0 >= 0 and head0 + n_heads <= cache.shape[3]
    assert cache.dtype == buf.dtype and cache.stride(-1) == 1 and buf.stride(-1) == 1


def _launch(
    src: torch.Tensor,
    dst: torch.Tensor,
    src_ids: torch.Tensor | None,
    dst_ids: torch.Tensor | None,
    src_head0: int,
    dst_head0: int,
    n_heads: int,
    n_blocks: int,
) -> None:
    if n_blocks == 0:
        return
    layers, d = src.shape[1], src.shape[5]
    dummy = torch.zeros(1, dtype=torch.int64, device=src.device)
    _tile_copy_kernel[(n_blocks, layers * 2 * n_heads)](
        src,
        dst,
        dummy if src_ids is None else src_ids,
        dummy if dst_ids is None else dst_ids,
        src_head0,
        dst_head0,
        n_heads,
        *src.stride()[:5],
        *dst.stride()[:5],
        SRC_INDEXED=src_ids is not None,
        DST_INDEXED=dst_ids is not None,
        D=d,
        BLOCK_D=next_pow2(d),
        TILE_T=TILE_T,
    )


def pack_blocks(
    cache: torch.Tensor, block_ids: torch.Tensor, head0: int = 0, n_heads: int | None = None
) -> torch.Tensor:
    """-> (len(block_ids), L, 2, n_heads, 16, D): heads [head0, head0 + n_heads)."""
    n_heads = cache.shape[3] - head0 if n_heads is None else n_heads
    _, layers, _, _, t, d = cache.shape
    buf = torch.empty(
        (len(block_ids), layers, 2, n_heads, t, d), dtype=cache.dtype, device=cache.device
    )
    _check(cache, buf, head0, n_heads)
    _launch(cache, buf, block_ids, None, head0, 0, n_heads, len(block_ids))
    return buf


def unpack_blocks(
    buf: torch.Tensor, cache: torch.Tensor, block_ids: torch.Tensor, head0: int = 0
) -> None:
    """Write buf's blocks into `cache` at block_ids, heads [head0, head0 + buf heads)."""
    n_heads = buf.shape[3]
    _check(cache, buf, head0, n_heads)
    assert len(block_ids) == buf.shape[0]
    _launch(buf, cache, None, block_ids, 0, head0, n_heads, len(block_ids))


def ref_pack_blocks(
    cache: torch.Tensor, block_ids: torch.Tensor, head0: int = 0, n_heads: int | None = None
) -> torch.Tensor:
    n_heads = cache.shape[3] - head0 if n_heads is None else n_heads
    return cache[block_ids.long(), :, :, head0 : head0 + n_heads].contiguous()


def ref_unpack_blocks(
    buf: torch.Tensor, cache: torch.Tensor, block_ids: torch.Tensor, head0: int = 0
) -> None:
    cache[block_ids.long(), :, :, head0 : head0 + buf.shape[3]] = buf
