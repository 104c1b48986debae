"""Prefill attention over paged KV: causal attention for a batch of prompt chunks whose
earlier tokens (a cached prefix, or earlier chunks) already sit in paged blocks.

Queries of all chunks are packed row after row:

    q rows: [ chunk 0: q_lens[0] rows | chunk 1: q_lens[1] rows | ... ]   (N, H_q, D)

Chunk i covers positions starts[i] .. starts[i] + q_lens[i] - 1 of its sequence; its
K/V for positions 0 .. starts[i] + q_lens[i] - 1 are in the blocks of block_tables[i]
(this step's chunk included: the KV write runs first). Query at position p attends to
keys 0..p.

Program (i, h, m) takes BLOCK_M query rows of chunk i, head h, and walks the chunk's
key blocks up to its last row's position with an online softmax (two tl.dot per block).
"""

from __future__ import annotations

import torch

from kernels._reference import contiguous_kv
from kernels._triton import next_pow2, tl, triton

BLOCK_T = 16
BLOCK_M = 16


@triton.jit
def _prefill_kernel(
    q_ptr,
    kv_ptr,
    tables_ptr,
    q_starts_ptr,
    q_lens_ptr,
    starts_ptr,
    out_ptr,
    scale,
    s_qn,
    s_qh,
    s_kvb,
    s_kvkv,
    s_kvh,
    s_kvt,
    s_tab,
    s_on,
    s_oh,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    i = tl.program_id(0)
    h = tl.program_id(1)
    m_tile = tl.program_id(2)
    q_len = tl.load(q_lens_ptr + i)
    if m_tile * BLOCK_M < q_len:
        q_row0 = tl.load(q_starts_ptr + i)
        start = tl.load(starts_ptr + i)
        kv_head = h // G

        rows = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < q_len
        d = tl.arange(0, BLOCK_D)
        d_ok = d < D
        t = tl.arange(0, BLOCK_T)
        q_at = q_ptr + (q_row0 + rows)[:, None] * s_qn + h * s_qh + d[None, :]
        q = tl.load(q_at, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        q_pos = start + rows  # (BLOCK_M,)

        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        last_pos = start + tl.minimum((m_tile + 1) * BLOCK_M, q_len) - 1
        for j in range(0, last_pos // BLOCK_T + 1):
            block = tl.load(tables_ptr + i * s_tab + j).to(tl.int64)
            tile = kv_ptr + block * s_kvb + kv_head * s_kvh + t[:, None] * s_kvt + d[None, :]
            k = tl.load(tile, mask=d_ok[None, :], other=0.0)  # (16, D)
            s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale  # (BLOCK_M, 16)
            k_pos = j * BLOCK_T + t
            s = tl.where(k_pos[None, :] <= q_pos[:, None], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            v = tl.load(tile + s_kvkv, mask=d_ok[None, :], other=0.0)  # (16, D)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            m_i = m_new

        out = acc / l_i[:, None]
        o_at = out_ptr + (q_row0 + rows)[:, None] * s_on + h * s_oh + d[None, :]
        tl.store(o_at, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def prefill_paged_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    block_tables: torch.Tensor,
    q_starts: torch.Tensor,
    q_lens: torch.Tensor,
    starts: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """q: (N, H_q, D) packed chunks; kv: (NB, 2, H_kv, 16, D) one layer; block_tables:
    (S, max_blocks) int32; q_starts, q_lens, starts: (S,) int32. -> (N, H_q, D)."""
    h_q, d = q.shape[1:]
    _, two, h_kv, bt, d_kv = kv.shape
    s = block_tables.shape[0]
    assert two == 2 and bt == BLOCK_T and d_kv == d, f"kv layout {tuple(kv.shape)}"
    assert h_q % h_kv == 0 and d >= 16, "tl.dot needs head_dim >= 16"
    assert q.stride(-1) == 1 and kv.stride(-1) == 1, "head dim must be contiguous"
    for meta in (block_tables, q_starts, q_lens, starts):
        assert meta.dtype == torch.int32, "metadata must be int32"
    assert q_starts.shape == q_lens.shape == starts.shape == (s,)
    assert q.dtype == kv.dtype
    out = torch.empty_like(q)
    max_q = int(q_lens.max()) if s else 0
    grid = (s, h_q, max(1, -(-max_q // BLOCK_M)))
    _prefill_kernel[grid](
        q,
        kv,
        block_tables,
        q_starts,
        q_lens,
        starts,
        out,
        scale,
        q.stride(0),
        q.stride(1),
        kv.stride(0),
        kv.stride(1),
        kv.stride(2),
        kv.stride(3),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        G=h_q // h_kv,
        D=d,
        BLOCK_D=next_pow2(d),
        BLOCK_M=BLOCK_M,
        BLOCK_T=BLOCK_T,
    )
    return out


def ref_prefill_paged_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    block_tables: torch.Tensor,
    q_starts: torch.Tensor,
    q_lens: torch.Tensor,
    starts: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Plain torch, one chunk at a time, with an explicit causal mask, in fp32."""
    h_q = q.shape[1]
    h_kv = kv.shape[2]
    out = torch.empty_like(q)
    for i in range(block_tables.shape[0]):
        q0, n, start = int(q_starts[i]), int(q_lens[i]), int(starts[i])
        total = start + n
        k, v = contiguous_kv(kv, block_tables[i], total)  # (H_kv, total, D)
        k = k.repeat_interleave(h_q // h_kv, dim=0)  # (H_q, total, D)
        v = v.repeat_interleave(h_q // h_kv, dim=0)
        qi = q[q0 : q0 + n].float().transpose(0, 1)  # (H_q, n, D)
        scores = qi @ k.transpose(1, 2) * scale  # (H_q, n, total)
        allowed = torch.arange(total)[None, :] <= (start + torch.arange(n))[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
        out[q0 : q0 + n] = (torch.softmax(scores, -1) @ v).transpose(0, 1).to(q.dtype)
    return out
