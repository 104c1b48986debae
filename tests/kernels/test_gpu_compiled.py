"""Compiled kernels at realistic shapes (GPU only; the interpreted twins cover CPU)."""

from __future__ import annotations

import pytest
import torch

from kernels.paged_decode_attention import paged_decode_attention, ref_paged_decode_attention
from kernels.prefill_attention import prefill_paged_attention, ref_prefill_paged_attention


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 8])
def test_decode_llama3_8b_shapes_bf16(splits):
    b, h_q, h_kv, d, ctx = 8, 32, 8, 128, 3000
    nb = b * -(-ctx // 16)
    kv = torch.randn(nb, 2, h_kv, 16, d, device="cuda", dtype=torch.bfloat16)
    tables = torch.randperm(nb, device="cuda").view(b, -1).to(torch.int32)
    lens = torch.randint(1, ctx + 1, (b,), device="cuda", dtype=torch.int32)
    q = torch.randn(b, h_q, d, device="cuda", dtype=torch.bfloat16)
    out = paged_decode_attention(q, kv, tables, lens, d**-0.5, splits)
    ref = ref_paged_decode_attention(q.float(), kv.float(), tables, lens, d**-0.5)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_prefill_2k_bf16():
    n, h_q, h_kv, d = 2048, 32, 8, 128
    kv = torch.randn(n // 16, 2, h_kv, 16, d, device="cuda", dtype=torch.bfloat16)
    tables = torch.randperm(n // 16, device="cuda").view(1, -1).to(torch.int32)
    q = torch.randn(n, h_q, d, device="cuda", dtype=torch.bfloat16)
    meta = [torch.tensor([x], dtype=torch.int32, device="cuda") for x in (0, n, 0)]
    out = prefill_paged_attention(q, kv, tables, *meta, d**-0.5)
    ref = ref_prefill_paged_attention(q.float(), kv.float(), tables, *meta, d**-0.5)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
