"""A prefill or decode worker with its gRPC server, as one object.

Used by `pdserve prefill-worker` / `decode-worker` (serving in the foreground until a
signal) and by the Ray actors of `pdserve up` (serving from a background thread).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import grpc

from cluster.serving import GRPC_OPTIONS
from decode_worker.server import DecodeServicer
from decode_worker.worker import DecodeWorker, DecodeWorkerConfig
from engine.loader import LoadedModel
from engine.scheduler import SchedulerConfig
from engine.transfer.agents import TransferBackend
from prefill_worker.server import PrefillServicer
from prefill_worker.worker import PrefillWorker, PrefillWorkerConfig
from proto.v1.pdserve_pb2_grpc import (
    add_DecodeWorkerServicer_to_server,
    add_PrefillWorkerServicer_to_server,
)


@dataclass(frozen=True)
class WorkerSettings:
    role: str
    """'prefill' or 'decode'."""
    engine_id: str
    host: str = "127.0.0.1"
    port: int = 0
    kv_cache_gb: float = 1.0
    lease_s: float = 30.0
    transfer: TransferBackend = "auto"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)

    def __post_init__(self) -> None:
        if self.role not in ("prefill", "decode"):
            raise ValueError(f"role must be 'prefill' or 'decode', not {self.role!r}")


class WorkerServer:
    def __init__(self, loaded: LoadedModel, model_name: str, s: WorkerSettings) -> None:
        self.settings = s
        if s.role == "prefill":
            self.worker: PrefillWorker | DecodeWorker = PrefillWorker(
                loaded,
                PrefillWorkerConfig(
                    s.engine_id, s.kv_cache_gb, s.lease_s, s.scheduler, s.transfer, s.host
                ),
            )
            self.servicer: PrefillServicer | DecodeServicer = PrefillServicer(
                self.worker, model_name, f"{s.host}:{s.port}"
            )
        else:
            self.worker = DecodeWorker(
                loaded,
                DecodeWorkerConfig(
                    s.engine_id,
                    s.kv_cache_gb,
                    scheduler=s.scheduler,
                    transfer=s.transfer,
                    host=s.host,
                ),
            )
            self.servicer = DecodeServicer(self.worker, model_name)
        self.address = ""
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add_to(self, server: grpc.aio.Server) -> None:
        if isinstance(self.servicer, PrefillServicer):
            add_PrefillWorkerServicer_to_server(self.servicer, server)
        else:
            add_DecodeWorkerServicer_to_server(self.servicer, server)

    def bound(self, address: str) -> None:
        """Called once the port is known (decode workers reach prefill ones at it)."""
        self.address = address
        if isinstance(self.servicer, PrefillServicer):
            self.servicer.set_address(address)

    # -- serving from a background thread (Ray actors) -----------------------------------

    def start_in_thread(self, timeout: float = 60.0) -> str:
        """Start the worker and its gRPC server on a thread of their own -> address."""
        ready = threading.Event()
        self.worker.start()

        async def serve() -> None:
            server = grpc.aio.server(options=GRPC_OPTIONS)
            self.add_to(server)
            port = server.add_insecure_port(f"{self.settings.host}:{self.settings.port}")
            self.bound(f"{self.settings.host}:{port}")
            await server.start()
            self._server = server
            ready.set()
            await server.wait_for_termination()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(serve())

        threading.Thread(target=run, name=f"{self.settings.role}-grpc", daemon=True).start()
        if not ready.wait(timeout):
            raise RuntimeError("gRPC server did not start")
        return self.address

    def stop(self) -> None:
        if self._server is not None and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(grace=2.0), self._loop).result(10)
        self.worker.stop()
