"""KV write, fused add + RMSNorm, RoPE and block pack/unpack against their references."""

from __future__ import annotations

import pytest
import torch

from engine.config import ModelArgs, RopeScaling
from engine.rope import rope_table
from kernels.block_copy import pack_blocks, ref_pack_blocks, ref_unpack_blocks, unpack_blocks
from kernels.kv_write import kv_write, ref_kv_write
from kernels.rmsnorm import add_rmsnorm, ref_add_rmsnorm
from kernels.rope import ref_rope_, rope_
from tests.kernels.conftest import DTYPES, tolerance


def rand(*shape: int, dtype: torch.dtype, device: str, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [64, 128])
def test_kv_write_scatters_rows_into_slots(device, dtype, d):
    cache = torch.zeros(6, 2, 3, 16, d, dtype=dtype, device=device)
    expected = cache.clone()
    k, v = (
        rand(5, 3, d, dtype=dtype, device=device),
        rand(5, 3, d, dtype=dtype, device=device, seed=1),
    )
    blocks = torch.tensor([4, 4, 0, 5, 2], device=device)
    offsets = torch.tensor([0, 15, 7, 1, 16 - 1], device=device)
    kv_write(cache, k, v, blocks, offsets)
    ref_kv_write(expected, k, v, blocks, offsets)
    torch.testing.assert_close(cache, expected, atol=0, rtol=0)
    assert cache.count_nonzero() == expected.count_nonzero() > 0


def test_kv_write_accepts_strided_views_of_a_fused_qkv(device):
    qkv = rand(4, 6 + 2 * 2, 64, dtype=torch.float32, device=device)  # [q x6 | k x2 | v x2]
    k, v = qkv[:, 6:8], qkv[:, 8:10]
    cache, expected = (torch.zeros(3, 2, 2, 16, 64, device=device) for _ in range(2))
    blocks, offsets = (
        torch.tensor([0, 1, 2, 2], device=device),
        torch.tensor([3, 4, 5, 6], device=device),
    )
    kv_write(cache, k, v, blocks, offsets)
    ref_kv_write(expected, k, v, blocks, offsets)
    torch.testing.assert_close(cache, expected, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [576, 1024])
@pytest.mark.parametrize("with_x", [True, False])
def test_add_rmsnorm(device, dtype, hidden, with_x):
    res = rand(7, hidden, dtype=dtype, device=device)
    x = rand(7, hidden, dtype=dtype, device=device, seed=1) if with_x else None
    w = rand(hidden, dtype=dtype, device=device, seed=2)
    res_ref = res.clone()
    out = add_rmsnorm(x, res, w, 1e-5)
    ref = ref_add_rmsnorm(x, res_ref, w, 1e-5)
    torch.testing.assert_close(out, ref, **tolerance(dtype))
    torch.testing.assert_close(res, res_ref, **tolerance(dtype))  # residual updated in place


SCALINGS = {
    "default": None,
    "linear": RopeScaling(kind="linear", factor=4.0),
    "llama3": RopeScaling(kind="llama3", factor=8.0, original_max_position_embeddings=64),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("d", [64, 128])
def test_rope_in_place_on_a_strided_qk_view(device, dtype, scaling, d):
    args = ModelArgs(
        vocab_size=8,
        dim=4 * d,
        n_layers=1,
        n_heads=4,
        n_kv_heads=2,
        ffn_dim=8,
        max_seq_len=512,
        rope_scaling=SCALINGS[scaling],
    )
    cos, sin = (t.to(device) for t in rope_table(args, torch.float32))
    qkv = rand(6, 4 + 2 * 2, d, dtype=dtype, device=device)
    positions = torch.tensor([0, 1, 17, 100, 300, 511], device=device)
    expected = qkv.clone()
    rope_(qkv[:, :6], positions, cos, sin)
    ref_rope_(expected[:, :6], positions, cos, sin)
    torch.testing.assert_close(qkv, expected, **tolerance(dtype))
    assert torch.equal(qkv[:, 6:], expected[:, 6:])  # V untouched


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("head0", "n_heads"), [(0, 4), (0, 2), (2, 2), (3, 1)])
def test_pack_blocks_with_head_slices(device, dtype, head0, n_heads):
    cache = rand(9, 3, 2, 4, 16, 64, dtype=dtype, device=device)
    ids = torch.tensor([7, 2, 5], device=device)
    got = pack_blocks(cache, ids, head0, n_heads)
    assert got.shape == (3, 3, 2, n_heads, 16, 64) and got.is_contiguous()
    torch.testing.assert_close(got, ref_pack_blocks(cache, ids, head0, n_heads), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unpack_maps_heads_between_tp_degrees(device, dtype):
    # A TP=1 prefill cache (4 heads) to two TP=2 decode ranks (2 heads each), and back.
    src = rand(8, 2, 2, 4, 16, 64, dtype=dtype, device=device)
    src_ids = torch.tensor([6, 1], device=device)
    ranks = [torch.zeros(5, 2, 2, 2, 16, 64, dtype=dtype, device=device) for _ in range(2)]
    dst_ids = torch.tensor([3, 0], device=device)
    for r, rank_cache in enumerate(ranks):
        unpack_blocks(pack_blocks(src, src_ids, head0=2 * r, n_heads=2), rank_cache, dst_ids)
    for r, rank_cache in enumerate(ranks):
        expected = torch.zeros_like(rank_cache)
        ref_unpack_blocks(ref_pack_blocks(src, src_ids, 2 * r, 2), expected, dst_ids)
        torch.testing.assert_close(rank_cache, expected, atol=0, rtol=0)
    back = torch.zeros_like(src)
    for r, rank_cache in enumerate(ranks):
        unpack_blocks(pack_blocks(rank_cache, dst_ids), back, src_ids, head0=2 * r)
    torch.testing.assert_close(back[src_ids], src[src_ids], atol=0, rtol=0)
