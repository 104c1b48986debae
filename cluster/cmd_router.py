"""`pdserve router`: the OpenAI-compatible HTTP front over a static list of workers."""

from __future__ import annotations

import argparse
import json
import os

from engine.model_source import DEFAULT_MODEL


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "router",
        help="serve the OpenAI API over prefill and decode workers",
        description="Serve /v1/chat/completions, /v1/completions and /v1/models over the "
        "given workers. API keys come from --api-keys-file (JSON: key -> tenant) or "
        "PDSERVE_API_KEYS (key=tenant,...); with none the router is open and should stay "
        "on loopback.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--prefill", required=True, help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--decode", required=True, help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--redis-url", default=None, help="share token budgets through Redis")
    p.add_argument("--api-keys-file", default=None)
    p.add_argument(
        "--config",
        default=None,
        help="JSON file with further RouterConfig fields (tenants, limits, ...)",
    )
    p.set_defaults(run=run)


def _api_keys(args: argparse.Namespace) -> dict[str, str]:
    if args.api_keys_file:
        with open(args.api_keys_file) as f:
            return dict(json.load(f))
    env = os.environ.get("PDSERVE_API_KEYS", "")
    pairs = [item.split("=", 1) for item in env.split(",") if "=" in item]
    return {k.strip(): t.strip() for k, t in pairs}


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from engine.loader import load_tokenizer
    from router.app import create_app
    from router.budget_store import make_store
    from router.config import RouterConfig
    from router.workers import WorkerPool

    extra = {}
    if args.config:
        with open(args.config) as f:
            extra = json.load(f)
    config = RouterConfig(
        **{
            **extra,
            "model": args.model,
            "host": args.host,
            "port": args.port,
            "prefill": tuple(a for a in args.prefill.split(",") if a),
            "decode": tuple(a for a in args.decode.split(",") if a),
            "redis_url": args.redis_url or extra.get("redis_url"),
            "api_keys": _api_keys(args) or extra.get("api_keys", {}),
        }
    )
    tokenizer, model_args = load_tokenizer(args.model)
    pool = WorkerPool(config.prefill, config.decode, config.worker_cooldown_s)
    app = create_app(config, tokenizer, model_args.max_seq_len, pool, make_store(config.redis_url))
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
    return 0
