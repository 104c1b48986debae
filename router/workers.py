"""The router's view of its workers: gRPC stubs and loads refreshed in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc

from cluster.serving import GRPC_OPTIONS
from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc
from router.admission import ClusterLoad
from router.routing import Cooldowns, WorkerLoad

log = logging.getLogger(__name__)


class WorkerPool:
    def __init__(
        self,
        prefill: tuple[str, ...],
        decode: tuple[str, ...],
        cooldown_s: float,
        refresh_s: float = 0.25,
    ) -> None:
        self._addresses = (prefill, decode)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.prefill_stubs: dict[str, rpc.PrefillWorkerStub] = {}
        self.decode_stubs: dict[str, rpc.DecodeWorkerStub] = {}
        self.loads: dict[str, WorkerLoad] = {
            a: WorkerLoad(a, healthy=False) for a in (*prefill, *decode)
        }
        self.cooldowns = Cooldowns(cooldown_s)
        self._refresh_s = refresh_s
        self._task: asyncio.Task[None] | None = None

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        return self._channels[address]

    async def start(self) -> None:
        """Open channels (inside the serving event loop: grpc.aio binds them to it)."""
        prefill, decode = self._addresses
        self.prefill_stubs = {a: rpc.PrefillWorkerStub(self._channel(a)) for a in prefill}
        self.decode_stubs = {a: rpc.DecodeWorkerStub(self._channel(a)) for a in decode}
        await self.refresh()
        self._task = asyncio.create_task(self._refresh_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for channel in self._channels.values():
            await channel.close()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            await self.refresh()

    async def refresh(self) -> None:
        stubs = {**self.prefill_stubs, **self.decode_stubs}
        results = await asyncio.gather(
            *(s.Stats(pb.StatsRequest(), timeout=2.0) for s in stubs.values()),
            return_exceptions=True,
        )
        for address, r in zip(stubs, results, strict=True):
            if isinstance(r, BaseException):
                self.loads[address] = WorkerLoad(address, healthy=False)
                continue
            self.loads[address] = WorkerLoad(
                address=address,
                queue_depth=r.queue_depth,
                running=r.running,
                free_blocks=r.free_blocks,
                total_blocks=max(1, r.total_blocks),
                outstanding_prefill_tokens=r.outstanding_prefill_tokens,
                prefix_hashes=frozenset(r.prefix_block_hashes),
            )

    def prefill_loads(self) -> list[WorkerLoad]:
        return [self.loads[a] for a in self._addresses[0]]

    def decode_loads(self) -> list[WorkerLoad]:
        return [self.loads[a] for a in self._addresses[1]]

    def cluster_load(self) -> ClusterLoad:
        decode = [w for w in self.decode_loads() if w.healthy]
        return ClusterLoad(
            prefill_workers=sum(w.healthy for w in self.prefill_loads()),
            decode_workers=len(decode),
            decode_queue_depth=sum(w.queue_depth for w in decode),
            decode_kv_usage=min((w.kv_usage for w in decode), default=1.0),
        )

    def failed(self, address: str) -> None:
        log.warning("worker %s failed: cooling down", address)
        self.cooldowns.mark(address, time.monotonic())
