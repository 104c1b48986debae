"""Continuous-batching scheduler with chunked prefill, prefix caching and preemption.

Each step, under a token budget that only goes down:

1. Running sequences that are decoding get one token each, oldest first. A decode that
   needs a new block and finds none preempts the newest running sequence (its blocks
   are freed; it goes back to the front of the queue and recomputes later), repeating
   until the block is found or the sequence preempts itself.
2. Then sequences still prefilling (running, or waiting in arrival order, up to
   `max_num_seqs` running) get a chunk of at most `chunk_size` tokens, as long as the
   budget lasts and their blocks can be allocated. A waiting sequence that does not fit
   stops admission (first come, first served). On admission, full blocks whose chained
   hash is already cached are shared instead of recomputed (prefix caching).

A chunk that reaches the last known token asks for logits, so the step samples that
sequence's next token. `update` applies the step's samples; finished sequences free
their blocks, and a prefill-only sequence (`hand_off`) keeps them, HANDED_OFF, until
`release_handed_off`. A sequence whose KV arrives from elsewhere is reserved blocks
(`reserve_remote_kv`), waits, and joins the queue when `kv_arrived`.
The scheduler imports no model code: plan, then run, then update.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from engine.block_pool import BlockPool, chain_hash
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
    prefix_caching: bool = True
    """Reuse cached KV blocks of identical prompt prefixes."""

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
    handed_off: dict[str, Sequence] = field(default_factory=dict)
    waiting_for_kv: dict[str, Sequence] = field(default_factory=dict)
    num_preemptions: int = 0
    """Preemptions since start (a counter for metrics and tests)."""
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache since start."""

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def outstanding_prefill_tokens(self) -> int:
        return sum(s.num_uncomputed for s in [*self.waiting, *self.running] if not s.is_decoding)

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
            if not seq.block_table and self.config.prefix_caching:
                self._share_cached_prefix(seq)
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
            if self.config.prefix_caching:
                self._publish_full_blocks(chunk.seq)
        texts = {}
        for seq, s in zip(plan.sampled, samples, strict=True):
            texts[seq.request_id] = seq.append(s)
            if seq.status.finished:
                self._release(seq)
            elif seq.hand_off:
                self.running.remove(seq)
                seq.status = SeqStatus.HANDED_OFF
                self.handed_off[seq.request_id] = seq
        return texts

    def abort(self, request_id: str) -> Sequence | None:
        """Drop a request wherever it is. A caller whose transfer may still be writing into
        a WAITING_FOR_KV sequence's blocks must wait for it to end before calling."""
        for seq in [*self.running, *self.waiting, *self.handed_off.values()]:
            if seq.request_id == request_id:
                seq.status = SeqStatus.FINISHED_ABORTED
                self._release(seq)
                return seq
        seq = self.waiting_for_kv.pop(request_id, None)
        if seq is not None:
            seq.status = SeqStatus.FINISHED_ABORTED
            self.pool.free(seq.block_table)
            seq.block_table = []
        return seq

    # -- prefill/decode hand-off -----------------------------------------------------

    def release_handed_off(self, request_id: str) -> bool:
        seq = self.handed_off.pop(request_id, None)
        if seq is None:
            return False
        seq.status = SeqStatus.FINISHED_STOPPED
        self.pool.free(seq.block_table)
        seq.block_table = []
        return True

    def reserve_remote_kv(self, seq: Sequence, num_tokens: int) -> list[int] | None:
        """Blocks for `num_tokens` of KV arriving from elsewhere; None if they do not fit."""
        need = -(-num_tokens // self.pool.block_size)
        if not self.pool.can_allocate(need):
            return None
        seq.block_table = self.pool.allocate(need)
        seq.status = SeqStatus.WAITING_FOR_KV
        self.waiting_for_kv[seq.request_id] = seq
        return seq.block_table

    def kv_arrived(self, request_id: str, num_tokens: int) -> None:
        seq = self.waiting_for_kv.pop(request_id)
        seq.num_computed = num_tokens
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def kv_failed(self, request_id: str) -> None:
        """The pull failed: recompute locally instead (same model, same tokens)."""
        seq = self.waiting_for_kv.pop(request_id)
        self.pool.free(seq.block_table)
        seq.block_table = []
        seq.num_computed = 0
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

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

    def _share_cached_prefix(self, seq: Sequence) -> None:
        """Take cached blocks for the longest cached prefix of full blocks, leaving at
        least one token to compute (the step must produce logits)."""
        bs = self.pool.block_size
        parent = None
        for i in range((seq.num_tokens - 1) // bs):
            h = chain_hash(parent, seq.tokens(i * bs, (i + 1) * bs))
            block = self.pool.lookup(h)
            if block is None:
                break
            self.pool.share(block)
            seq.block_table.append(block)
            seq.block_hashes.append(h)
            parent = h
        seq.num_computed = len(seq.block_table) * bs
        if seq.num_computed and not seq.output_ids:
            seq.num_cached_prompt = seq.num_computed
            self.num_cached_tokens += seq.num_computed

    def _publish_full_blocks(self, seq: Sequence) -> None:
        bs = self.pool.block_size
        for i in range(len(seq.block_hashes), seq.num_computed // bs):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            h = chain_hash(parent, seq.tokens(i * bs, (i + 1) * bs))
            self.pool.set_hash(seq.block_table[i], h)
            seq.block_hashes.append(h)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.free(seq.block_table)
        seq.block_table = []
        seq.block_hashes = []
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
        self.handed_off.pop(seq.request_id, None)
        self.pool.free(seq.block_table)
        seq.block_table = []
