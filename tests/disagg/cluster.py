"""Real worker processes on loopback for tests: start, wait for 'ready', stop."""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from cluster.local_process import WorkerProcess
from cluster.local_process import start_worker as start_local_worker
from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc


def start_worker(role: str, cache_dir: Path, *extra: str) -> WorkerProcess:
    return start_local_worker(role, "--kv-cache-gb", "0.25", *extra, cache_dir=cache_dir)


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
