"""Running a gRPC worker process: bind, announce, serve until SIGTERM/SIGINT, stop cleanly."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

import grpc

from engine.transfer.layout import PROTOCOL_VERSION
from proto.v1 import pdserve_pb2 as pb

log = logging.getLogger(__name__)

# Requests carry token ids, not text: 16 MiB is far above any legal prompt.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


async def serve(
    add_servicer: Callable[[grpc.aio.Server], None],
    host: str,
    port: int,
    role: str,
    on_stop: Callable[[], None],
    on_bound: Callable[[str], None] | None = None,
) -> None:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    add_servicer(server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise SystemExit(f"pdserve {role}: cannot bind {host}:{port}")
    if on_bound is not None:
        on_bound(f"{host}:{bound}")
    await server.start()
    # One line a supervisor (or a test) can wait for.
    print(f"pdserve {role} ready on {host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("%s: stopping", role)
    await server.stop(grace=2.0)
    on_stop()
    print(f"pdserve {role} stopped", file=sys.stderr, flush=True)


async def abort_invalid(context: grpc.aio.ServicerContext, message: str) -> None:
    """INVALID_ARGUMENT with a short message (never echo much of the input back)."""
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message[:300])


class WorkerRPCs:
    """Abort, Health and Stats: the same on every worker (prefill and decode servicers
    take them from here). `worker` offers abort(id) and stats() futures, `config.engine_id`
    and `engine.max_model_len`."""

    role = ""

    def __init__(self, worker: Any, model: str) -> None:
        self.worker = worker
        self.model = model

    async def Abort(
        self, request: pb.AbortRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortResponse:
        found = await asyncio.wrap_future(self.worker.abort(request.request_id))
        return pb.AbortResponse(found=found)

    async def Health(
        self, request: pb.HealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthResponse:
        return pb.HealthResponse(
            protocol_version=PROTOCOL_VERSION,
            role=self.role,
            model=self.model,
            engine_id=self.worker.config.engine_id,
            max_model_len=self.worker.engine.max_model_len,
        )

    async def Stats(
        self, request: pb.StatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatsResponse:
        s = await asyncio.wrap_future(self.worker.stats())
        return pb.StatsResponse(**dataclasses.asdict(s))
