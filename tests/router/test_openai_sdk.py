"""The unmodified OpenAI SDK against the router over real workers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI, RateLimitError

from proto.v1 import pdserve_pb2 as pb
from router.config import Limits, Tenant
from tests.disagg.cluster import assert_no_leaks, decode_stub, prefill_stub
from tests.router.servers import running_router

MODEL = "smollm2-135m"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def base_url(router_config, smol) -> Iterator[str]:
    with running_router(router_config(), smol.tokenizer, smol.args.max_seq_len) as url:
        yield url


@pytest.fixture
def client(base_url, prefill, decode) -> Iterator[OpenAI]:
    yield OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    assert_no_leaks(prefill_stub(prefill).Stats)
    assert_no_leaks(decode_stub(decode).Stats)


def test_chat_non_streaming_answers_with_usage(client):
    r = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=20, temperature=0)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 20 and 0 < r.usage.completion_tokens <= 20
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_matches_non_streaming_and_reports_usage(client):
    full = client.chat.completions.create(
        model=MODEL, messages=FRANCE, max_tokens=20, temperature=0
    )
    stream = client.chat.completions.create(
        model=MODEL,
        messages=FRANCE,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    )


def test_completions_streaming_and_not(client):
    prompt = "The three primary colours are"
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stream=True
        )
    )
    assert streamed == full.choices[0].text and full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == 12


def test_stop_string_is_honoured(client):
    full = client.chat.completions.create(
        model=MODEL, messages=FRANCE, max_tokens=20, temperature=0
    )
    word = full.choices[0].message.content.split()[2]
    cut = client.chat.completions.create(
        model=MODEL, messages=FRANCE, max_tokens=20, temperature=0, stop=[word]
    )
    assert cut.choices[0].message.content == full.choices[0].message.content.split(word)[0]
    assert cut.choices[0].finish_reason == "stop"


def test_seed_reproducibility_and_n(client):
    kw = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": 16,
        "temperature": 1.0,
        "seed": 42,
    }
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    assert a.choices[0].message.content == b.choices[0].message.content
    two = client.chat.completions.create(**kw, n=2)
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].message.content == a.choices[0].message.content  # choice 0: seed 42


def test_logprobs(client):
    r = client.chat.completions.create(
        model=MODEL, messages=FRANCE, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        assert item.top_logprobs[0].token == item.token  # greedy: the most likely one


def test_multibyte_characters_stream_whole(client):
    kw = {
        "model": MODEL,
        "prompt": "日本の首都は東京です。日本の首都は",
        "max_tokens": 24,
        "temperature": 0,
    }
    full = client.completions.create(**kw).choices[0].text
    deltas = [c.choices[0].text for c in client.completions.create(**kw, stream=True)]
    assert "".join(deltas) == full
    assert any(ord(ch) > 0x7F for ch in full), full  # the model does answer in Japanese
    # Characters here span two tokens; no delta carries half of one. Only the very end
    # may hold an unfinished character (cut by max_tokens), flushed as U+FFFD.
    assert all("\ufffd" not in d for d in deltas[:-1])


def test_client_disconnect_frees_blocks_on_both_workers(base_url, prefill, decode):
    body = {
        "model": MODEL,
        "messages": FRANCE,
        "max_tokens": 400,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=30) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i >= 6:
                break  # the client goes away mid-stream
    deadline = time.monotonic() + 2.0
    d = decode_stub(decode)
    while d.Stats(pb.StatsRequest()).running:
        assert time.monotonic() < deadline, "decode worker still running the request"
        time.sleep(0.05)
    assert_no_leaks(prefill_stub(prefill).Stats)
    assert_no_leaks(d.Stats)


def test_two_routers_sharing_redis_enforce_one_budget(router_config, smol, redis_url):
    limited = {"default": Tenant(limits=Limits(requests_per_min=3))}
    config = router_config(redis_url=redis_url, tenants=limited, max_queue_wait_s=0.0)
    with (
        running_router(config, smol.tokenizer, smol.args.max_seq_len) as one,
        running_router(config, smol.tokenizer, smol.args.max_seq_len) as two,
    ):
        clients = [OpenAI(base_url=f"{u}/v1", api_key="x", max_retries=0) for u in (one, two)]
        ok, limited_errors = 0, []
        for i in range(5):
            try:
                clients[i % 2].completions.create(model=MODEL, prompt="Hi", max_tokens=1)
                ok += 1
            except RateLimitError as e:
                limited_errors.append(e)
        assert ok == 3 and len(limited_errors) == 2
        headers = limited_errors[0].response.headers
        assert int(headers["retry-after"]) >= 1
        assert headers["x-ratelimit-limit-requests"] == "3"
        assert headers["x-ratelimit-remaining-requests"] == "0"
