"""Request-level behaviour of the engine: stops, seeds, streaming, logprobs."""

from __future__ import annotations

from engine.sampling_params import SamplingParams

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def test_chat_answer_mentions_paris_and_stops_at_eos(smol, make_engine):
    engine = make_engine(smol)
    [r] = engine.generate(
        [smol.tokenizer.encode_chat(CHAT)], SamplingParams(max_tokens=32, temperature=0)
    )
    assert "Paris" in r.text
    assert r.finish_reason == "stop"
    assert r.token_ids[-1] in smol.tokenizer.info.eos_ids


def test_stop_string_truncates_text_and_finishes(smol, make_engine):
    engine = make_engine(smol)
    prompt = smol.tokenizer.encode_chat(CHAT)
    [full] = engine.generate([prompt], SamplingParams(max_tokens=32, temperature=0))
    stop = full.text.split()[2]  # a word from the middle of the answer
    [cut] = engine.generate([prompt], SamplingParams(max_tokens=32, temperature=0, stop=(stop,)))
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(stop)]


def test_stop_token_ids_and_ignore_eos(smol, make_engine):
    engine = make_engine(smol)
    prompt = smol.tokenizer.encode_chat(CHAT)
    [free] = engine.generate(
        [prompt], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    )
    assert free.finish_reason == "length" and len(free.token_ids) == 12
    stop_id = free.token_ids[3]
    [cut] = engine.generate(
        [prompt], SamplingParams(max_tokens=12, temperature=0, stop_token_ids=(stop_id,))
    )
    assert cut.token_ids == free.token_ids[: free.token_ids.index(stop_id) + 1]


def test_seeded_sampling_is_reproducible_across_batches(smol, make_engine):
    engine = make_engine(smol)
    prompt = smol.tokenizer.encode("Once upon a time")
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=1234, ignore_eos=True)
    [alone] = engine.generate([prompt], params)
    other = SamplingParams(max_tokens=16, temperature=1.0, seed=99, ignore_eos=True)
    together = engine.generate([prompt, prompt], [params, other])
    assert together[0].token_ids == alone.token_ids
    assert together[1].token_ids != alone.token_ids


def test_streamed_deltas_add_up_to_the_full_text(smol, make_engine):
    engine = make_engine(smol)
    prompt = smol.tokenizer.encode_chat([{"role": "user", "content": "Say hello in Japanese."}])
    params = SamplingParams(max_tokens=24, temperature=0)
    rid = engine.add_request(prompt, params)
    outs = list(engine.stream(rid))
    text = "".join(o.text for o in outs)
    ids = [s.token_id for o in outs for s in o.samples]
    assert text == smol.tokenizer.decode(ids)
    assert outs[-1].finish_reason is not None and all(o.finish_reason is None for o in outs[:-1])


def test_logprobs_through_the_engine(smol, make_engine):
    engine = make_engine(smol)
    [r] = engine.generate(
        [smol.tokenizer.encode("The sky is")],
        SamplingParams(max_tokens=3, temperature=0, logprobs=3),
    )
    for s in r.samples:
        assert s.logprob is not None and s.logprob <= 0
        assert len(s.top_logprobs) == 3
        assert s.top_logprobs[0][0] == s.token_id  # greedy picks the most likely token
