"""Building blocks shaped for tensor parallelism: each linear knows which slice it holds.

Weights are stored transposed, (in, out), so a forward is `x @ w`: on CPU this reads
the weight row-major in the order the GEMM wants (faster than `F.linear` at small batch).

    ColumnParallelLinear  splits `out` across ranks; each rank's output is its own slice.
    RowParallelLinear     splits `in` across ranks; partial outputs are summed (all-reduce).

With tp.size == 1 (today) both are plain matmuls; the split and the all-reduce are in
place so a TP group only has to pass its `TensorParallel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class TensorParallel:
    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ValueError(f"tp rank {self.rank} outside group of {self.size}")

    def split(self, n: int, what: str) -> int:
        if n % self.size:
            raise ValueError(f"{what}={n} does not split across {self.size} tp ranks")
        return n // self.size


SINGLE = TensorParallel()


class ColumnParallelLinear(nn.Module):
    def __init__(self, d_in: int, d_out: int, tp: TensorParallel, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(
            torch.empty(d_in, tp.split(d_out, "out features"), dtype=dtype), requires_grad=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class RowParallelLinear(nn.Module):
    def __init__(self, d_in: int, d_out: int, tp: TensorParallel, dtype: torch.dtype) -> None:
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(
            torch.empty(tp.split(d_in, "in features"), d_out, dtype=dtype), requires_grad=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight
        if self.tp.size > 1:
            dist.all_reduce(y)
        return y


class RMSNorm(nn.Module):
    """Holds an RMSNorm's weight; the norm itself runs fused with the residual add
    (`Ops.add_rmsnorm`)."""

    def __init__(self, dim: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)


class VocabHead(nn.Module):
    """Token embedding and LM head over one (dim, vocab) matrix.

    Tied models use it both ways; an untied model has two of them. Stored (dim, vocab)
    so the LM head is a row-major `x @ w`; an embedding lookup reads columns.
    """

    def __init__(self, dim: int, vocab: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, vocab, dtype=dtype), requires_grad=False)

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.weight.index_select(1, token_ids).t()  # (N, dim)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.weight).float()  # (N, vocab)
