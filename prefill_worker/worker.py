"""The prefill worker: prompts in, first token and a KV handle out.

Life of a request here:

1. `prefill` validates and queues it as a hand-off request (chunked prefill with other
   prompts, prefix cache by chained block hashes).
2. When its last chunk is computed the first token is sampled. If that token already
   ends the request (EOS, a stop, max_tokens = 1) its blocks are freed and the answer
   says so; otherwise the blocks stay pinned under a lease and the answer carries the
   block ids.
3. A decode worker pulls the blocks over NIXL; the READ's notification ("release:<id>")
   frees them. `release` (gRPC ReleaseKV) does the same, heartbeats extend the lease,
   and an expired lease frees the blocks of a request nobody pulled.

Everything that touches the engine or the NIXL agent runs on the engine loop thread.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from engine.engine_loop import EngineLoop
from engine.errors import InvalidRequest
from engine.llm_engine import EngineConfig, LLMEngine, RequestOutput
from engine.loader import LoadedModel
from engine.sampling_params import SamplingParams
from engine.scheduler import SchedulerConfig
from engine.transfer.agents import TransferBackend, make_kv_agent
from engine.transfer.layout import KVLayout
from engine.worker_stats import WorkerStats, engine_stats
from prefill_worker.leases import Leases

log = logging.getLogger(__name__)
RELEASE_PREFIX = b"release:"


class Aborted(RuntimeError):
    """The request was aborted before its first token."""


@dataclass(frozen=True)
class PrefillWorkerConfig:
    engine_id: str
    kv_cache_gb: float = 1.0
    lease_s: float = 30.0
    """Blocks of a request nobody pulls are freed after this long."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    transfer: TransferBackend = "auto"
    """KV transfer backend: NIXL where importable ("auto"), or the TCP stream."""
    host: str = "127.0.0.1"
    """Address the TCP transfer backend listens on (the worker's own)."""


class PrefillWorker:
    def __init__(self, loaded: LoadedModel, config: PrefillWorkerConfig) -> None:
        self.config = config
        self.engine = LLMEngine(
            loaded, EngineConfig(kv_cache_gb=config.kv_cache_gb, scheduler=config.scheduler)
        )
        self.layout = KVLayout.of(self.engine.kv.spec)
        self.backend, self.agent = make_kv_agent(
            config.transfer, config.engine_id, self.engine.kv.data, config.host
        )
        self.leases = Leases(config.lease_s)
        self._waiters: dict[str, Future[RequestOutput]] = {}
        self.loop = EngineLoop(
            self.engine, self._on_outputs, self._poll, self._idle_wait, name="prefill-loop"
        )

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()
        self.agent.close()

    # -- requests (any thread) -------------------------------------------------------

    def prefill(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> Future[RequestOutput]:
        """-> a future of the first token's output, or of InvalidRequest if it can never
        run (nothing is allocated then)."""
        result: Future[RequestOutput] = Future()

        def submit(engine: LLMEngine) -> None:
            try:
                if request_id in self._waiters or request_id in self.leases:
                    raise InvalidRequest(f"request id {request_id!r} is already in use")
                engine.add_request(prompt_ids, params, request_id, hand_off=True)
            except InvalidRequest as e:
                result.set_exception(e)
                return
            self._waiters[request_id] = result

        self.loop.call(submit)
        return result

    def release(self, request_id: str) -> Future[bool]:
        return self.loop.call(lambda engine: self._release(request_id))

    def heartbeat(self, request_ids: list[str]) -> Future[list[str]]:
        return self.loop.call(lambda engine: self.leases.extend(request_ids, time.monotonic()))

    def abort(self, request_id: str) -> Future[bool]:
        def run(engine: LLMEngine) -> bool:
            self.leases.end(request_id)
            waiter = self._waiters.pop(request_id, None)
            if waiter is not None:
                waiter.set_exception(Aborted(request_id))
            return engine.abort(request_id)

        return self.loop.call(run)

    def transfer_metadata(self) -> Future[tuple[bytes, int]]:
        return self.loop.call(lambda engine: (self.agent.metadata(), self.agent.base_address))

    def stats(self) -> Future[WorkerStats]:
        def snapshot(engine: LLMEngine) -> WorkerStats:
            return engine_stats(
                engine,
                outstanding_prefill_tokens=engine.scheduler.outstanding_prefill_tokens(),
                prefix_block_hashes=tuple(engine.pool.cached_hashes()),
                prefix_cache_hit_tokens=engine.scheduler.num_cached_tokens,
                leased_requests=len(self.leases),
            )

        return self.loop.call(snapshot)

    # -- loop thread -----------------------------------------------------------------

    def _on_outputs(self, outputs: list[RequestOutput]) -> None:
        now = time.monotonic()
        for out in outputs:
            if out.handed_off is not None:
                self.leases.grant(out.request_id, now)
            waiter = self._waiters.pop(out.request_id, None)
            if waiter is not None:
                waiter.set_result(out)
            elif out.handed_off is not None:  # aborted meanwhile: nobody will pull
                self._release(out.request_id)

    def _poll(self) -> None:
        for messages in self.agent.notifications().values():
            for msg in messages:
                if msg.startswith(RELEASE_PREFIX):
                    self._release(msg[len(RELEASE_PREFIX) :].decode())
        for request_id in self.leases.expired(time.monotonic()):
            log.info("lease of %s expired: freeing its blocks", request_id)
            self.engine.release_handed_off(request_id)

    def _idle_wait(self) -> float:
        # While blocks are leased a decode worker may be reading them: keep UCX moving.
        return 0.0005 if len(self.leases) else 0.02

    def _release(self, request_id: str) -> bool:
        self.leases.end(request_id)
        return self.engine.release_handed_off(request_id)
