"""Paged decode and prefill attention kernels against their torch references."""

from __future__ import annotations

import pytest
import torch

from kernels.paged_decode_attention import paged_decode_attention, ref_paged_decode_attention
from kernels.prefill_attention import prefill_paged_attention, ref_prefill_paged_attention
from tests.kernels.conftest import DTYPES, tolerance


def make_kv(num_blocks: int, h_kv: int, d: int, dtype: torch.dtype, device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(num_blocks, 2, h_kv, 16, d, generator=g).to(dtype).to(device)


def scattered_tables(lens: list[int], num_blocks: int, seed: int = 0) -> torch.Tensor:
    """Each sequence gets distinct blocks in shuffled order, padded with block 0."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_blocks, generator=g).tolist()
    need = [-(-n // 16) for n in lens]
    tables = torch.zeros((len(lens), max(need)), dtype=torch.int32)
    at = 0
    for i, k in enumerate(need):
        tables[i, :k] = torch.tensor(perm[at : at + k])
        at += k
    return tables


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("h_q", "h_kv"), [(2, 2), (6, 2), (8, 1)], ids=["gqa1", "gqa3", "gqa8"])
@pytest.mark.parametrize("d", [64, 128])
def test_decode_lengths_around_block_boundaries(device, dtype, h_q, h_kv, d):
    lens = [1, 15, 16, 17, 33]
    num_blocks = 12
    kv = make_kv(num_blocks, h_kv, d, dtype, device)
    tables = scattered_tables(lens, num_blocks).to(device)
    ctx = torch.tensor(lens, dtype=torch.int32, device=device)
    q = (
        torch.randn(len(lens), h_q, d, generator=torch.Generator().manual_seed(1))
        .to(dtype)
        .to(device)
    )
    out = paged_decode_attention(q, kv, tables, ctx, d**-0.5)
    torch.testing.assert_close(
        out, ref_paged_decode_attention(q, kv, tables, ctx, d**-0.5), **tolerance(dtype)
    )


@pytest.mark.parametrize("splits", [1, 2, 5, 16])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_kv_matches_for_any_number_of_partitions(device, dtype, splits):
    # Very different lengths in one batch: some splits of the short sequences are empty.
    lens = [3, 200, 47]
    kv = make_kv(32, 2, 64, dtype, device, seed=2)
    tables = scattered_tables(lens, 32, seed=3).to(device)
    ctx = torch.tensor(lens, dtype=torch.int32, device=device)
    q = torch.randn(3, 6, 64, generator=torch.Generator().manual_seed(4)).to(dtype).to(device)
    ref = ref_paged_decode_attention(q, kv, tables, ctx, 0.125)
    out = paged_decode_attention(q, kv, tables, ctx, 0.125, num_splits=splits)
    torch.testing.assert_close(out, ref, **tolerance(dtype))


def test_decode_ignores_stale_data_past_the_context(device):
    """Guards the masks: garbage after the last token must not change the answer."""
    kv = make_kv(4, 1, 64, torch.float32, device)
    tables = torch.tensor([[2, 0]], dtype=torch.int32, device=device)
    ctx = torch.tensor([20], dtype=torch.int32, device=device)
    q = torch.randn(1, 1, 64, device=device)
    before = paged_decode_attention(q, kv, tables, ctx, 0.125)
    kv[0, :, :, 4:] = 1e4  # slots 20..31 of the sequence
    after = paged_decode_attention(q, kv, tables, ctx, 0.125)
    torch.testing.assert_close(before, after)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("h_q", "h_kv"), [(2, 2), (6, 2), (8, 1)], ids=["gqa1", "gqa3", "gqa8"])
@pytest.mark.parametrize("d", [64, 128])
def test_prefill_chunks_over_cached_prefixes(device, dtype, h_q, h_kv, d):
    # Chunks: a fresh prompt, one after a 10-token prefix, a 1-token chunk, one starting
    # exactly on a block boundary.
    q_lens = [5, 33, 1, 17]
    starts = [0, 10, 40, 16]
    num_blocks = 20
    kv = make_kv(num_blocks, h_kv, d, dtype, device, seed=5)
    tables = scattered_tables([s + n for s, n in zip(starts, q_lens, strict=True)], num_blocks)
    i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=device)  # noqa: E731
    q_starts = [sum(q_lens[:i]) for i in range(len(q_lens))]
    q = (
        torch.randn(sum(q_lens), h_q, d, generator=torch.Generator().manual_seed(6))
        .to(dtype)
        .to(device)
    )
    args = (q, kv, tables.to(device), i32(q_starts), i32(q_lens), i32(starts), d**-0.5)
    torch.testing.assert_close(
        prefill_paged_attention(*args), ref_prefill_paged_attention(*args), **tolerance(dtype)
    )


def test_prefill_is_causal(device):
    """Changing a later token's K/V must not change an earlier query's output."""
    kv = make_kv(4, 2, 64, torch.float32, device, seed=7)
    tables = torch.tensor([[1, 3]], dtype=torch.int32, device=device)
    meta = [torch.tensor([x], dtype=torch.int32, device=device) for x in (0, 20, 0)]
    q = torch.randn(20, 2, 64, device=device)
    before = prefill_paged_attention(q, kv, tables, *meta, 0.125)
    kv[3, :, :, 2] += 5.0  # position 18
    after = prefill_paged_attention(q, kv, tables, *meta, 0.125)
    torch.testing.assert_close(before[:18], after[:18])
    assert not torch.allclose(before[18:], after[18:])
