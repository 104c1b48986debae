"""A request's state inside an engine: tokens, KV blocks, text, and when it ends."""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from enum import IntEnum

from engine.detokenizer import IncrementalDetokenizer
from engine.sampler import Sample, SamplerState
from engine.sampling_params import SamplingParams
from engine.stop_strings import StopStringMatcher


class SeqStatus(IntEnum):
    """Ordered: a sequence only ever moves to a status that is not lower, except that a
    preempted sequence goes back to WAITING."""

    WAITING = 0
    WAITING_FOR_KV = 1
    """Blocks allocated, KV being pulled from a prefill worker."""
    RUNNING = 2
    PREEMPTED = 3
    HANDED_OFF = 4
    """Prefill done and first token sampled; blocks held for a decode worker to pull."""
    FINISHED_STOPPED = 5
    FINISHED_LENGTH = 6
    FINISHED_ABORTED = 7

    @property
    def finished(self) -> bool:
        return self >= SeqStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> str | None:
        return {
            SeqStatus.FINISHED_STOPPED: "stop",
            SeqStatus.FINISHED_LENGTH: "length",
            SeqStatus.FINISHED_ABORTED: "abort",
        }.get(self)


@dataclass
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    sampler: SamplerState
    detokenizer: IncrementalDetokenizer
    stop_ids: frozenset[int]
    max_model_len: int
    status: SeqStatus = SeqStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    """Chained hashes of the full blocks published to the prefix cache so far."""
    num_computed: int = 0
    """Tokens whose K/V is in the cache (all_ids[:num_computed])."""
    num_preemptions: int = 0
    hand_off: bool = False
    """Prefill only: after the first token, keep the blocks for a decode worker."""
    num_cached_prompt: int = 0
    """Prompt tokens whose KV came from the prefix cache."""
    _stops: StopStringMatcher = field(init=False)

    def __post_init__(self) -> None:
        self._stops = StopStringMatcher(self.params.stop)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def token_at(self, i: int) -> int:
        n = len(self.prompt_ids)
        return self.prompt_ids[i] if i < n else self.output_ids[i - n]

    def tokens(self, start: int, end: int) -> list[int]:
        return [self.token_at(i) for i in range(start, end)]

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def is_decoding(self) -> bool:
        return self.num_uncomputed == 1 and bool(self.output_ids)

    def append(self, s: Sample) -> str:
        """Record a sampled token; returns the text it completes; may finish the sequence."""
        self.output_ids.append(s.token_id)
        self.samples.append(s)
        if s.token_id in self.stop_ids:
            self.status = SeqStatus.FINISHED_STOPPED
            return self._drain()
        text, hit = self._stops.push(self.detokenizer.push(s.token_id))
        if hit:
            self.status = SeqStatus.FINISHED_STOPPED
        elif (
            len(self.output_ids) >= self.params.max_tokens or self.num_tokens >= self.max_model_len
        ):
            self.status = SeqStatus.FINISHED_LENGTH
            text += self._drain()
        return text

    def replay(self, s: Sample) -> None:
        """Take a token sampled elsewhere as if sampled here, discarding its text (the
        other worker already emitted it); detokeniser and stop state end up identical."""
        self.output_ids.append(s.token_id)
        self.samples.append(s)
        self._stops.push(self.detokenizer.push(s.token_id))

    def _at_length_limit(self) -> bool:
        return (
            len(self.output_ids) >= self.params.max_tokens or self.num_tokens >= self.max_model_len
        )

    def _drain(self) -> str:
        """At the end: bytes still held by the detokeniser, then text held for stops."""
        tail, hit = self._stops.push(self.detokenizer.flush())
        if hit:
            self.status = SeqStatus.FINISHED_STOPPED
            return tail
        return tail + self._stops.flush()


def stop_ids_for(params: SamplingParams, eos_ids: Seq[int]) -> frozenset[int]:
    eos = () if params.ignore_eos else tuple(eos_ids)
    return frozenset((*eos, *params.stop_token_ids))
