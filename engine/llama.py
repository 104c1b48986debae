"""Llama-family decoder over a paged KV cache (gpt-fast style: plain modules, shapes noted).

One forward serves a whole mixed step (prefill chunks and decode tokens of many
sequences): linears run over all N token rows at once, attention reads each sequence's
history through its block table, and only the rows that need a next token pay for the
final norm and LM head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

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
from engine.ops import Backend, Ops, make_ops
from engine.rope import rope_table


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer: int, tp: TensorParallel, dtype: torch.dtype) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads = tp.split(args.n_heads, "n_heads")
        self.n_kv_heads = tp.split(args.n_kv_heads, "n_kv_heads")
        self.head_dim = args.head_dim
        self.scale = args.head_dim**-0.5
        qkv_out = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
        self.wqkv = ColumnParallelLinear(args.dim, qkv_out, tp, dtype)  # [q | k | v]
        self.wo = RowParallelLinear(args.n_heads * args.head_dim, args.dim, tp, dtype)

    def forward(self, x: torch.Tensor, step: Step) -> torch.Tensor:
        n, h_q, h_kv = x.shape[0], self.n_heads, self.n_kv_heads
        qkv = self.wqkv(x).view(n, h_q + 2 * h_kv, self.head_dim)  # [q heads | k | v]
        step.ops.rope_(qkv[:, : h_q + h_kv], step.rope)  # in place: K stays next to V
        k_and_v = qkv[:, h_q:].unflatten(1, (2, h_kv))  # (N, 2, H_kv, D)
        step.ops.write_kv(step.kv, self.layer, step.batch, k_and_v)
        o = step.ops.attention(qkv[:, :h_q], step.kv, self.layer, step.batch, self.scale)
        return self.wo(o.reshape(n, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(x w1) * (x w3)), with w1|w3 fused into one matmul."""

    def __init__(self, args: ModelArgs, tp: TensorParallel, dtype: torch.dtype) -> None:
        super().__init__()
        self.hidden = tp.split(args.ffn_dim, "ffn_dim")
        self.w13 = ColumnParallelLinear(args.dim, 2 * args.ffn_dim, tp, dtype)  # [gate | up]
        self.w2 = RowParallelLinear(args.ffn_dim, args.dim, tp, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split(self.hidden, dim=-1)
        return self.w2(F.silu(gate).mul_(up))


@dataclass(frozen=True)
class Step:
    """What every layer needs from the step besides its input."""

    batch: ForwardBatch
    kv: KVCache
    ops: Ops
    rope: tuple[torch.Tensor, ...]


class TransformerBlock(nn.Module):
    """Residual stream kept apart: each block returns its output and the running sum, so
    the add and the next norm fuse into one op."""

    def __init__(self, args: ModelArgs, layer: int, tp: TensorParallel, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = args.norm_eps
        self.attention_norm = RMSNorm(args.dim, dtype)
        self.attention = Attention(args, layer, tp, dtype)
        self.ffn_norm = RMSNorm(args.dim, dtype)
        self.feed_forward = FeedForward(args, tp, dtype)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None, step: Step
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = step.ops.add_rmsnorm(x, residual, self.attention_norm.weight, self.eps)
        h, residual = step.ops.add_rmsnorm(
            self.attention(h, step), residual, self.ffn_norm.weight, self.eps
        )
        return self.feed_forward(h), residual


class Llama(nn.Module):
    def __init__(
        self,
        args: ModelArgs,
        dtype: torch.dtype = torch.float32,
        tp: TensorParallel = SINGLE,
        backend: Backend = "auto",
    ) -> None:
        super().__init__()
        if tp.size > 1:
            raise NotImplementedError("vocab-parallel embedding arrives with tensor parallelism")
        self.args = args
        self.dtype = dtype
        self.ops = make_ops(backend)
        self.tok_embeddings = VocabHead(args.dim, args.vocab_size, dtype)
        self.layers = nn.ModuleList(
            TransformerBlock(args, i, tp, dtype) for i in range(args.n_layers)
        )
        self.norm = RMSNorm(args.dim, dtype)
        self.output = None if args.tie_embeddings else VocabHead(args.dim, args.vocab_size, dtype)
        cos, sin = rope_table(args, dtype)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def use_backend(self, backend: Backend) -> None:
        self.ops = make_ops(backend, self.rope_cos.device)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv: KVCache) -> torch.Tensor:
        """-> (len(batch.logits_rows), vocab) fp32 logits."""
        step = Step(batch, kv, self.ops, self.ops.prepare_rope(self.rope_cos, self.rope_sin, batch))
        x = self.tok_embeddings.embed(batch.token_ids)  # (N, dim)
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual, step)
        rows = batch.logits_rows
        assert residual is not None
        x, _ = self.ops.add_rmsnorm(
            x.index_select(0, rows),
            residual.index_select(0, rows),
            self.norm.weight,
            self.args.norm_eps,
        )
        head = self.output or self.tok_embeddings
        return head.logits(x)
