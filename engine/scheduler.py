"""Continuous-batching scheduler with chunked prefill and preemption by recompute.

Each step, under a token budget that only goes down:

1. Running sequences that are decoding get one token each, oldest first. A decode that
   needs a new block and finds none preempts the newest running sequence (its blocks
   are freed; it goes back to the front of the queue and recomputes later), repeating
   until the block is found or the sequence preempts itself.
2. Then sequences still prefilling (running, or waiting in arrival order, up to
   `max_num_seqs` running) get a chunk of at most `chunk_size` tokens, as long as the
   budget lasts and their blocks can be allocated. A waiting sequence that does not fit
   stops admission (first come, first served).

A chunk that reaches the last known token asks for logits, so the step samples that
sequence's next token. `update` applies the step's samples; finished sequences free
their blocks. The scheduler imports no model code: plan, then run, then update.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from engine.block_pool import BlockPool
from engine.sampler import Sample
from engine.sequence import SeqStatus, Sequence


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 64
    """Sequences running at once (decode batch size)."""
    max_batch_tokens: int = 2048
    """Tokens per step, prefill and decode together."""
    chunk_size: int = 512
    """Longest prefill chunk of one sequence in one step."""

    def __post_init__(self) -> None:
        if min(self.max_num_seqs, self.max_batch_tokens, self.chunk_size) < 1:
            raise ValueError("scheduler limits must all be >= 1")


@dataclass(frozen=True)
class ScheduledChunk:
    seq: Sequence
    start: int
    end: int
    samples: bool
    """True when the chunk reaches the sequence's last token: the step samples the next."""

    @classmethod
    def of(cls, seq: Sequence, start: int, end: int) -> ScheduledChunk:
        return cls(seq, start, end, samples=end == seq.num_tokens)


@dataclass(frozen=True)
class StepPlan:
    chunks: tuple[ScheduledChunk, ...]
    preempted: tuple[Sequence, ...] = ()

    @property
    def sampled(self) -> list[Sequence]:
        return [c.seq for c in self.chunks if c.samples]


@dataclass
class Scheduler:
    config: SchedulerConfig
    pool: BlockPool
    waiting: deque[Sequence] = field(default_factory=deque)
    running: list[Sequence] = field(default_factory=list)
    num_preemptions: int = 0
    """Preemptions since start (a counter for metrics and tests)."""

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> StepPlan:
        budget = self.config.max_batch_tokens
        chunks: list[ScheduledChunk] = []
        preempted: list[Sequence] = []

        for seq in [s for s in self.running if s.is_decoding]:
            if budget == 0:
                break
            if seq.status == SeqStatus.PREEMPTED:
                continue  # preempted earlier in this loop
            while not self._grow(seq, seq.num_tokens):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                chunks.append(ScheduledChunk.of(seq, seq.num_computed, seq.num_tokens))
                budget -= 1

        prefilling = [s for s in self.running if not s.is_decoding and s not in preempted]
        for seq in prefilling:
            budget -= self._add_prefill(seq, budget, chunks)
        if preempted:  # memory is short: admitting now would only thrash
            return StepPlan(tuple(chunks), tuple(preempted))
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            used = self._add_prefill(seq, budget, chunks)
            if used == 0:
                break
            self.waiting.popleft()
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            budget -= used
        return StepPlan(tuple(chunks), tuple(preempted))

    def update(self, plan: StepPlan, samples: Seq[Sample]) -> dict[str, str]:
        """Apply a step's samples (one per sampled chunk); -> request id: new text."""
        for chunk in plan.chunks:
            chunk.seq.num_computed = chunk.end
        texts = {}
        for seq, s in zip(plan.sampled, samples, strict=True):
            texts[seq.request_id] = seq.append(s)
            if seq.status.finished:
                self._release(seq)
        return texts

    def abort(self, request_id: str) -> Sequence | None:
        for seq in [*self.running, *self.waiting]:
            if seq.request_id == request_id:
                seq.status = SeqStatus.FINISHED_ABORTED
                self._release(seq)
                return seq
        return None

    # -- helpers ---------------------------------------------------------------------

    def _add_prefill(self, seq: Sequence, budget: int, chunks: list[ScheduledChunk]) -> int:
        n = min(seq.num_uncomputed, self.config.chunk_size, budget)
        if n <= 0 or not self._grow(seq, seq.num_computed + n):
            return 0
        chunks.append(ScheduledChunk.of(seq, seq.num_computed, seq.num_computed + n))
        return n

    def _grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Make seq's block table cover num_tokens; False (and no change) if it cannot."""
        need = -(-num_tokens // self.pool.block_size) - len(seq.block_table)
        if need <= 0:
            return True
        if not self.pool.can_allocate(need):
            return False
        seq.block_table.extend(self.pool.allocate(need))
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.free(seq.block_table)
        seq.block_table = []
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        seq.status = SeqStatus.PREEMPTED
        self.waiting.appendleft(seq)

    def _release(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.pool.free(seq.block_table)
        seq.block_table = []
