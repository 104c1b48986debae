"""Admission: may this request start now? A pure policy, typed decisions.

    plan(ask, load, config)          -> Admit(claims) | Reject      (before the budget)
    after_budget(taken, retry, ...)  -> Admit | Queue(wait) | Reject(429)

1. Shed load first: no worker, decode queue over `max_queue_depth`, or decode KV usage
   over `max_kv_usage` -> Reject 503 (cluster overloaded), before any budget is spent.
2. Claims: input tokens, output tokens (max_tokens, reserved up front, the unused part
   refunded at the end) and one request, from the tenant's buckets and the global ones.
   A claim larger than its bucket can ever hold is a 429 at once.
3. The store takes all claims or none. Not taken: wait in the queue if the budget comes
   back within the tenant tier's wait limit, else 429 with Retry-After.
Every decision logs the numbers behind it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from router.buckets import Claim
from router.config import Limits, RouterConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ask:
    tenant: str
    input_tokens: int
    output_tokens: int
    priority: int


@dataclass(frozen=True)
class ClusterLoad:
    prefill_workers: int
    decode_workers: int
    decode_queue_depth: int
    decode_kv_usage: float


@dataclass(frozen=True)
class Admit:
    claims: tuple[Claim, ...]


@dataclass(frozen=True)
class Queue:
    wait_s: float


@dataclass(frozen=True)
class Reject:
    reason: str
    status: int
    message: str
    retry_after_s: float = 1.0


Decision = Admit | Queue | Reject


def claims_for(ask: Ask, config: RouterConfig) -> tuple[Claim, ...]:
    tenant = config.tenants[ask.tenant]
    out: list[Claim] = []
    for scope, limits in (
        (f"tenant:{ask.tenant}", tenant.limits),
        ("global", config.global_limits),
    ):
        out += _claims(scope, limits, ask)
    return tuple(out)


def _claims(scope: str, limits: Limits, ask: Ask) -> list[Claim]:
    pairs = [
        ("input_tokens", limits.input_tokens_per_min, ask.input_tokens),
        ("output_tokens", limits.output_tokens_per_min, ask.output_tokens),
        ("requests", limits.requests_per_min, 1),
    ]
    return [
        Claim(f"{scope}:{kind}", amount, per_min, per_min / 60.0)
        for kind, per_min, amount in pairs
        if per_min is not None
    ]


def plan(ask: Ask, load: ClusterLoad, config: RouterConfig) -> Admit | Reject:
    if load.prefill_workers == 0 or load.decode_workers == 0:
        return _log(ask, Reject("no_workers", 503, "no prefill or decode worker is reachable"))
    if load.decode_queue_depth > config.max_queue_depth:
        return _log(
            ask,
            Reject(
                "queue_full", 503, f"cluster overloaded: {load.decode_queue_depth} requests queued"
            ),
        )
    if load.decode_kv_usage > config.max_kv_usage:
        return _log(
            ask,
            Reject(
                "kv_pressure", 503, f"cluster overloaded: KV cache {load.decode_kv_usage:.0%} full"
            ),
        )
    claims = claims_for(ask, config)
    too_big = [c for c in claims if c.amount > c.capacity]
    if too_big:
        c = too_big[0]
        return _log(
            ask,
            Reject(
                "exceeds_limit",
                429,
                f"request needs {c.amount:.0f} {c.key} but the limit is "
                f"{c.capacity:.0f} per minute",
                retry_after_s=60.0,
            ),
        )
    return Admit(claims)


def after_budget(
    taken: bool, retry_after_s: float, waited_s: float, ask: Ask, admit: Admit, config: RouterConfig
) -> Decision:
    if taken:
        return _log(ask, admit)
    allowed = config.max_queue_wait_s * (1 + ask.priority)
    if waited_s + retry_after_s <= allowed:
        return Queue(retry_after_s)
    return _log(
        ask,
        Reject(
            "over_budget", 429, f"tenant '{ask.tenant}' is over its token budget", retry_after_s
        ),
    )


def _log(ask: Ask, decision: Decision) -> Decision:
    log.info(
        "admission %s: tenant=%s input=%d output=%d priority=%d",
        decision,
        ask.tenant,
        ask.input_tokens,
        ask.output_tokens,
        ask.priority,
    )
    return decision
