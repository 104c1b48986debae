"""The paged engine computes what transformers computes: logits and greedy tokens."""

from __future__ import annotations

import pytest
import torch

from tests.factories import LLAMA3_ROPE, paged_greedy, random_prompt, reference_greedy

ATOL = 1e-3


def test_smollm2_logits_match_transformers_over_prompt_and_16_decode_steps(smol, smol_reference):
    # 1. A real prompt through the chat template.
    prompt = smol.tokenizer.encode_chat([{"role": "user", "content": "Name three colours."}])
    # 2. Our paged path and the reference each decode 16 greedy steps.
    ours, our_logits, pool = paged_greedy(smol.model, prompt, 16)
    ref, ref_logits = reference_greedy(smol_reference, prompt, 16)
    # 3. Every step's logits agree within 1e-3 and so do the tokens.
    for step, (a, b) in enumerate(zip(our_logits, ref_logits, strict=True)):
        assert torch.allclose(a, b, atol=ATOL, rtol=0), f"step {step}: {(a - b).abs().max()}"
    assert ours == ref
    pool.check_invariants()
    assert pool.num_in_use == 0


def test_smollm2_greedy_tokens_identical_for_64_steps(smol, smol_reference):
    prompt = smol.tokenizer.encode("The history of the printing press began")
    ours, _, pool = paged_greedy(smol.model, prompt, 64)
    ref, _ = reference_greedy(smol_reference, prompt, 64)
    assert ours == ref
    pool.check_invariants()


@pytest.mark.parametrize(
    ("heads", "kv_heads", "rope"),
    [
        (4, 4, None),
        (6, 2, None),
        (6, 2, LLAMA3_ROPE),
        (4, 4, {"rope_type": "linear", "factor": 2.0}),
    ],
    ids=["gqa1", "gqa3", "gqa3-llama3-rope", "gqa1-linear-rope"],
)
def test_tiny_llama_matches_transformers(tiny_factory, heads, kv_heads, rope):
    tiny = tiny_factory(heads=heads, kv_heads=kv_heads, rope_scaling=rope)
    # Long enough that llama3 scaling's low-frequency band matters (original max 64).
    prompt = random_prompt(150, 512, seed=heads)
    ours, our_logits, pool = paged_greedy(tiny.loaded.model, prompt, 64)
    ref, ref_logits = reference_greedy(tiny.reference, prompt, 64)
    for step in range(17):  # prompt + 16 decode steps, logits within 1e-3
        assert torch.allclose(our_logits[step], ref_logits[step], atol=ATOL, rtol=0), step
    assert ours == ref  # 64 greedy tokens
    pool.check_invariants()


def test_tied_embeddings_tiny_model(tiny_factory):
    tiny = tiny_factory(tie=True)
    prompt = random_prompt(40, 512, seed=7)
    ours, _, _ = paged_greedy(tiny.loaded.model, prompt, 20)
    ref, _ = reference_greedy(tiny.reference, prompt, 20)
    assert ours == ref


def test_rope_scaling_changes_the_output(tiny_factory):
    """Guards the test above: if scaling were ignored, the two models would agree."""
    plain = tiny_factory(rope_scaling=None)
    scaled = tiny_factory(rope_scaling=LLAMA3_ROPE)
    prompt = random_prompt(150, 512, seed=1)
    _, a, _ = paged_greedy(plain.loaded.model, prompt, 1)
    _, b, _ = paged_greedy(scaled.loaded.model, prompt, 1)
    assert not torch.allclose(a[0], b[0], atol=ATOL)
