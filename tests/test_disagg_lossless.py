"""Disaggregation is lossless: prefill -> NIXL -> decode gives the single-engine tokens."""

from __future__ import annotations

from engine.sampling_params import SamplingParams
from tests.disagg.client import run_disaggregated
from tests.disagg.cluster import assert_no_leaks, decode_stub, prefill_stub
from tests.factories import random_prompt

LENGTHS = [1, 15, 16, 17, 1000, 2, 31, 32, 33, 64, 100, 200, 255, 256, 257, 500]


def test_greedy_output_is_token_for_token_the_single_engine_output(
    smol, make_engine, prefill, decode
):
    # 1. Sixteen prompts: the block-boundary lengths, a long one, and varied others.
    prompts = [random_prompt(n, smol.args.vocab_size, seed=n) for n in LENGTHS[:-2]]
    chat = [{"role": "user", "content": "Write a haiku about the sea."}]
    prompts += [smol.tokenizer.encode_chat(chat), smol.tokenizer.encode("Paris is")]
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True)
    # 2. The reference: one engine, one process.
    reference = make_engine(smol, kv_cache_gb=0.2).generate(prompts, params)
    # 3. The same prompts through prefill worker -> KV over NIXL -> decode worker.
    p, d = prefill_stub(prefill), decode_stub(decode)
    for i, (prompt, ref) in enumerate(zip(prompts, reference, strict=True)):
        got = run_disaggregated(p, d, f"lossless-{i}", prompt, params)
        assert got.prefill.kv.block_ids, "the request must go through a KV transfer"
        assert got.token_ids == ref.token_ids, f"prompt {i} ({len(prompt)} tokens)"
        assert got.text == ref.text
        assert got.finish_reason == "length"
    # 4. Nothing left behind on either worker.
    assert_no_leaks(p.Stats)
    assert_no_leaks(d.Stats)


def test_seeded_sampling_is_lossless_too(smol, make_engine, prefill, decode):
    prompt = smol.tokenizer.encode("Once upon a time, in a small village,")
    params = SamplingParams(max_tokens=20, temperature=0.9, top_p=0.95, seed=7, ignore_eos=True)
    [ref] = make_engine(smol, kv_cache_gb=0.05).generate([prompt], params)
    got = run_disaggregated(prefill_stub(prefill), decode_stub(decode), "seeded", prompt, params)
    assert got.token_ids == ref.token_ids
    assert_no_leaks(prefill_stub(prefill).Stats)
    assert_no_leaks(decode_stub(decode).Stats)
