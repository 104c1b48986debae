"""The router's HTTP face: OpenAI's /v1/chat/completions, /v1/completions, /v1/models.

Per request: check size and key -> parse and validate -> render the chat template and
tokenise (token ids, not text, go to workers) -> check the context window -> admit
(reserve tokens) -> generate each of the n choices -> answer as JSON or as SSE ending
with `data: [DONE]` -> refund what was reserved but not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.sampler import Sample
from engine.tokenizer import Tokenizer
from router.admission import Ask
from router.budget_store import BudgetStore
from router.config import RouterConfig
from router.errors import APIError, api_error_handler, too_large, unauthorized
from router.schemas import ChatCompletionRequest, CompletionRequest
from router.service import Event, Router, Usage
from router.validation import check_context, check_limits, parse_body, sampling_params
from router.workers import WorkerPool


@dataclass(frozen=True)
class Job:
    """One generation: a choice index, its prompt and settings."""

    index: int
    prompt: list[int]
    max_tokens: int
    logprobs: int | None


def create_app(
    config: RouterConfig,
    tokenizer: Tokenizer,
    max_model_len: int,
    pool: WorkerPool,
    store: BudgetStore,
) -> FastAPI:
    router = Router(config, pool, store)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        try:
            yield
        finally:
            await pool.close()
            await store.close()

    app = FastAPI(title="pdserve router", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.add_exception_handler(APIError, api_error_handler)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> Response:
        load = pool.cluster_load()
        ok = load.prefill_workers > 0 and load.decode_workers > 0
        body = {
            "ready": ok,
            "prefill_workers": load.prefill_workers,
            "decode_workers": load.decode_workers,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        _tenant(request, config)
        return {
            "object": "list",
            "data": [{"id": config.model, "object": "model", "created": 0, "owned_by": "pdserve"}],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        tenant = _tenant(request, config)
        body = parse_body(await _read_body(request, config), ChatCompletionRequest, config)
        check_limits(body, config)
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            prompt = tokenizer.encode_chat(messages)
        except ValueError as e:
            raise APIError(400, str(e)[:200], param="messages") from None
        max_tokens = body.requested_max_tokens() or max(0, max_model_len - len(prompt))
        check_context(len(prompt), max_tokens, max_model_len, "messages")
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        jobs = [Job(i, prompt, max_tokens, logprobs) for i in range(body.n)]
        return await _serve(router, tokenizer, config, tenant, body, jobs, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        tenant = _tenant(request, config)
        body = parse_body(await _read_body(request, config), CompletionRequest, config)
        check_limits(body, config)
        prompts = [tokenizer.encode(p) if isinstance(p, str) else p for p in body.prompts()]
        for p in prompts:
            if any(not 0 <= t < tokenizer.vocab_size for t in p):
                raise APIError(
                    400, "prompt contains a token id outside the vocabulary", param="prompt"
                )
            check_context(len(p), body.max_tokens, max_model_len, "prompt")
        jobs = [
            Job(i * body.n + j, p, body.max_tokens, body.logprobs)
            for i, p in enumerate(prompts)
            for j in range(body.n)
        ]
        return await _serve(router, tokenizer, config, tenant, body, jobs, chat=False)

    return app


def _tenant(request: Request, config: RouterConfig) -> str:
    if not config.api_keys:
        return "default"
    auth = request.headers.get("authorization", "")
    scheme, _, key = auth.partition(" ")
    if scheme.lower() != "bearer" or not key:
        raise unauthorized("Missing API key: send 'Authorization: Bearer <key>'")
    tenant = config.api_keys.get(key.strip())
    if tenant is None:
        raise unauthorized("Incorrect API key provided")
    return tenant


async def _read_body(request: Request, config: RouterConfig) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > config.max_body_bytes:
        raise too_large(config.max_body_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > config.max_body_bytes:
            raise too_large(config.max_body_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def _serve(
    router: Router,
    tokenizer: Tokenizer,
    config: RouterConfig,
    tenant: str,
    body: ChatCompletionRequest | CompletionRequest,
    jobs: list[Job],
    chat: bool,
) -> Response:
    ask = Ask(
        tenant=tenant,
        input_tokens=sum(len(j.prompt) for j in jobs),
        output_tokens=sum(j.max_tokens for j in jobs),
        priority=config.tenants[tenant].priority,
    )
    admit = await router.admit(ask)
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    usages = [Usage() for _ in jobs]
    created = int(time.time())
    fmt = _Formatter(tokenizer, config.model, rid, created, chat)

    def events(job: Job) -> AsyncIterator[Event]:
        params = sampling_params(body, job.max_tokens, job.logprobs, job.index)
        return router.generate(f"{rid}-{job.index}", job.prompt, params, usages[job.index])

    async def account() -> None:
        used = sum(u.completion_tokens for u in usages)
        await router.refund(admit, sum(j.max_tokens for j in jobs) - used)

    if not body.stream:
        try:
            results = await asyncio.gather(*(_collect(events(j)) for j in jobs))
        finally:
            await account()
        return JSONResponse(fmt.full(results, _total(usages)))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    first_events = [events(j) for j in jobs]
    # Fail before the stream starts if the first step fails (clean HTTP errors).
    primed = await _prime(first_events, account)
    return StreamingResponse(
        _sse(primed, fmt, usages, include_usage, account),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


async def _collect(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


async def _prime(
    streams: list[AsyncIterator[Event]], account: Callable[[], Awaitable[None]]
) -> list[tuple[Event | None, AsyncIterator[Event]]]:
    async def first(s: AsyncIterator[Event]) -> tuple[Event | None, AsyncIterator[Event]]:
        try:
            return await anext(s), s
        except StopAsyncIteration:
            return None, s

    try:
        return list(await asyncio.gather(*(first(s) for s in streams)))
    except BaseException:
        for s in streams:
            with contextlib.suppress(Exception):
                await s.aclose()
        await account()
        raise


async def _sse(
    primed: list[tuple[Event | None, AsyncIterator[Event]]],
    fmt: _Formatter,
    usages: list[Usage],
    include_usage: bool,
    account: Callable[[], Awaitable[None]],
) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[tuple[int, Event | BaseException | None]] = asyncio.Queue()

    async def pump(i: int, first: Event | None, rest: AsyncIterator[Event]) -> None:
        try:
            if first is not None:
                await queue.put((i, first))
            async for e in rest:
                await queue.put((i, e))
        except Exception as e:
            await queue.put((i, e))
        finally:
            await queue.put((i, None))

    tasks = [asyncio.create_task(pump(i, f, r)) for i, (f, r) in enumerate(primed)]
    try:
        if fmt.chat:
            for i in range(len(primed)):
                yield fmt.sse(fmt.role_chunk(i))
        open_streams = len(primed)
        while open_streams:
            i, item = await queue.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                err = (
                    item
                    if isinstance(item, APIError)
                    else APIError(500, "internal error", "api_error")
                )
                yield fmt.sse(err.body())
                break
            else:
                yield fmt.sse(fmt.chunk(i, item))
        if include_usage:
            yield fmt.sse(fmt.usage_chunk(_total(usages)))
        yield b"data: [DONE]\n\n"
    finally:
        for t in tasks:
            t.cancel()
        for _, stream in primed:
            with contextlib.suppress(BaseException):
                await stream.aclose()
        await account()


def _total(usages: list[Usage]) -> dict[str, Any]:
    prompt = sum(u.prompt_tokens for u in usages)
    completion = sum(u.completion_tokens for u in usages)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(u.cached_tokens for u in usages)},
    }


class _Formatter:
    """OpenAI response shapes for chat and text completions."""

    def __init__(self, tokenizer: Tokenizer, model: str, rid: str, created: int, chat: bool):
        self.tok = tokenizer
        self.model = model
        self.rid = rid
        self.created = created
        self.chat = chat
        self.object = "chat.completion" if chat else "text_completion"

    @staticmethod
    def sse(payload: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model}

    def _logprobs(self, samples: list[Sample]) -> dict[str, Any] | None:
        if not samples or samples[0].logprob is None:
            return None
        piece = lambda t: self.tok.token_bytes[t].decode("utf-8", "replace")  # noqa: E731
        if self.chat:
            content = [
                {
                    "token": piece(s.token_id),
                    "logprob": s.logprob,
                    "bytes": list(self.tok.token_bytes[s.token_id]),
                    "top_logprobs": [
                        {"token": piece(t), "logprob": lp, "bytes": list(self.tok.token_bytes[t])}
                        for t, lp in s.top_logprobs
                    ],
                }
                for s in samples
            ]
            return {"content": content}
        return {
            "tokens": [piece(s.token_id) for s in samples],
            "token_logprobs": [s.logprob for s in samples],
            "top_logprobs": [{piece(t): lp for t, lp in s.top_logprobs} for s in samples],
        }

    def full(self, results: list[list[Event]], usage: dict[str, Any]) -> dict[str, Any]:
        choices = []
        for i, events in enumerate(results):
            text = "".join(e.text for e in events)
            reason = next((e.finish_reason for e in events if e.finish_reason), "stop")
            samples = [s for e in events for s in e.samples]
            choice: dict[str, Any] = {
                "index": i,
                "finish_reason": reason,
                "logprobs": self._logprobs(samples),
            }
            if self.chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            choices.append(choice)
        return {**self._head(self.object), "choices": choices, "usage": usage}

    def role_chunk(self, i: int) -> dict[str, Any]:
        choice = {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        return {**self._head("chat.completion.chunk"), "choices": [choice]}

    def chunk(self, i: int, e: Event) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": i,
            "finish_reason": e.finish_reason,
            "logprobs": self._logprobs(list(e.samples)),
        }
        if self.chat:
            choice["delta"] = {"content": e.text} if e.text else {}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice["text"] = e.text
        return {**self._head("text_completion"), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage}
