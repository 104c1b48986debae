"""The router's request pipeline, apart from HTTP: admit, route, stream, account.

1. Admission reserves the request's tokens (`router/admission.py`), waiting in the
   queue or failing with 429/503.
2. Routing: prompts shorter than `short_prompt_tokens` go straight to a decode worker
   (prefilled there). Others are prefilled on the prefill worker picked by prefix
   affinity and load; a failed prefill is retried once on another worker (nothing has
   been streamed yet). The first token is yielded at once (TTFT), then the decode
   worker pulls the KV and streams the rest.
3. However it ends — finished, failed, or the client went away — the unused part of the
   reservation is refunded, and a request cut short is aborted on both workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from engine.sampler import Sample
from engine.sampling_params import SamplingParams
from proto.convert import params_to_proto, sample_from_proto
from proto.v1 import pdserve_pb2 as pb
from router.admission import Admit, Ask, Queue, Reject, after_budget, plan
from router.buckets import Claim
from router.budget_store import BudgetStore
from router.config import RouterConfig
from router.errors import APIError, invalid, overloaded, rate_limited, upstream
from router.routing import pick_decode, pick_prefill, prompt_block_hashes
from router.workers import WorkerPool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    text: str
    samples: tuple[Sample, ...]
    finish_reason: str | None = None


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


class Router:
    def __init__(self, config: RouterConfig, pool: WorkerPool, store: BudgetStore) -> None:
        self.config = config
        self.pool = pool
        self.store = store
        self.waiting = 0
        """Requests now waiting in the admission queue (bounded by config.max_waiting)."""

    # -- admission -------------------------------------------------------------------

    async def admit(self, ask: Ask) -> Admit:
        decision = plan(ask, self.pool.cluster_load(), self.config)
        if isinstance(decision, Reject):
            raise self._reject(decision)
        admitted, waited = decision, 0.0
        while True:
            taken, retry = await self.store.reserve(admitted.claims, time.time())
            step = after_budget(taken, retry, waited, ask, admitted, self.config)
            if isinstance(step, Admit):
                return step
            if isinstance(step, Reject):
                raise self._reject(step, await self._limit_headers(admitted.claims))
            assert isinstance(step, Queue)
            if self.waiting >= self.config.max_waiting:
                raise overloaded(f"admission queue full ({self.waiting} waiting)", step.wait_s)
            self.waiting += 1
            try:
                await asyncio.sleep(step.wait_s + 0.01)
            finally:
                self.waiting -= 1
            waited += step.wait_s + 0.01

    async def refund(self, admit: Admit, unused_output_tokens: int) -> None:
        claims = [
            Claim(c.key, unused_output_tokens, c.capacity, c.rate)
            for c in admit.claims
            if c.key.endswith(":output_tokens") and unused_output_tokens > 0
        ]
        if claims:
            await self.store.refund(claims, time.time())

    async def _limit_headers(self, claims: tuple[Claim, ...]) -> dict[str, str]:
        headers = {}
        now = time.time()
        for c in claims:
            if c.key.startswith("tenant:"):
                kind = c.key.rsplit(":", 1)[1].replace("_", "-")
                left = await self.store.level(Claim(c.key, 0, c.capacity, c.rate), now)
                headers[f"x-ratelimit-limit-{kind}"] = str(int(c.capacity))
                headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, int(left)))
        return headers

    @staticmethod
    def _reject(r: Reject, headers: dict[str, str] | None = None) -> APIError:
        if r.status == 429:
            return rate_limited(r.message, r.retry_after_s, headers or {})
        return overloaded(r.message, r.retry_after_s)

    # -- one generation --------------------------------------------------------------

    async def generate(
        self, request_id: str, prompt: list[int], params: SamplingParams, usage: Usage
    ) -> AsyncIterator[Event]:
        """Events of one completion; raises APIError before the first event on failure."""
        usage.prompt_tokens = len(prompt)
        wire = params_to_proto(params)
        prefill_addr = decode_addr = None
        finished = False
        try:
            first = None
            kv = None
            if len(prompt) >= self.config.short_prompt_tokens:
                prefill_addr, resp = await self._prefill(request_id, prompt, wire)
                first = resp.first_token
                usage.cached_tokens = resp.usage.cached_prompt_tokens
                usage.completion_tokens = 1
                yield Event(resp.text, (sample_from_proto(first),), resp.finish_reason or None)
                if resp.finish_reason:
                    finished = True
                    return
                kv = resp.kv
            decode_addr = pick_decode(
                self.pool.decode_loads(), self.pool.cooldowns, time.monotonic()
            )
            if decode_addr is None:
                raise overloaded("no decode worker is reachable")
            request = pb.GenerateRequest(
                request_id=request_id,
                prompt_token_ids=prompt,
                params=wire,
                first_token=first,
                kv=kv,
            )
            try:
                async for chunk in self.pool.decode_stubs[decode_addr].Generate(request):
                    samples = tuple(sample_from_proto(t) for t in chunk.tokens)
                    usage.completion_tokens += len(samples)
                    finished = bool(chunk.finish_reason)
                    yield Event(chunk.text, samples, chunk.finish_reason or None)
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise invalid(e.details() or "invalid request") from e
                self.pool.failed(decode_addr)
                raise upstream(f"decode worker failed: {e.code().name}") from e
        finally:
            if not finished:
                self._abort_later(request_id, prefill_addr, decode_addr)

    async def _prefill(
        self, request_id: str, prompt: list[int], wire: pb.SamplingParams
    ) -> tuple[str, pb.PrefillResponse]:
        hashes = prompt_block_hashes(prompt)
        tried: set[str] = set()
        for _ in range(2):  # nothing has been streamed yet: one retry elsewhere is safe
            loads = [w for w in self.pool.prefill_loads() if w.address not in tried]
            addr = pick_prefill(loads, hashes, self.pool.cooldowns, time.monotonic())
            if addr is None:
                break
            tried.add(addr)
            request = pb.PrefillRequest(request_id=request_id, prompt_token_ids=prompt, params=wire)
            try:
                return addr, await self.pool.prefill_stubs[addr].Prefill(request)
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise invalid(e.details() or "invalid request") from e
                self.pool.failed(addr)
                log.warning("prefill on %s failed (%s)", addr, e.code().name)
        raise overloaded("no prefill worker could take the request")

    def _abort_later(self, request_id: str, *addresses: str | None) -> None:
        """Abort on the workers without holding up the caller (it may be cancelled)."""

        async def run() -> None:
            req = pb.AbortRequest(request_id=request_id)
            for addr in addresses:
                stub = self.pool.prefill_stubs.get(addr or "") or self.pool.decode_stubs.get(
                    addr or ""
                )
                if stub is not None:
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        await stub.Abort(req, timeout=1.0)

        asyncio.get_running_loop().create_task(run())
