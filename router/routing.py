"""Which worker takes a request: pure choices over the loads workers report in Stats.

- Decode: the worker with the most free KV blocks, then the smallest running batch.
- Prefill: the worker already holding the longest prefix of the prompt's blocks
  (chained block hashes, so a match means the whole prefix is cached there), then the
  fewest outstanding prefill tokens.
- A worker that failed recently is skipped for a cool-down, unless nothing else is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.block_pool import chain_hash


@dataclass(frozen=True)
class WorkerLoad:
    address: str
    healthy: bool = True
    queue_depth: int = 0
    running: int = 0
    free_blocks: int = 0
    total_blocks: int = 1
    outstanding_prefill_tokens: int = 0
    prefix_hashes: frozenset[int] = frozenset()

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / max(1, self.total_blocks)


@dataclass
class Cooldowns:
    seconds: float
    _until: dict[str, float] = field(default_factory=dict)

    def mark(self, address: str, now: float) -> None:
        self._until[address] = now + self.seconds

    def active(self, address: str, now: float) -> bool:
        return self._until.get(address, 0.0) > now


def prompt_block_hashes(prompt: Sequence[int], block_size: int = 16) -> list[int]:
    hashes, parent = [], None
    for i in range(len(prompt) // block_size):
        parent = chain_hash(parent, prompt[i * block_size : (i + 1) * block_size])
        hashes.append(parent)
    return hashes


def _usable(workers: Sequence[WorkerLoad], cooled: Cooldowns, now: float) -> list[WorkerLoad]:
    healthy = [w for w in workers if w.healthy]
    warm = [w for w in healthy if not cooled.active(w.address, now)]
    return warm or healthy


def pick_decode(workers: Sequence[WorkerLoad], cooled: Cooldowns, now: float) -> str | None:
    usable = _usable(workers, cooled, now)
    if not usable:
        return None
    return max(usable, key=lambda w: (w.free_blocks, -w.running)).address


def pick_prefill(
    workers: Sequence[WorkerLoad], prompt_hashes: Sequence[int], cooled: Cooldowns, now: float
) -> str | None:
    usable = _usable(workers, cooled, now)
    if not usable:
        return None

    def cached_blocks(w: WorkerLoad) -> int:
        n = 0
        for h in prompt_hashes:
            if h not in w.prefix_hashes:
                break
            n += 1
        return n

    return max(usable, key=lambda w: (cached_blocks(w), -w.outstanding_prefill_tokens)).address
