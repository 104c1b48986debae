"""Fused residual add + RMSNorm: residual += x; y = residual / rms(residual) * weight.

One program per row; the row (hidden size up to a few thousand) fits in one block.
Statistics in fp32 whatever the storage dtype.
"""

from __future__ import annotations

import torch

from kernels._triton import next_pow2, tl, triton


@triton.jit
def _add_rmsnorm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    eps,
    s_x,
    s_res,
    s_out,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_X: tl.constexpr,
):
    row = tl.program_id(0)
    i = tl.arange(0, BLOCK)
    ok = i < N
    r = tl.load(res_ptr + row * s_res + i, mask=ok, other=0.0).to(tl.float32)
    if HAS_X:
        r += tl.load(x_ptr + row * s_x + i, mask=ok, other=0.0).to(tl.float32)
        tl.store(res_ptr + row * s_res + i, r.to(res_ptr.dtype.element_ty), mask=ok)
    inv = 1.0 / tl.sqrt(tl.sum(r * r, axis=0) / N + eps)
    w = tl.load(w_ptr + i, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * s_out + i, (r * inv * w).to(out_ptr.dtype.element_ty), mask=ok)


def add_rmsnorm(
    x: torch.Tensor | None, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """residual: (R, N), updated in place to residual + x (when x is given);
    returns rmsnorm(residual) * weight as a new (R, N) tensor."""
    rows, n = residual.shape
    assert weight.shape == (n,) and residual.stride(-1) == 1
    if x is not None:
        assert x.shape == residual.shape and x.stride(-1) == 1
    out = torch.empty_like(residual)
    _add_rmsnorm_kernel[(rows,)](
        residual if x is None else x,
        residual,
        weight,
        out,
        eps,
        0 if x is None else x.stride(0),
        residual.stride(0),
        out.stride(0),
        N=n,
        BLOCK=next_pow2(n),
        HAS_X=x is not None,
    )
    return out


def ref_add_rmsnorm(
    x: torch.Tensor | None, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    if x is not None:
        residual.add_(x)
    r = residual.float()
    return (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(
        residual.dtype
    )
