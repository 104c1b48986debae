"""Real worker processes on loopback for tests: start, wait for 'ready', stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc

READY = re.compile(r"ready on (\S+):(\d+)")


@dataclass
class WorkerProcess:
    role: str
    proc: subprocess.Popen
    address: str
    log: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode


def start_worker(role: str, cache_dir: Path, *extra: str, timeout: float = 120.0) -> WorkerProcess:
    env = {**os.environ, "PDSERVE_CACHE_DIR": str(cache_dir), "UCX_NET_DEVICES": "lo"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", f"{role}-worker", "--port", "0",
         "--kv-cache-gb", "0.25", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    log: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        log.append(line)
        m = READY.search(line)
        if m:
            worker = WorkerProcess(role, proc, f"{m.group(1)}:{m.group(2)}", log)
            # Keep draining output so the pipe never fills and blocks the worker.
            threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True).start()
            return worker
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{role} worker did not start:\n{''.join(log[-30:])}")


def prefill_stub(w: WorkerProcess) -> rpc.PrefillWorkerStub:
    return rpc.PrefillWorkerStub(grpc.insecure_channel(w.address))


def decode_stub(w: WorkerProcess) -> rpc.DecodeWorkerStub:
    return rpc.DecodeWorkerStub(grpc.insecure_channel(w.address))


def wait_idle(stats_fn, timeout: float = 10.0) -> pb.StatsResponse:
    """Poll Stats until no block is in use (frees may land a moment after the reply)."""
    deadline = time.monotonic() + timeout
    while True:
        s = stats_fn(pb.StatsRequest())
        if s.used_blocks == 0 or time.monotonic() > deadline:
            return s


def assert_no_leaks(stats_fn) -> None:
    s = wait_idle(stats_fn)
    assert s.invariant_error == "", s.invariant_error
    assert s.used_blocks == 0, f"{s.used_blocks} blocks still in use"
    assert s.free_blocks + s.used_blocks == s.total_blocks
    assert s.queue_depth == 0 and s.running == 0
