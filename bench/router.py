"""`pdserve bench router`: what the router adds to a request, against stub workers.

Stub prefill and decode workers (real gRPC servers in this process, answering at once
with a fixed first token and one more token) stand in for the model, so the figures are
the router's own cost: HTTP parsing, validation, chat template and tokenisation,
admission, routing, two gRPC calls, SSE/JSON formatting. The router runs as a real
`pdserve router` process.

- `direct_p50_ms`: the two gRPC calls made straight to the stubs (the baseline);
- `routed_p50_ms`, `routed_p99_ms`: the same work as a chat completion via the router;
- `added_p50_ms`, `added_p99_ms`: routed minus direct (percentiles of each);
- `admissions_per_s`: the admission path alone (policy + in-process budget store).
Target: `added_p50_ms` <= 2.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time

import grpc
import httpx

from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc
from router.admission import Admit, Ask, ClusterLoad, after_budget, plan
from router.budget_store import MemoryStore
from router.config import Limits, RouterConfig, Tenant

FIRST = pb.SampledToken(token_id=504)


class _StubPrefill(rpc.PrefillWorkerServicer):
    async def Prefill(self, request: pb.PrefillRequest, context: object) -> pb.PrefillResponse:
        kv = pb.KVHandle(
            engine_id="stub",
            prefill_address="stub",
            block_ids=[0],
            num_tokens=len(request.prompt_token_ids),
            lease_ms=1000,
        )
        usage = pb.Usage(prompt_tokens=len(request.prompt_token_ids), completion_tokens=1)
        return pb.PrefillResponse(
            request_id=request.request_id, first_token=FIRST, text="The", kv=kv, usage=usage
        )

    async def Stats(self, request: pb.StatsRequest, context: object) -> pb.StatsResponse:
        return pb.StatsResponse(free_blocks=1000, total_blocks=1000)


class _StubDecode(rpc.DecodeWorkerServicer):
    async def Generate(self, request: pb.GenerateRequest, context: object):
        yield pb.TokenChunk(
            request_id=request.request_id,
            text=" end",
            tokens=[pb.SampledToken(token_id=1233)],
            finish_reason="stop",
        )

    async def Stats(self, request: pb.StatsRequest, context: object) -> pb.StatsResponse:
        return pb.StatsResponse(free_blocks=1000, total_blocks=1000)


def _serve_stubs() -> tuple[str, str, asyncio.AbstractEventLoop]:
    ready: list[tuple[str, str]] = []
    loop = asyncio.new_event_loop()

    async def main() -> None:
        server = grpc.aio.server()
        rpc.add_PrefillWorkerServicer_to_server(_StubPrefill(), server)
        p = server.add_insecure_port("127.0.0.1:0")
        server2 = grpc.aio.server()
        rpc.add_DecodeWorkerServicer_to_server(_StubDecode(), server2)
        d = server2.add_insecure_port("127.0.0.1:0")
        await server.start()
        await server2.start()
        ready.append((f"127.0.0.1:{p}", f"127.0.0.1:{d}"))
        await asyncio.Event().wait()

    threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True).start()
    while not ready:
        time.sleep(0.01)
    return ready[0][0], ready[0][1], loop


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _direct_ms(prefill: str, decode: str, n: int) -> list[float]:
    p = rpc.PrefillWorkerStub(grpc.insecure_channel(prefill))
    d = rpc.DecodeWorkerStub(grpc.insecure_channel(decode))
    prompt = list(range(40))
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        r = p.Prefill(pb.PrefillRequest(request_id=f"d{i}", prompt_token_ids=prompt))
        list(
            d.Generate(
                pb.GenerateRequest(
                    request_id=f"d{i}", prompt_token_ids=prompt, first_token=r.first_token, kv=r.kv
                )
            )
        )
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _routed_ms(url: str, n: int) -> list[float]:
    body = {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": "Hi " * 8}],
        "max_tokens": 8,
        "temperature": 0,
    }
    out = []
    with httpx.Client(timeout=10) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            r = client.post(f"{url}/v1/chat/completions", json=body)
            r.raise_for_status()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def _admissions_per_s(seconds: float = 1.0) -> float:
    config = RouterConfig(
        model="m",
        tenants={
            "default": Tenant(
                limits=Limits(
                    input_tokens_per_min=10**12,
                    output_tokens_per_min=10**12,
                    requests_per_min=10**12,
                )
            )
        },
    )
    load = ClusterLoad(1, 1, 0, 0.1)
    ask = Ask("default", 100, 100, 0)
    store = MemoryStore()

    async def run() -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            admit = plan(ask, load, config)
            assert isinstance(admit, Admit)
            taken, retry = await store.reserve(admit.claims, time.time())
            after_budget(taken, retry, 0.0, ask, admit, config)
            await store.refund(admit.claims, time.time())
            n += 1
        return n / (time.perf_counter() - t0)

    return asyncio.run(run())


def run_router_bench(n: int = 300) -> dict[str, float | str]:
    prefill, decode, _ = _serve_stubs()
    port = 18000 + os.getpid() % 1000
    router = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cluster.cli",
            "router",
            "--port",
            str(port),
            "--prefill",
            prefill,
            "--decode",
            decode,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("router did not become ready")
            time.sleep(0.1)
        _routed_ms(url, 20)  # warm-up
        _direct_ms(prefill, decode, 20)
        direct = _direct_ms(prefill, decode, n)
        routed = _routed_ms(url, n)
    finally:
        router.terminate()
        router.wait(10)
    return {
        "bench": "router",
        "requests": n,
        "direct_p50_ms": round(statistics.median(direct), 3),
        "routed_p50_ms": round(statistics.median(routed), 3),
        "routed_p99_ms": round(_percentile(routed, 0.99), 3),
        "added_p50_ms": round(statistics.median(routed) - statistics.median(direct), 3),
        "added_p99_ms": round(_percentile(routed, 0.99) - _percentile(direct, 0.99), 3),
        "admissions_per_s": round(_admissions_per_s(), 1),
    }
