"""An engine running in its own thread, driven by calls from other threads.

Only the loop thread touches the engine, so the engine needs no locks. Other threads
(gRPC handlers) hand it work with `call(fn)`, which runs `fn(engine)` between steps and
returns a future. Each turn of the loop:

1. runs queued calls;
2. runs `poll()` (transfers, leases; it must be cheap);
3. steps the engine if it has work, handing the outputs to `on_outputs`;
   otherwise sleeps until a call arrives or `idle_wait()` seconds pass.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from engine.llm_engine import LLMEngine, RequestOutput

log = logging.getLogger(__name__)
T = TypeVar("T")


class EngineLoop:
    def __init__(
        self,
        engine: LLMEngine,
        on_outputs: Callable[[list[RequestOutput]], None],
        poll: Callable[[], None] = lambda: None,
        idle_wait: Callable[[], float] = lambda: 0.05,
        name: str = "engine-loop",
    ) -> None:
        self.engine = engine
        self._on_outputs = on_outputs
        self._poll = poll
        self._idle_wait = idle_wait
        self._calls: queue.SimpleQueue[tuple[Callable[[LLMEngine], object], Future]] = (
            queue.SimpleQueue()
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._calls.put((lambda e: None, Future()))  # wake the loop
        self._thread.join(timeout)

    def call(self, fn: Callable[[LLMEngine], T]) -> Future[T]:
        """Run fn(engine) on the loop thread; its result or exception lands in the future."""
        fut: Future[T] = Future()
        self._calls.put((fn, fut))
        return fut

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception:  # a bug must not silently kill the worker's only engine
                log.exception("engine loop turn failed")

    def _turn(self) -> None:
        self._run_calls(block=False)
        self._poll()
        if self.engine.has_unfinished():
            outputs = self.engine.step()
            if outputs:
                self._on_outputs(outputs)
        else:
            self._run_calls(block=True, timeout=self._idle_wait())

    def _run_calls(self, block: bool, timeout: float = 0.0) -> None:
        try:
            fn, fut = self._calls.get(block=block, timeout=timeout if block else None)
        except queue.Empty:
            return
        while True:
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(self.engine))
                except Exception as e:
                    fut.set_exception(e)
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
