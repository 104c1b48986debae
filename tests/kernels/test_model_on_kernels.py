"""A whole model on the Triton path gives the torch path's greedy tokens."""

from __future__ import annotations

import pytest

from tests.factories import paged_greedy, random_prompt


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (6, 2)], ids=["gqa1", "gqa3"])
def test_tiny_llama_greedy_tokens_identical_on_triton_and_torch(tiny_factory, heads, kv_heads):
    tiny = tiny_factory(heads=heads, kv_heads=kv_heads, head_dim=16)
    model = tiny.loaded.model
    prompt = random_prompt(40, 512, seed=heads)
    # Chunked prefill (16 + 16 + 8) then 12 decode steps, on each path.
    model.use_backend("torch")
    on_torch, logits_torch, _ = paged_greedy(model, prompt, 12, chunk=16)
    model.use_backend("triton")
    try:
        on_triton, logits_triton, pool = paged_greedy(model, prompt, 12, chunk=16)
    finally:
        model.use_backend("torch")
    assert on_triton == on_torch
    assert (
        max((a - b).abs().max().item() for a, b in zip(logits_torch, logits_triton, strict=True))
        < 1e-3
    )
    pool.check_invariants()
    assert pool.num_in_use == 0
