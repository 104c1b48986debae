"""Batching never changes a sequence's tokens: mixed batches, chunks, block boundaries,
preemption. Every engine is checked for leaked blocks when the test ends."""

from __future__ import annotations

import pytest

from engine.sampling_params import SamplingParams
from tests.factories import paged_greedy, random_prompt

GREEDY = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)


def alone(model, prompt, steps):
    tokens, _, _ = paged_greedy(model, prompt, steps)
    return tokens


def test_batch_of_8_mixed_lengths_matches_each_sequence_alone(smol, make_engine):
    # 1. Eight prompts of very different lengths, straddling block boundaries.
    lengths = [1, 5, 15, 16, 17, 33, 80, 200]
    prompts = [random_prompt(n, smol.args.vocab_size, seed=n) for n in lengths]
    # 2. All at once through the engine: prefill chunks and decodes share steps.
    engine = make_engine(smol, max_batch_tokens=256, chunk_size=64)
    results = engine.generate(prompts, GREEDY)
    # 3. Each sequence got exactly the tokens it gets alone.
    for prompt, result in zip(prompts, results, strict=True):
        assert result.token_ids == alone(smol.model, prompt, GREEDY.max_tokens), len(prompt)
        assert result.finish_reason == "length"


def test_chunked_prefill_of_32_equals_one_shot(smol):
    prompt = random_prompt(150, smol.args.vocab_size, seed=3)
    one_shot, logits_a, _ = paged_greedy(smol.model, prompt, 8)
    chunked, logits_b, _ = paged_greedy(smol.model, prompt, 8, chunk=32)
    assert chunked == one_shot
    assert (logits_a[0] - logits_b[0]).abs().max() < 1e-3


@pytest.mark.parametrize("length", [1, 15, 16, 17])
def test_lengths_across_block_boundaries(smol, smol_reference, make_engine, length):
    from tests.factories import reference_greedy

    prompt = random_prompt(length, smol.args.vocab_size, seed=length)
    engine = make_engine(smol)
    [result] = engine.generate(
        [prompt], SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)
    )
    ref, _ = reference_greedy(smol_reference, prompt, 20)
    assert result.token_ids == ref


def test_preemption_by_recompute_keeps_outputs_identical(smol, make_engine):
    # 1. A cache so small that 4 growing sequences cannot all fit: the scheduler preempts.
    prompts = [random_prompt(40, smol.args.vocab_size, seed=s) for s in range(4)]
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    block_bytes = 16 * smol.args.kv_bytes_per_token(4)
    engine = make_engine(smol, kv_cache_gb=14 * block_bytes / 1e9)
    assert engine.pool.num_blocks == 14
    results = engine.generate(prompts, params)
    # 2. Someone was preempted, and still every output equals the solo run.
    assert engine.scheduler.num_preemptions > 0
    for prompt, result in zip(prompts, results, strict=True):
        assert result.token_ids == alone(smol.model, prompt, 40)


def test_abort_frees_blocks_mid_generation(smol, make_engine):
    engine = make_engine(smol)
    keep = engine.add_request(random_prompt(30, 1000, 1), GREEDY)
    drop = engine.add_request(random_prompt(50, 1000, 2), GREEDY)
    engine.step()
    engine.step()
    assert engine.pool.num_in_use > 0
    assert engine.abort(drop)
    assert not engine.abort(drop)  # second abort: nothing left to do
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert {o.request_id for o in outputs} == {keep}
