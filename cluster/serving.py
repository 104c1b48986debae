"""Running a gRPC worker process: bind, announce, serve until SIGTERM/SIGINT, stop cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable

import grpc

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
