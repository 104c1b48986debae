"""The model's non-matmul operations, behind one interface with two backends.

    TorchOps   plain torch: the CPU path (and what CPU tests compare against)
    TritonOps  the kernels in kernels/: the CUDA path; on CPU only under TRITON_INTERPRET

Same calls, same results; `make_ops("auto")` picks Triton for CUDA and torch otherwise.
The model never branches on the backend itself.
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
import torch.nn.functional as F

from engine.attention import paged_attention
from engine.batch import ForwardBatch
from engine.kv_cache import KVCache
from engine.rope import apply_rope, rope_for_positions

Backend = Literal["auto", "torch", "triton"]


Tensor = torch.Tensor


class Ops(Protocol):
    def add_rmsnorm(
        self, x: Tensor, residual: Tensor | None, weight: Tensor, eps: float
    ) -> tuple[Tensor, Tensor]:
        """-> (rmsnorm(residual + x) * weight, residual + x); residual None means x alone."""
        ...

    def prepare_rope(self, cos: Tensor, sin: Tensor, batch: ForwardBatch) -> tuple[Tensor, ...]:
        """Per-step RoPE inputs, built once and passed to every layer's `rope_`."""
        ...

    def rope_(self, x: Tensor, prepared: tuple[Tensor, ...]) -> None:
        """Rotate x: (N, heads, D) in place."""
        ...

    def write_kv(self, kv: KVCache, layer: int, batch: ForwardBatch, kv_new: Tensor) -> None:
        """kv_new: (N, 2, H_kv, D), K and V of this step's tokens."""
        ...

    def attention(
        self, q: Tensor, kv: KVCache, layer: int, batch: ForwardBatch, scale: float
    ) -> Tensor: ...


class TorchOps:
    def add_rmsnorm(
        self, x: Tensor, residual: Tensor | None, weight: Tensor, eps: float
    ) -> tuple[Tensor, Tensor]:
        residual = x if residual is None else residual + x
        return F.rms_norm(residual, weight.shape, weight, eps), residual

    def prepare_rope(self, cos: Tensor, sin: Tensor, batch: ForwardBatch) -> tuple[Tensor, ...]:
        return rope_for_positions(cos, sin, batch.positions)

    def rope_(self, x: Tensor, prepared: tuple[Tensor, ...]) -> None:
        cos, sin_signed = prepared
        x.copy_(apply_rope(x, cos, sin_signed))

    def write_kv(self, kv: KVCache, layer: int, batch: ForwardBatch, kv_new: Tensor) -> None:
        kv.write(layer, batch.slot_blocks, batch.slot_offsets, kv_new)

    def attention(
        self, q: Tensor, kv: KVCache, layer: int, batch: ForwardBatch, scale: float
    ) -> Tensor:
        return paged_attention(q, kv, layer, batch.attention, scale)


class TritonOps:
    """Kernels from kernels/; tensors must live where Triton can run them."""

    def __init__(self, decode_splits: int = 1) -> None:
        from kernels._triton import HAVE_TRITON

        if not HAVE_TRITON:
            raise RuntimeError("the triton backend needs the triton package")
        self.decode_splits = decode_splits

    def add_rmsnorm(
        self, x: Tensor, residual: Tensor | None, weight: Tensor, eps: float
    ) -> tuple[Tensor, Tensor]:
        from kernels.rmsnorm import add_rmsnorm

        if residual is None:
            residual = x.contiguous()
            return add_rmsnorm(None, residual, weight, eps), residual
        return add_rmsnorm(x.contiguous(), residual, weight, eps), residual

    def prepare_rope(self, cos: Tensor, sin: Tensor, batch: ForwardBatch) -> tuple[Tensor, ...]:
        return cos, sin, batch.positions

    def rope_(self, x: Tensor, prepared: tuple[Tensor, ...]) -> None:
        from kernels.rope import rope_

        cos, sin, positions = prepared
        rope_(x, positions, cos, sin)

    def write_kv(self, kv: KVCache, layer: int, batch: ForwardBatch, kv_new: Tensor) -> None:
        from kernels.kv_write import kv_write

        k, v = kv_new.unbind(1)
        kv_write(kv.data[:, layer], k, v, batch.slot_blocks, batch.slot_offsets)

    def attention(
        self, q: Tensor, kv: KVCache, layer: int, batch: ForwardBatch, scale: float
    ) -> Tensor:
        from kernels.paged_decode_attention import paged_decode_attention
        from kernels.prefill_attention import prefill_paged_attention

        plan, meta = batch.attention, batch.attention.kernel
        kv_layer = kv.data[:, layer]
        parts = []
        if plan.num_decode:
            parts.append(
                paged_decode_attention(
                    q[: plan.num_decode].contiguous(),
                    kv_layer,
                    meta.decode_block_tables,
                    meta.decode_context_lens,
                    scale,
                    self.decode_splits,
                )
            )
        if plan.prefills:
            parts.append(
                prefill_paged_attention(
                    q[plan.num_decode :].contiguous(),
                    kv_layer,
                    meta.prefill_block_tables,
                    meta.prefill_q_starts,
                    meta.prefill_q_lens,
                    meta.prefill_starts,
                    scale,
                )
            )
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def make_ops(backend: Backend, device: torch.device | str = "cpu") -> Ops:
    if backend == "auto":
        backend = "triton" if torch.device(device).type == "cuda" else "torch"
    return TritonOps() if backend == "triton" else TorchOps()
