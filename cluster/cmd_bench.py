"""`pdserve bench ...`: benchmarks that print one JSON line of figures."""

from __future__ import annotations

import argparse
import json

from engine.model_source import DEFAULT_MODEL


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark and print one JSON line")
    kinds = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    e = kinds.add_parser(
        "engine",
        help="forward-pass speed against memory bandwidth and matmul throughput",
        description="Prefill and decode speed of one model in this process, with roofline "
        "ratios (physical lower bound / measured time) measured in the same run.",
    )
    e.add_argument("--model", default=DEFAULT_MODEL)
    e.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    e.set_defaults(run=run_engine)
    t = kinds.add_parser(
        "transfer",
        help="KV block transfer speed over NIXL against in-process memcpy",
        description="Pull KV blocks from a real prefill worker process over NIXL (UCX) and "
        "compare with memcpy of the same bytes, measured in the same run.",
    )
    t.add_argument("--model", default=DEFAULT_MODEL)
    t.set_defaults(run=run_transfer)
    r = kinds.add_parser(
        "router",
        help="what the router adds per request, against stub workers",
        description="Latency the router adds to a chat completion (HTTP, validation, "
        "tokenisation, admission, routing, streaming) against stub gRPC workers, and the "
        "admission path's throughput.",
    )
    r.add_argument("--requests", type=int, default=300)
    r.set_defaults(run=run_router)


def run_engine(args: argparse.Namespace) -> int:
    from bench.engine import run_engine_bench
    from cluster.progress import load_with_progress

    loaded = load_with_progress(args.model)
    result = {"model": args.model, **run_engine_bench(loaded.model, quick=args.quick)}
    print(json.dumps(result), flush=True)
    return 0


def run_transfer(args: argparse.Namespace) -> int:
    from bench.transfer import run_transfer_bench
    from cluster.progress import load_with_progress

    loaded = load_with_progress(args.model)
    print(json.dumps(run_transfer_bench(args.model, loaded.args)), flush=True)
    return 0


def run_router(args: argparse.Namespace) -> int:
    from bench.router import run_router_bench

    print(json.dumps(run_router_bench(args.requests)), flush=True)
    return 0
