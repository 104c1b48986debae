"""Where token buckets live: this process (default) or Redis (shared by replicas).

Both apply `router/buckets.py`'s arithmetic atomically: the in-process store under a
lock, the Redis store in one Lua script (Redis runs a script without interleaving).
Time comes from the caller so both agree on it within one reservation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from router.buckets import Bucket, Claim, give_back, refilled, take


class BudgetStore(Protocol):
    async def reserve(self, claims: Sequence[Claim], now: float) -> tuple[bool, float]:
        """All claims or none; -> (taken, retry_after seconds)."""
        ...

    async def refund(self, claims: Sequence[Claim], now: float) -> None: ...

    async def level(self, claim: Claim, now: float) -> float:
        """Units left in a bucket (for x-ratelimit-remaining-* headers)."""
        ...

    async def close(self) -> None: ...


class MemoryStore:
    def __init__(self) -> None:
        self._buckets: dict[str, Bucket] = {}
        self._lock = asyncio.Lock()

    async def reserve(self, claims: Sequence[Claim], now: float) -> tuple[bool, float]:
        async with self._lock:
            ok, states, retry = take([self._buckets.get(c.key) for c in claims], claims, now)
            if ok:
                self._buckets.update({c.key: s for c, s in zip(claims, states, strict=True)})
            return ok, retry

    async def refund(self, claims: Sequence[Claim], now: float) -> None:
        async with self._lock:
            for c in claims:
                self._buckets[c.key] = give_back(self._buckets.get(c.key), c, now)

    async def level(self, claim: Claim, now: float) -> float:
        async with self._lock:
            return refilled(self._buckets.get(claim.key), claim, now).level

    async def close(self) -> None:
        return None


# KEYS: bucket keys. ARGV: now, then (amount, capacity, rate) per key, then mode
# ("take" | "refund" | "peek"). Buckets are hashes {level, stamp}; same math as buckets.py.
_LUA = """
local now = tonumber(ARGV[1])
local mode = ARGV[#ARGV]
local n = #KEYS
local levels = {}
local short = 0
for i = 1, n do
  local amount = tonumber(ARGV[2 + (i - 1) * 3])
  local cap = tonumber(ARGV[3 + (i - 1) * 3])
  local rate = tonumber(ARGV[4 + (i - 1) * 3])
  local b = redis.call('HMGET', KEYS[i], 'level', 'stamp')
  local level = cap
  if b[1] then
    level = math.min(cap, tonumber(b[1]) + (now - tonumber(b[2])) * rate)
  end
  if mode == 'refund' then
    level = math.min(cap, level + amount)
  elseif mode == 'take' and level < amount then
    short = math.max(short, (amount - level) / rate)
  end
  levels[i] = {level, amount, cap, rate}
end
if mode == 'peek' then
  return tostring(levels[1][1])
end
if mode == 'take' and short > 0 then
  return {0, tostring(short)}
end
for i = 1, n do
  local level = levels[i][1]
  if mode == 'take' then level = level - levels[i][2] end
  redis.call('HSET', KEYS[i], 'level', tostring(level), 'stamp', tostring(now))
  redis.call('EXPIRE', KEYS[i], math.ceil(levels[i][3] / levels[i][4]) + 60)
end
return {1, '0'}
"""


class RedisStore:
    """Buckets in Redis under `pdserve:budget:<key>`, shared by every router replica.

    Clocks: replicas pass their own wall-clock time; skew between hosts only shifts
    refills by the skew (keep hosts NTP-synced)."""

    def __init__(self, url: str) -> None:
        import redis.asyncio as redis

        self._redis = redis.from_url(url)
        self._script = self._redis.register_script(_LUA)

    async def _run(self, claims: Sequence[Claim], now: float, mode: str) -> object:
        keys = [f"pdserve:budget:{c.key}" for c in claims]
        args: list[object] = [now]
        for c in claims:
            args += [c.amount, c.capacity, c.rate]
        return await self._script(keys=keys, args=[*args, mode])

    async def reserve(self, claims: Sequence[Claim], now: float) -> tuple[bool, float]:
        ok, retry = await self._run(claims, now, "take")  # type: ignore[misc]
        return bool(int(ok)), float(retry)

    async def refund(self, claims: Sequence[Claim], now: float) -> None:
        await self._run(claims, now, "refund")

    async def level(self, claim: Claim, now: float) -> float:
        return float(await self._run([claim], now, "peek"))  # type: ignore[arg-type]

    async def close(self) -> None:
        await self._redis.aclose()


def make_store(redis_url: str | None) -> BudgetStore:
    return RedisStore(redis_url) if redis_url else MemoryStore()
