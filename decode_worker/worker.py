"""The decode worker: continuous batching over KV pulled from prefill workers.

Life of a request here (see engine/transfer/pulls.py for the pull's state machine):

1. `generate` arrives with the prompt, the first token (sampled by the prefill worker)
   and a KV handle. Blocks are reserved and the first token replayed (WAITING until
   blocks are free), then a non-blocking NIXL READ is posted (TRANSFERRING).
2. Every loop turn polls the pulls while the running batch keeps stepping. A finished
   READ joins the request to the batch; its notification tells the prefill worker to
   free its copy. A failed READ, or a handle whose lease ran out before blocks were
   free, falls back to recomputing the prompt here: slower, same tokens.
3. Tokens stream to the request's sink, detokenised incrementally. Abort works at every
   stage; during a transfer it waits for the READ to end before freeing blocks.

A request without a KV handle is prefilled here (conditional disaggregation).
Everything that touches the engine or the NIXL agent runs on the engine loop thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from engine.engine_loop import EngineLoop
from engine.errors import InvalidRequest
from engine.llm_engine import EngineConfig, LLMEngine, RequestOutput
from engine.loader import LoadedModel
from engine.sampler import Sample
from engine.sampling_params import SamplingParams
from engine.scheduler import SchedulerConfig
from engine.transfer.agents import TransferBackend, make_kv_agent
from engine.transfer.layout import KVLayout
from engine.transfer.pulls import Pull, PullState
from engine.worker_stats import WorkerStats, engine_stats

log = logging.getLogger(__name__)
Sink = Callable[[RequestOutput], None]


@dataclass(frozen=True)
class DecodeWorkerConfig:
    engine_id: str
    kv_cache_gb: float = 1.0
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    transfer: TransferBackend = "auto"
    """KV transfer backend: NIXL where importable ("auto"), or the TCP stream."""
    host: str = "127.0.0.1"
    """Address the TCP transfer backend listens on (the worker's own)."""


@dataclass(frozen=True)
class KVSource:
    """Where a request's prompt KV waits (from the prefill worker's handle)."""

    engine_id: str
    block_ids: list[int]
    num_tokens: int
    lease_s: float


@dataclass(frozen=True)
class Peer:
    name: str
    base_address: int


class DecodeWorker:
    def __init__(self, loaded: LoadedModel, config: DecodeWorkerConfig) -> None:
        self.config = config
        self.engine = LLMEngine(
            loaded, EngineConfig(kv_cache_gb=config.kv_cache_gb, scheduler=config.scheduler)
        )
        self.layout = KVLayout.of(self.engine.kv.spec)
        self.backend, self.agent = make_kv_agent(
            config.transfer, config.engine_id, self.engine.kv.data, config.host
        )
        self.peers: dict[str, Peer] = {}
        self.pulls: dict[str, Pull] = {}
        self._pull_args: dict[str, tuple[list[int], SamplingParams, Sample]] = {}
        self._sinks: dict[str, Sink] = {}
        self.loop = EngineLoop(
            self.engine, self._on_outputs, self._poll, self._idle_wait, name="decode-loop"
        )

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()
        self.agent.close()

    # -- requests (any thread) -------------------------------------------------------

    def add_peer(self, engine_id: str, metadata: bytes, base_address: int) -> Future[None]:
        def run(engine: LLMEngine) -> None:
            if engine_id not in self.peers:
                self.peers[engine_id] = Peer(self.agent.add_peer(metadata), base_address)

        return self.loop.call(run)

    def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        first: Sample | None,
        kv: KVSource | None,
        sink: Sink,
    ) -> Future[None]:
        """Start a request; outputs go to `sink` on the loop thread. The future fails with
        InvalidRequest if the request can never run (nothing is allocated then)."""

        def submit(engine: LLMEngine) -> None:
            if request_id in self._sinks:
                raise InvalidRequest(f"request id {request_id!r} is already in use")
            if kv is not None and kv.engine_id not in self.peers:
                raise InvalidRequest(f"unknown prefill engine {kv.engine_id!r}: no handshake")
            if kv is not None and kv.num_tokens != len(prompt_ids):
                raise InvalidRequest("the KV handle does not cover the prompt")
            if first is None:
                engine.add_request(prompt_ids, params, request_id)
                self._sinks[request_id] = sink
            elif kv is None:
                engine.add_continuation(prompt_ids, params, first, request_id)
                self._sinks[request_id] = sink
            else:
                engine.validate(prompt_ids, params)
                self._sinks[request_id] = sink
                self.pulls[request_id] = Pull(
                    request_id,
                    kv.engine_id,
                    list(kv.block_ids),
                    kv.num_tokens,
                    deadline=time.monotonic() + kv.lease_s,
                )
                self._pull_args[request_id] = (prompt_ids, params, first)
                self._advance(self.pulls[request_id])

        return self.loop.call(submit)

    def abort(self, request_id: str) -> Future[bool]:
        return self.loop.call(lambda engine: self._abort(request_id))

    def stats(self) -> Future[WorkerStats]:
        def snapshot(engine: LLMEngine) -> WorkerStats:
            moving = sum(p.state == PullState.TRANSFERRING for p in self.pulls.values())
            return engine_stats(engine, transfers_in_flight=moving)

        return self.loop.call(snapshot)

    # -- loop thread -----------------------------------------------------------------

    def _advance(self, pull: Pull) -> None:
        """Move one pull along its state machine as far as it goes now."""
        rid = pull.request_id
        if pull.state == PullState.WAITING:
            if pull.abort_requested or pull.expired():
                self._drop_pull(pull, recompute=not pull.abort_requested)
                return
            prompt, params, first = self._pull_args[rid]
            blocks = self.engine.add_prefilled(prompt, params, first, rid)
            if blocks is None:
                return  # no room yet: retried next turn
            pull.local_blocks = blocks
            peer = self.peers[pull.engine_id]
            try:
                pull.handle = self.agent.read(
                    peer.name,
                    peer.base_address,
                    pull.remote_blocks,
                    blocks,
                    b"release:" + rid.encode(),
                )
            except RuntimeError as e:
                self._fail(pull, str(e))
                return
            pull.state, pull.started = PullState.TRANSFERRING, time.monotonic()
        if pull.state == PullState.TRANSFERRING:
            state = self.agent.state(pull.handle)
            if state == "PROC":
                return
            self.agent.release(pull.handle)
            if state == "ERR":
                self._fail(pull, "NIXL READ failed")
                return
            pull.state = PullState.DONE
            del self.pulls[rid], self._pull_args[rid]
            if pull.abort_requested:
                self.engine.abort(rid)
                self._finish_aborted(rid)
            else:
                self.engine.kv_arrived(rid)

    def _fail(self, pull: Pull, why: str) -> None:
        log.warning("KV pull for %s failed (%s): recomputing locally", pull.request_id, why)
        pull.state, pull.error = PullState.FAILED, why
        self._notify_release(pull)
        del self.pulls[pull.request_id], self._pull_args[pull.request_id]
        if pull.abort_requested:
            self.engine.abort(pull.request_id)
            self._finish_aborted(pull.request_id)
        else:
            self.engine.kv_failed(pull.request_id)

    def _drop_pull(self, pull: Pull, recompute: bool) -> None:
        """A pull that never got blocks: recompute here, or forget it (abort)."""
        rid = pull.request_id
        prompt, params, first = self._pull_args.pop(rid)
        del self.pulls[rid]
        self._notify_release(pull)
        if recompute:
            self.engine.add_continuation(prompt, params, first, rid)
        else:
            self._finish_aborted(rid)

    def _notify_release(self, pull: Pull) -> None:
        peer = self.peers.get(pull.engine_id)
        if peer is not None:
            try:
                self.agent.send_notification(peer.name, b"release:" + pull.request_id.encode())
            except RuntimeError:
                log.warning("could not tell %s to release %s", peer.name, pull.request_id)

    def _abort(self, request_id: str) -> bool:
        pull = self.pulls.get(request_id)
        if pull is not None:
            pull.abort_requested = True
            self._advance(pull)
            return True
        found = self.engine.abort(request_id)
        if found:
            self._finish_aborted(request_id)
        return found

    def _finish_aborted(self, request_id: str) -> None:
        sink = self._sinks.pop(request_id, None)
        if sink is not None:
            sink(RequestOutput(request_id, "", (), "abort"))

    def _on_outputs(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            sink = self._sinks.get(out.request_id)
            if sink is None:
                continue
            if out.finish_reason is not None:
                del self._sinks[out.request_id]
            sink(out)

    def _poll(self) -> None:
        for pull in list(self.pulls.values()):
            self._advance(pull)
        # Without a progress thread UCX moves only when polled: this also flushes the
        # release notifications sent for pulls that never transferred.
        self.agent.notifications()

    def _idle_wait(self) -> float:
        return 0.0005 if self.pulls else 0.02
