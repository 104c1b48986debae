"""Bad input gets the right status and OpenAI error envelope, and reaches no worker."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from router.app import create_app
from router.budget_store import MemoryStore
from router.workers import WorkerPool
from tests.disagg.cluster import assert_no_leaks, decode_stub, prefill_stub

MSG = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
KEY = {"Authorization": "Bearer sk-good"}


def chat(**kw: object) -> dict:
    return {"model": "smollm2-135m", "messages": MSG, **kw}


def comp(**kw: object) -> dict:
    return {"model": "smollm2-135m", "prompt": "hi", **kw}


# (case, path, body (dict, or raw bytes), headers, status, error type, param or None)
CASES = [
    ("malformed json", CHAT, b'{"model": "smollm2-135m",', KEY, 400, "invalid_request_error", None),
    ("json array body", CHAT, b"[1, 2]", KEY, 400, "invalid_request_error", None),
    ("invalid utf-8", CHAT, b'{"model": "\xff\xfe"}', KEY, 400, "invalid_request_error", None),
    (
        "missing messages",
        CHAT,
        {"model": "smollm2-135m"},
        KEY,
        400,
        "invalid_request_error",
        "messages",
    ),
    ("empty messages", CHAT, chat(messages=[]), KEY, 400, "invalid_request_error", "messages"),
    (
        "unknown role",
        CHAT,
        chat(messages=[{"role": "wizard", "content": "x"}]),
        KEY,
        400,
        "invalid_request_error",
        "messages.0.role",
    ),
    (
        "content wrong type",
        CHAT,
        chat(messages=[{"role": "user", "content": 5}]),
        KEY,
        400,
        "invalid_request_error",
        "messages.0.content.str",
    ),
    ("model wrong type", CHAT, chat(model=7), KEY, 400, "invalid_request_error", "model"),
    ("unknown model", CHAT, chat(model="gpt-9"), KEY, 404, "invalid_request_error", "model"),
    (
        "negative max_tokens",
        CHAT,
        chat(max_tokens=-1),
        KEY,
        400,
        "invalid_request_error",
        "max_tokens",
    ),
    (
        "max_tokens as string",
        CHAT,
        chat(max_tokens="10"),
        KEY,
        400,
        "invalid_request_error",
        "max_tokens",
    ),
    (
        "huge max_tokens",
        CHAT,
        chat(max_tokens=10**9),
        KEY,
        400,
        "invalid_request_error",
        "messages",
    ),
    (
        "temperature too high",
        CHAT,
        chat(temperature=3),
        KEY,
        400,
        "invalid_request_error",
        "temperature",
    ),
    (
        "temperature negative",
        CHAT,
        chat(temperature=-0.5),
        KEY,
        400,
        "invalid_request_error",
        "temperature",
    ),
    ("top_p zero", CHAT, chat(top_p=0), KEY, 400, "invalid_request_error", "top_p"),
    ("top_p above one", CHAT, chat(top_p=1.5), KEY, 400, "invalid_request_error", "top_p"),
    (
        "presence_penalty out of range",
        CHAT,
        chat(presence_penalty=5),
        KEY,
        400,
        "invalid_request_error",
        "presence_penalty",
    ),
    (
        "frequency_penalty out of range",
        CHAT,
        chat(frequency_penalty=-3),
        KEY,
        400,
        "invalid_request_error",
        "frequency_penalty",
    ),
    ("n over the cap", CHAT, chat(n=9), KEY, 400, "invalid_request_error", "n"),
    ("n zero", CHAT, chat(n=0), KEY, 400, "invalid_request_error", "n"),
    (
        "too many stops",
        CHAT,
        chat(stop=["a", "b", "c", "d", "e"]),
        KEY,
        400,
        "invalid_request_error",
        "stop",
    ),
    ("stop too long", CHAT, chat(stop=["x" * 65]), KEY, 400, "invalid_request_error", "stop"),
    ("empty stop", CHAT, chat(stop=[""]), KEY, 400, "invalid_request_error", "stop"),
    (
        "top_logprobs over cap",
        CHAT,
        chat(logprobs=True, top_logprobs=21),
        KEY,
        400,
        "invalid_request_error",
        "top_logprobs",
    ),
    (
        "top_logprobs without logprobs",
        CHAT,
        chat(top_logprobs=2),
        KEY,
        400,
        "invalid_request_error",
        "top_logprobs",
    ),
    ("unknown field", CHAT, chat(frobnicate=True), KEY, 400, "invalid_request_error", "frobnicate"),
    ("stream not a bool", CHAT, chat(stream="yes"), KEY, 400, "invalid_request_error", "stream"),
    (
        "prompt beyond context",
        COMP,
        comp(prompt=[5] * 8200, max_tokens=1),
        KEY,
        400,
        "invalid_request_error",
        "prompt",
    ),
    (
        "completion logprobs over cap",
        COMP,
        comp(logprobs=50),
        KEY,
        400,
        "invalid_request_error",
        "logprobs",
    ),
    (
        "token id outside vocab",
        COMP,
        comp(prompt=[1, 10**7]),
        KEY,
        400,
        "invalid_request_error",
        "prompt",
    ),
    ("empty token prompt", COMP, comp(prompt=[]), KEY, 400, "invalid_request_error", "prompt"),
    ("echo unsupported", COMP, comp(echo=True), KEY, 400, "invalid_request_error", "echo"),
    ("missing api key", CHAT, chat(), {}, 401, "authentication_error", None),
    (
        "wrong api key",
        CHAT,
        chat(),
        {"Authorization": "Bearer sk-bad"},
        401,
        "authentication_error",
        None,
    ),
    (
        "not a bearer",
        CHAT,
        chat(),
        {"Authorization": "Basic abc"},
        401,
        "authentication_error",
        None,
    ),
    (
        "body over the limit",
        CHAT,
        chat(messages=[{"role": "user", "content": "x" * 70000}]),
        KEY,
        413,
        "invalid_request_error",
        None,
    ),
]


@pytest.fixture
def client(router_config, smol):
    config = router_config(api_keys={"sk-good": "default"}, max_body_bytes=65536)
    pool = WorkerPool(config.prefill, config.decode, config.worker_cooldown_s)
    app = create_app(config, smol.tokenizer, smol.args.max_seq_len, pool, MemoryStore())
    with TestClient(app) as c:
        yield c


@pytest.mark.parametrize(
    ("case", "path", "body", "headers", "status", "etype", "param"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_bad_input(client, prefill, decode, case, path, body, headers, status, etype, param):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post(path, content=raw, headers={"Content-Type": "application/json", **headers})
    assert r.status_code == status, (case, r.text)
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == etype
    assert err["param"] == param
    assert len(err["message"]) < 400  # never echoes the whole input
    assert_no_leaks(prefill_stub(prefill).Stats)
    assert_no_leaks(decode_stub(decode).Stats)


def test_context_length_error_code(client):
    r = client.post(CHAT, json=chat(max_tokens=10**6), headers=KEY)
    assert r.json()["error"]["code"] == "context_length_exceeded"


def test_models_health_and_ready(client):
    assert client.get("/v1/models", headers=KEY).json()["data"][0]["id"] == "smollm2-135m"
    assert client.get("/health").status_code == 200
    ready = client.get("/ready")
    assert ready.status_code == 200 and ready.json()["ready"]
