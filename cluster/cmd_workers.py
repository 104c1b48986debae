"""`pdserve prefill-worker` and `pdserve decode-worker`: one worker per process, serving
gRPC until SIGTERM (the cluster issue adds Ray orchestration on top)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import uuid

from engine.model_source import DEFAULT_MODEL
from engine.scheduler import SchedulerConfig


def add_parsers(sub: argparse._SubParsersAction) -> None:
    for role in ("prefill", "decode"):
        p = sub.add_parser(
            f"{role}-worker",
            help=f"serve a {role} worker over gRPC until SIGTERM",
            description=f"Serve a {role} worker (proto pdserve.v1) on HOST:PORT until SIGTERM.",
        )
        p.add_argument("--model", default=DEFAULT_MODEL)
        p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
        p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
        p.add_argument("--kv-cache-gb", type=float, default=1.0)
        p.add_argument("--max-num-seqs", type=int, default=64)
        p.add_argument("--max-batch-tokens", type=int, default=2048)
        p.add_argument("--chunk-size", type=int, default=512)
        p.add_argument("--engine-id", default=None, help="NIXL agent name (default: random)")
        p.add_argument(
            "--transfer",
            choices=["auto", "nixl", "tcp"],
            default="auto",
            help="KV transfer backend (auto: NIXL if importable, else TCP)",
        )
        if role == "prefill":
            p.add_argument(
                "--lease-s",
                type=float,
                default=30.0,
                help="free handed-off KV nobody pulled after this long",
            )
        p.set_defaults(run=run, role=role)


def run(args: argparse.Namespace) -> int:
    from cluster.progress import load_with_progress
    from cluster.serving import serve
    from cluster.worker_server import WorkerServer, WorkerSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = WorkerSettings(
        role=args.role,
        engine_id=args.engine_id or f"{args.role}-{uuid.uuid4().hex[:8]}",
        host=args.host,
        port=args.port,
        kv_cache_gb=args.kv_cache_gb,
        lease_s=getattr(args, "lease_s", 30.0),
        transfer=args.transfer,
        scheduler=SchedulerConfig(
            max_num_seqs=args.max_num_seqs,
            max_batch_tokens=args.max_batch_tokens,
            chunk_size=args.chunk_size,
        ),
    )
    ws = WorkerServer(load_with_progress(args.model), args.model, settings)
    ws.worker.start()
    asyncio.run(
        serve(
            ws.add_to,
            args.host,
            args.port,
            f"{args.role}-worker",
            ws.worker.stop,
            on_bound=ws.bound,
        )
    )
    return 0
