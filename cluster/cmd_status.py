"""`pdserve status`: a table of the running cluster's workers and their load."""

from __future__ import annotations

import argparse
import os


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show the workers of a running `pdserve up` cluster",
        description="Connect to the Ray cluster of a running `pdserve up` and print a "
        "table of its workers: role, address, health, queue, running, KV usage.",
    )
    p.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import grpc
    import ray
    from rich.console import Console
    from rich.table import Table

    from cluster.controller import NAMESPACE, find_controller
    from proto.v1 import pdserve_pb2 as pb
    from proto.v1 import pdserve_pb2_grpc as rpc

    console = Console(width=max(120, Console().width))  # room for full addresses
    try:
        ray.init(
            address=args.address,
            namespace=NAMESPACE,
            log_to_driver=False,
            include_dashboard=False,
            logging_level="error",
        )
        controller = find_controller()
    except (ConnectionError, ValueError) as e:
        console.print(f"[red]no running pdserve cluster found[/red] ({e})")
        return 1
    model, url = ray.get(controller.info.remote())
    workers = ray.get(controller.workers.remote())
    table = Table(title=f"pdserve: {model} at {url}")
    for col in ("role", "engine", "address", "health", "queue", "running", "KV usage"):
        table.add_column(col)
    for w in workers:
        stub_cls = rpc.PrefillWorkerStub if w.role == "prefill" else rpc.DecodeWorkerStub
        try:
            with grpc.insecure_channel(w.address) as channel:
                s = stub_cls(channel).Stats(pb.StatsRequest(), timeout=3)
            usage = s.used_blocks / max(1, s.total_blocks)
            table.add_row(
                w.role,
                w.engine_id,
                w.address,
                "ok",
                str(s.queue_depth),
                str(s.running),
                f"{usage:.0%}",
            )
        except grpc.RpcError as e:
            table.add_row(
                w.role, w.engine_id, w.address, f"[red]{e.code().name}[/red]", "-", "-", "-"
            )
    console.print(table)
    ray.shutdown()
    return 0
