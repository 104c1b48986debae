"""GPU benchmark of the kernels; prints one JSON line.

    python -m kernels.bench            (needs a CUDA device)

Shapes are Llama-3-8B's attention (32 query heads, 8 KV heads, head_dim 128), bf16.
- paged decode attention at batch {1, 16, 64} x context {512, 4096, 32768}: achieved
  GB/s (KV bytes read / time) and fraction of the device's HBM peak, beside torch SDPA
  over the same KV already gathered contiguous (its best case: no gather counted);
- fused add + RMSNorm and RoPE: GB/s;
- prefill attention over paged KV at 2K and 8K tokens: TFLOP/s (causal FLOPs).
Target on H100/H200: paged decode >= 70 % of HBM peak at batch 64, context 4096.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

H_Q, H_KV, D = 32, 8, 128
DTYPE = torch.bfloat16
HBM_PEAK_GBS = {"H100": 3350.0, "H200": 4800.0, "B200": 8000.0, "A100": 2039.0}


def peak_gbs(name: str) -> float | None:
    return next((v for k, v in HBM_PEAK_GBS.items() if k in name), None)


def _time_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100))


def bench_decode(batch: int, context: int, peak: float | None) -> dict[str, float]:
    from kernels.paged_decode_attention import paged_decode_attention

    blocks_per_seq = context // 16
    num_blocks = batch * blocks_per_seq
    kv = torch.randn(num_blocks, 2, H_KV, 16, D, device="cuda", dtype=DTYPE)
    tables = torch.randperm(num_blocks, device="cuda").view(batch, -1).to(torch.int32)
    lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    q = torch.randn(batch, H_Q, D, device="cuda", dtype=DTYPE)
    splits = max(1, min(16, 132 * 2 // (batch * H_Q)))  # fill the SMs at small batch
    kv_bytes = num_blocks * kv[0].numel() * kv.element_size()
    ms = _time_ms(lambda: paged_decode_attention(q, kv, tables, lens, D**-0.5, splits))
    # SDPA's best case: K/V gathered contiguous beforehand, (B, H_kv, T, D).
    k = kv[tables.long(), 0].permute(0, 2, 1, 3, 4).reshape(batch, H_KV, context, D)
    v = kv[tables.long(), 1].permute(0, 2, 1, 3, 4).reshape(batch, H_KV, context, D)
    qs = q.view(batch, H_Q, 1, D)
    sdpa_ms = _time_ms(lambda: F.scaled_dot_product_attention(qs, k, v, enable_gqa=True))
    gbs = kv_bytes / ms / 1e6
    out = {"ms": round(ms, 4), "gbs": round(gbs, 1), "sdpa_contiguous_ms": round(sdpa_ms, 4)}
    if peak:
        out["frac_peak"] = round(gbs / peak, 3)
    return out


def bench_norm_rope() -> dict[str, float]:
    from kernels.rmsnorm import add_rmsnorm
    from kernels.rope import rope_

    rows, hidden = 8192, 4096
    x = torch.randn(rows, hidden, device="cuda", dtype=DTYPE)
    res = torch.randn_like(x)
    w = torch.randn(hidden, device="cuda", dtype=DTYPE)
    ms = _time_ms(lambda: add_rmsnorm(x, res, w, 1e-5))
    norm_bytes = 4 * x.numel() * x.element_size()  # read x, res; write res, out
    qk = torch.randn(rows, H_Q + H_KV, D, device="cuda", dtype=DTYPE)
    pos = torch.arange(rows, device="cuda")
    cos = torch.randn(rows, D // 2, device="cuda")
    sin = torch.randn(rows, D // 2, device="cuda")
    rope_ms = _time_ms(lambda: rope_(qk, pos, cos, sin))
    rope_bytes = 2 * qk.numel() * qk.element_size()
    return {
        "add_rmsnorm_gbs": round(norm_bytes / ms / 1e6, 1),
        "rope_gbs": round(rope_bytes / rope_ms / 1e6, 1),
    }


def bench_prefill(tokens: int) -> float:
    from kernels.prefill_attention import prefill_paged_attention

    num_blocks = tokens // 16
    kv = torch.randn(num_blocks, 2, H_KV, 16, D, device="cuda", dtype=DTYPE)
    tables = torch.randperm(num_blocks, device="cuda").view(1, -1).to(torch.int32)
    q = torch.randn(tokens, H_Q, D, device="cuda", dtype=DTYPE)
    i32 = lambda x: torch.tensor([x], dtype=torch.int32, device="cuda")  # noqa: E731
    ms = _time_ms(
        lambda: prefill_paged_attention(q, kv, tables, i32(0), i32(tokens), i32(0), D**-0.5)
    )
    flops = 4 * H_Q * D * tokens * (tokens + 1) / 2
    return round(flops / ms / 1e9, 2)


def main() -> int:
    if not torch.cuda.is_available():
        print("kernels.bench needs a CUDA device; the CPU tests cover correctness", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    peak = peak_gbs(name)
    result: dict[str, object] = {"bench": "kernels", "device": name, "hbm_peak_gbs": peak}
    for b in (1, 16, 64):
        for ctx in (512, 4096, 32768):
            for key, value in bench_decode(b, ctx, peak).items():
                result[f"decode_b{b}_ctx{ctx}_{key}"] = value
    result.update(bench_norm_rope())
    for n in (2048, 8192):
        result[f"prefill_tflops_{n}"] = bench_prefill(n)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
