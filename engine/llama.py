"""Llama-family decoder over a paged KV cache (gpt-fast style: plain modules, shapes noted).

One forward serves a whole mixed step (prefill chunks and decode tokens of many
sequences): linears run over all N token rows at once, attention reads each sequence's
history through its block table, and only the rows that need a next token pay for the
final norm and LM head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention import paged_attention
from engine.batch import ForwardBatch
from engine.config import ModelArgs
from engine.kv_cache import KVCache
from engine.layers import (
    SINGLE,
    ColumnParallelLinear,
    RMSNorm,
    RowParallelLinear,
    TensorParallel,
    VocabHead,
)
from engine.rope import apply_rope, rope_for_positions, rope_table


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, tp: TensorParallel, dtype: torch.dtype):
        super().__init__()
        self.layer = layer
        self.n_heads = tp.split(args.n_heads, "n_heads")
        self.n_kv_heads = tp.split(args.n_kv_heads, "n_kv_heads")
        self.head_dim = args.head_dim
        self.scale = args.head_dim**-0.5
        qkv_out = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
        self.wqkv = ColumnParallelLinear(args.dim, qkv_out, tp, dtype)  # [q | k | v]
        self.wo = RowParallelLinear(args.n_heads * args.head_dim, args.dim, tp, dtype)

    def forward(
        self,
        x: torch.Tensor,  # (N, dim)
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, signed sin: (N, 1, D)
        batch: ForwardBatch,
        kv: KVCache,
    ) -> torch.Tensor:
        n, h_q, h_kv = x.shape[0], self.n_heads, self.n_kv_heads
        qkv = self.wqkv(x).view(n, h_q + 2 * h_kv, self.head_dim)  # [q heads | k | v]
        qk = qkv[:, : h_q + h_kv]
        qk.copy_(apply_rope(qk, *rope))  # rotate in place: K stays next to V for one write
        kv.write(
            self.layer, batch.slot_blocks, batch.slot_offsets, qkv[:, h_q:].unflatten(1, (2, h_kv))
        )
        o = paged_attention(qkv[:, :h_q], kv, self.layer, batch.attention, self.scale)
        return self.wo(o.view(n, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(x w1) * (x w3)), with w1|w3 fused into one matmul."""

    def __init__(self, args: ModelArgs, tp: TensorParallel, dtype: torch.dtype):
        super().__init__()
        self.hidden = tp.split(args.ffn_dim, "ffn_dim")
        self.w13 = ColumnParallelLinear(args.dim, 2 * args.ffn_dim, tp, dtype)  # [gate | up]
        self.w2 = RowParallelLinear(args.ffn_dim, args.dim, tp, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split(self.hidden, dim=-1)
        return self.w2(F.silu(gate).mul_(up))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, tp: TensorParallel, dtype: torch.dtype):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps, dtype)
        self.attention = Attention(args, layer, tp, dtype)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps, dtype)
        self.feed_forward = FeedForward(args, tp, dtype)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        kv: KVCache,
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope, batch, kv)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, args: ModelArgs, dtype: torch.dtype = torch.float32, tp=SINGLE):
        super().__init__()
        if tp.size > 1:
            raise NotImplementedError("vocab-parallel embedding arrives with tensor parallelism")
        self.args = args
        self.dtype = dtype
        self.tok_embeddings = VocabHead(args.dim, args.vocab_size, dtype)
        self.layers = nn.ModuleList(
            TransformerBlock(args, i, tp, dtype) for i in range(args.n_layers)
        )
        self.norm = RMSNorm(args.dim, args.norm_eps, dtype)
        self.output = None if args.tie_embeddings else VocabHead(args.dim, args.vocab_size, dtype)
        cos, sin = rope_table(args, dtype)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv: KVCache) -> torch.Tensor:
        """-> (len(batch.logits_rows), vocab) fp32 logits."""
        x = self.tok_embeddings.embed(batch.token_ids)  # (N, dim)
        rope = rope_for_positions(self.rope_cos, self.rope_sin, batch.positions)
        for layer in self.layers:
            x = layer(x, rope, batch, kv)
        x = self.norm(x.index_select(0, batch.logits_rows))  # (S, dim)
        head = self.output or self.tok_embeddings
        return head.logits(x)
