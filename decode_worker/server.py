"""gRPC face of the decode worker (proto: pdserve.v1.DecodeWorker)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc

from cluster.serving import GRPC_OPTIONS, WorkerRPCs, abort_invalid
from decode_worker.worker import DecodeWorker, KVSource
from engine.errors import InvalidRequest
from engine.llm_engine import RequestOutput
from engine.transfer.layout import PROTOCOL_VERSION, IncompatiblePeer, check_compatible
from proto.convert import (
    has_unknown_fields,
    layout_from_proto,
    params_from_proto,
    sample_from_proto,
    sample_to_proto,
)
from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc


class DecodeServicer(WorkerRPCs, rpc.DecodeWorkerServicer):
    role = "decode"

    def __init__(self, worker: DecodeWorker, model: str) -> None:
        super().__init__(worker, model)
        self.worker: DecodeWorker = worker
        self._handshakes: dict[str, asyncio.Task[None]] = {}

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TokenChunk]:
        if has_unknown_fields(request) or has_unknown_fields(request.params):
            await abort_invalid(context, "request has fields this server does not know")
        rid = request.request_id or uuid.uuid4().hex
        first = sample_from_proto(request.first_token) if request.HasField("first_token") else None
        kv = None
        if request.HasField("kv"):
            if first is None:
                await abort_invalid(context, "a KV handle needs the first token with it")
            try:
                await self._ensure_peer(request.kv.engine_id, request.kv.prefill_address)
            except (grpc.aio.AioRpcError, IncompatiblePeer) as e:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION, f"handshake failed: {e}"[:300]
                )
            kv = KVSource(
                request.kv.engine_id,
                list(request.kv.block_ids),
                request.kv.num_tokens,
                request.kv.lease_ms / 1000,
            )
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def sink(out: RequestOutput) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, out)

        try:
            params = params_from_proto(request.params)
            await asyncio.wrap_future(
                self.worker.generate(rid, list(request.prompt_token_ids), params, first, kv, sink)
            )
        except (InvalidRequest, ValueError) as e:
            await abort_invalid(context, str(e))
        completion = 1 if first is not None else 0
        try:
            while True:
                out = await queue.get()
                completion += len(out.samples)
                chunk = pb.TokenChunk(
                    request_id=rid,
                    text=out.text,
                    tokens=[sample_to_proto(s) for s in out.samples],
                    finish_reason=out.finish_reason or "",
                )
                if out.finish_reason is not None:
                    chunk.usage.CopyFrom(
                        pb.Usage(
                            prompt_tokens=len(request.prompt_token_ids),
                            completion_tokens=completion,
                        )
                    )
                yield chunk
                if out.finish_reason is not None:
                    return
        except asyncio.CancelledError:  # the client went away: free everything
            self.worker.abort(rid)
            raise

    async def _ensure_peer(self, engine_id: str, address: str) -> None:
        """Handshake once per prefill engine; concurrent requests share the attempt."""
        if engine_id in self.worker.peers:
            return
        task = self._handshakes.get(engine_id)
        if task is None or (task.done() and task.exception() is not None):
            task = asyncio.ensure_future(self._handshake(engine_id, address))
            self._handshakes[engine_id] = task
        await asyncio.shield(task)

    async def _handshake(self, engine_id: str, address: str) -> None:
        async with grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) as channel:
            meta = await rpc.PrefillWorkerStub(channel).TransferMetadata(
                pb.TransferMetadataRequest(protocol_version=PROTOCOL_VERSION), timeout=10
            )
        check_compatible(self.worker.layout, layout_from_proto(meta.layout), meta.protocol_version)
        if meta.engine_id != engine_id:
            raise IncompatiblePeer(f"{address} is {meta.engine_id}, not {engine_id}")
        if meta.backend != self.worker.backend:
            raise IncompatiblePeer(
                f"{address} transfers over {meta.backend}, this worker over {self.worker.backend}"
            )
        await asyncio.wrap_future(
            self.worker.add_peer(engine_id, meta.agent_metadata, meta.base_address)
        )
