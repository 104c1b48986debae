"""Token buckets, the arithmetic only (the stores apply it atomically).

A bucket holds up to `capacity` units and refills at `rate` units per second. Taking
several buckets at once is all-or-nothing: a request reserves its input and output
tokens and one request from every bucket in its hierarchy (tenant, then global) or from
none. `retry_after` is how long until the scarcest bucket could cover its share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    key: str
    amount: float
    capacity: float
    rate: float
    """Units per second (capacity per minute / 60)."""


@dataclass(frozen=True)
class Bucket:
    level: float
    stamp: float


def refilled(b: Bucket | None, c: Claim, now: float) -> Bucket:
    if b is None:
        return Bucket(c.capacity, now)
    return Bucket(min(c.capacity, b.level + (now - b.stamp) * c.rate), now)


def take(
    buckets: Sequence[Bucket | None], claims: Sequence[Claim], now: float
) -> tuple[bool, list[Bucket], float]:
    """-> (taken, new bucket states, seconds until all claims could be met)."""
    fresh = [refilled(b, c, now) for b, c in zip(buckets, claims, strict=True)]
    short = [
        (c.amount - b.level) / c.rate
        for b, c in zip(fresh, claims, strict=True)
        if b.level < c.amount
    ]
    if short:
        return False, fresh, max(short)
    return True, [Bucket(b.level - c.amount, now) for b, c in zip(fresh, claims, strict=True)], 0.0


def give_back(b: Bucket | None, c: Claim, now: float) -> Bucket:
    """Refund `c.amount` (unused reservation), never above capacity."""
    cur = refilled(b, c, now)
    return Bucket(min(c.capacity, cur.level + c.amount), now)
