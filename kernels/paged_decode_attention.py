"""Paged decode attention: one query token per sequence against its paged KV history.

KV of one layer, as the engine lays it out (see engine/kv_cache.py):

    kv[block, kv, head, slot, dim]          (NB, 2, H_kv, 16, D)

Program (b, h, split) walks blocks [split * per_split, (split + 1) * per_split) of
sequence b's block table, 16 keys at a time, with an online softmax:

    m  = running max of scores        l = running sum of exp(score - m)
    acc = running sum of exp(score - m) * v

and writes acc / l and the log-sum-exp m + log l of its part. With one split that is the
answer; with several ("flash-decoding", for long contexts and small batches) a second
kernel merges the parts: out = sum_s exp(lse_s - lse) * out_s, lse = log sum_s exp(lse_s).
"""

from __future__ import annotations

import torch

from kernels._reference import contiguous_kv
from kernels._triton import next_pow2, tl, triton

BLOCK_T = 16


@triton.jit
def _decode_part_kernel(
    q_ptr,
    kv_ptr,
    tables_ptr,
    lens_ptr,
    part_ptr,
    lse_ptr,
    scale,
    blocks_per_split,
    s_qb,
    s_qh,
    s_kvb,
    s_kvkv,
    s_kvh,
    s_kvt,
    s_tab,
    s_pb,
    s_ph,
    s_ps,
    s_lb,
    s_lh,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    kv_head = h // G
    ctx = tl.load(lens_ptr + b)
    n_blocks = tl.cdiv(ctx, BLOCK_T)
    first = split * blocks_per_split
    last = tl.minimum(first + blocks_per_split, n_blocks)

    d = tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    d_ok = d < D
    q = tl.load(q_ptr + b * s_qb + h * s_qh + d, mask=d_ok, other=0.0).to(tl.float32)

    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j in range(first, last):
        block = tl.load(tables_ptr + b * s_tab + j).to(tl.int64)
        tile = kv_ptr + block * s_kvb + kv_head * s_kvh + t[:, None] * s_kvt + d[None, :]
        k = tl.load(tile, mask=d_ok[None, :], other=0.0).to(tl.float32)  # (16, D)
        s = tl.sum(k * q[None, :], axis=1) * scale  # (16,)
        s = tl.where(j * BLOCK_T + t < ctx, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(tile + s_kvkv, mask=d_ok[None, :], other=0.0).to(tl.float32)  # (16, D)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new

    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)
    lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    tl.store(part_ptr + b * s_pb + h * s_ph + split * s_ps + d, out, mask=d_ok)
    tl.store(lse_ptr + b * s_lb + h * s_lh + split, lse)


@triton.jit
def _merge_kernel(
    part_ptr,
    lse_ptr,
    out_ptr,
    n_splits,
    s_pb,
    s_ph,
    s_ps,
    s_lb,
    s_lh,
    s_ob,
    s_oh,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    m = float("-inf")
    for s in range(0, n_splits):
        m = tl.maximum(m, tl.load(lse_ptr + b * s_lb + h * s_lh + s))
    total = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(0, n_splits):
        w = tl.exp(tl.load(lse_ptr + b * s_lb + h * s_lh + s) - m)
        part = tl.load(part_ptr + b * s_pb + h * s_ph + s * s_ps + d, mask=d_ok, other=0.0)
        acc += w * part
        total += w
    tl.store(
        out_ptr + b * s_ob + h * s_oh + d, (acc / total).to(out_ptr.dtype.element_ty), mask=d_ok
    )


def paged_decode_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    num_splits: int = 1,
) -> torch.Tensor:
    """q: (B, H_q, D); kv: (NB, 2, H_kv, 16, D) one layer; block_tables: (B, max_blocks)
    int32; context_lens: (B,) int32, each >= 1. -> (B, H_q, D) in q's dtype."""
    b, h_q, d = q.shape
    _, two, h_kv, bt, d_kv = kv.shape
    assert two == 2 and bt == BLOCK_T and d_kv == d, f"kv layout {tuple(kv.shape)}"
    assert h_q % h_kv == 0, f"{h_q} query heads for {h_kv} kv heads"
    assert q.stride(-1) == 1 and kv.stride(-1) == 1, "head dim must be contiguous"
    assert block_tables.dtype == torch.int32 and context_lens.dtype == torch.int32
    assert block_tables.shape[0] == b and context_lens.shape == (b,)
    assert q.dtype == kv.dtype, f"q {q.dtype} vs kv {kv.dtype}"
    assert num_splits >= 1
    per_split = -(-block_tables.shape[1] // num_splits)
    parts = torch.empty((b, h_q, num_splits, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((b, h_q, num_splits), dtype=torch.float32, device=q.device)
    block_d = next_pow2(d)
    _decode_part_kernel[(b, h_q, num_splits)](
        q,
        kv,
        block_tables,
        context_lens,
        parts,
        lse,
        scale,
        per_split,
        q.stride(0),
        q.stride(1),
        kv.stride(0),
        kv.stride(1),
        kv.stride(2),
        kv.stride(3),
        block_tables.stride(0),
        parts.stride(0),
        parts.stride(1),
        parts.stride(2),
        lse.stride(0),
        lse.stride(1),
        G=h_q // h_kv,
        D=d,
        BLOCK_D=block_d,
        BLOCK_T=BLOCK_T,
    )
    if num_splits == 1:
        return parts[:, :, 0].to(q.dtype)
    out = torch.empty_like(q)
    _merge_kernel[(b, h_q)](
        parts,
        lse,
        out,
        num_splits,
        parts.stride(0),
        parts.stride(1),
        parts.stride(2),
        lse.stride(0),
        lse.stride(1),
        out.stride(0),
        out.stride(1),
        D=d,
        BLOCK_D=block_d,
    )
    return out


def ref_paged_decode_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Plain torch, one sequence at a time, computed in fp32."""
    b, h_q, d = q.shape
    h_kv = kv.shape[2]
    out = torch.empty_like(q)
    for i in range(b):
        k, v = contiguous_kv(kv, block_tables[i], int(context_lens[i]))  # (H_kv, n, D)
        qi = q[i].float().view(h_kv, h_q // h_kv, d)  # (H_kv, G, D)
        probs = torch.softmax(qi @ k.transpose(1, 2) * scale, dim=-1)  # (H_kv, G, n)
        out[i] = (probs @ v).reshape(h_q, d).to(q.dtype)
    return out
