"""`pdserve up`: a whole cluster on Ray — prefill and decode workers as actors, the router
in this process — until Ctrl-C or SIGTERM, which stops everything it started."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import threading
import time
import uuid

from cluster.spec import ClusterSpec, load_spec

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="start a cluster on Ray (workers as actors) with the router in front",
        description="Start a local Ray instance bound to loopback (or join --address), one "
        "or more prefill and decode workers as Ray actors, and the OpenAI router. Ctrl-C or "
        "SIGTERM stops everything it started.",
    )
    p.add_argument("--spec", default=None, help="cluster spec YAML (see deploy/cluster.yaml)")
    p.add_argument("--port", type=int, default=None, help="router port (overrides the spec)")
    p.add_argument("--model", default=None, help="model (overrides the spec)")
    p.add_argument(
        "--address",
        default=None,
        help="join an existing Ray cluster instead of starting a local one",
    )
    p.set_defaults(run=run)


def _with_overrides(spec: ClusterSpec, args: argparse.Namespace) -> ClusterSpec:
    update: dict[str, object] = {}
    if args.model:
        update["model"] = args.model
    if args.port is not None:
        update["router"] = spec.router.model_copy(update={"port": args.port})
    return spec.model_copy(update=update)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before importing ray
    import ray
    import uvicorn

    from cluster.actors import start_worker_actor
    from cluster.progress import load_with_progress
    from cluster.worker_server import WorkerSettings
    from engine.scheduler import SchedulerConfig
    from router.app import create_app
    from router.budget_store import make_store
    from router.config import RouterConfig
    from router.workers import WorkerPool

    spec = _with_overrides(load_spec(args.spec), args)
    started = time.monotonic()
    loaded = load_with_progress(spec.model)  # converts and caches once for every actor
    if args.address:
        ray.init(address=args.address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    actors = []
    try:
        roles = [("prefill", spec.prefill)] * spec.prefill.replicas
        roles += [("decode", spec.decode)] * spec.decode.replicas
        for role, part in roles:
            scheduler = SchedulerConfig(
                max_num_seqs=getattr(part, "max_num_seqs", 64),
                max_batch_tokens=getattr(part, "max_batch_tokens", 2048),
                chunk_size=getattr(part, "chunk", 512),
            )
            settings = WorkerSettings(
                role=role,
                engine_id=f"{role}-{uuid.uuid4().hex[:8]}",
                kv_cache_gb=part.kv_cache_gb,
                lease_s=spec.transfer.lease_s,
                transfer=spec.transfer.backend,
                scheduler=scheduler,
            )
            actors.append((role, start_worker_actor(spec.model, settings, part.num_cpus)))
        addresses = ray.get([a.address.remote() for _, a in actors])
        by_role = {
            r: tuple(a for (role, _), a in zip(actors, addresses, strict=True) if role == r)
            for r in ("prefill", "decode")
        }
        config = RouterConfig(
            model=spec.model,
            prefill=by_role["prefill"],
            decode=by_role["decode"],
            host=spec.router.host,
            port=spec.router.port,
            redis_url=spec.router.redis_url,
        )
        pool = WorkerPool(config.prefill, config.decode, config.worker_cooldown_s)
        app = create_app(
            config, loaded.tokenizer, loaded.args.max_seq_len, pool, make_store(config.redis_url)
        )
        del loaded  # the driver only needs the tokenizer from here on
        server = uvicorn.Server(
            uvicorn.Config(app, host=config.host, port=config.port, log_level="warning")
        )
        _serve_until_signal(server, config, spec, started, len(actors))
    finally:
        # Ask workers to stop cleanly, briefly (a terminal's Ctrl-C may already have
        # reached Ray's own processes), then tear the actors and the local Ray down.
        with contextlib.suppress(Exception):
            ray.get([actor.stop.remote() for _, actor in actors], timeout=5)
        for _, actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        ray.shutdown()
        print("pdserve: stopped", flush=True)
    return 0


def _serve_until_signal(server, config, spec, started: float, n_workers: int) -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.run, name="router", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    if not thread.is_alive():
        raise SystemExit(f"pdserve: the router could not bind {config.host}:{config.port}")
    print(
        f"pdserve ready in {time.monotonic() - started:.1f}s: {n_workers} workers; "
        f"OpenAI API at http://{config.host}:{config.port}/v1 (model {spec.model})",
        flush=True,
    )
    stop.wait()
    server.should_exit = True
    thread.join(15)
