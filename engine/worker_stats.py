"""What a worker reports in `Stats`: its engine's load and block pool, plus role extras."""

from __future__ import annotations

from dataclasses import dataclass

from engine.llm_engine import LLMEngine


@dataclass(frozen=True)
class WorkerStats:
    queue_depth: int
    running: int
    free_blocks: int
    used_blocks: int
    cached_blocks: int
    total_blocks: int
    preemptions: int
    invariant_error: str
    """'' when the block pool's conservation law holds."""
    outstanding_prefill_tokens: int = 0
    prefix_block_hashes: tuple[int, ...] = ()
    prefix_cache_hit_tokens: int = 0
    leased_requests: int = 0
    transfers_in_flight: int = 0


def engine_stats(engine: LLMEngine, **extra: int | tuple[int, ...]) -> WorkerStats:
    """Snapshot on the engine's own thread; `extra` fills the role-specific fields."""
    pool, sched = engine.pool, engine.scheduler
    return WorkerStats(
        queue_depth=len(sched.waiting) + len(sched.waiting_for_kv),
        running=len(sched.running),
        free_blocks=pool.num_free,
        used_blocks=pool.num_in_use,
        cached_blocks=pool.num_cached,
        total_blocks=pool.num_blocks,
        preemptions=sched.num_preemptions,
        invariant_error=pool.invariant_error(),
        **extra,  # type: ignore[arg-type]
    )
