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

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    scheduler = SchedulerConfig(
        max_num_seqs=args.max_num_seqs,
        max_batch_tokens=args.max_batch_tokens,
        chunk_size=args.chunk_size,
    )
    engine_id = args.engine_id or f"{args.role}-{uuid.uuid4().hex[:8]}"
    loaded = load_with_progress(args.model)
    if args.role == "prefill":
        from prefill_worker.server import PrefillServicer
        from prefill_worker.worker import PrefillWorker, PrefillWorkerConfig
        from proto.v1.pdserve_pb2_grpc import add_PrefillWorkerServicer_to_server

        worker = PrefillWorker(
            loaded,
            PrefillWorkerConfig(
                engine_id, args.kv_cache_gb, args.lease_s, scheduler, args.transfer, args.host
            ),
        )
        advertised = f"{args.host}:{args.port}"
        servicer = PrefillServicer(worker, args.model, advertised)

        def add(server) -> None:
            add_PrefillWorkerServicer_to_server(servicer, server)
    else:
        from decode_worker.server import DecodeServicer
        from decode_worker.worker import DecodeWorker, DecodeWorkerConfig
        from proto.v1.pdserve_pb2_grpc import add_DecodeWorkerServicer_to_server

        worker = DecodeWorker(
            loaded,
            DecodeWorkerConfig(
                engine_id,
                args.kv_cache_gb,
                scheduler=scheduler,
                transfer=args.transfer,
                host=args.host,
            ),
        )
        servicer = DecodeServicer(worker, args.model)

        def add(server) -> None:
            add_DecodeWorkerServicer_to_server(servicer, server)

    worker.start()
    asyncio.run(
        serve(
            add,
            args.host,
            args.port,
            f"{args.role}-worker",
            worker.stop,
            on_bound=getattr(servicer, "set_address", None),
        )
    )
    return 0
