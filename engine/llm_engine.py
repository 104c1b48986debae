"""A single-process engine: requests in, token deltas out, one step at a time.

    plan    = scheduler.schedule()              which tokens of which sequences
    batch   = build_batch(plan)                 positions, slots, attention plan
    logits  = model(batch, kv)                  one forward for the whole step
    samples = sample(logits, sequences)         next token per finished chunk
    texts   = scheduler.update(plan, samples)   append, detokenise, stop, free blocks

The prefill and decode workers wrap this same loop; `generate` runs it to completion.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from engine.batch import SeqChunk, build_batch
from engine.block_pool import BlockPool
from engine.errors import ContextLengthExceeded, EmptyPrompt, TokenOutOfRange
from engine.kv_cache import KVCache, KVCacheSpec
from engine.loader import LoadedModel
from engine.sampler import Sample, SamplerState, sample
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerConfig, StepPlan
from engine.sequence import SeqStatus, stop_ids_for
from engine.sequence import Sequence as Seq


@dataclass(frozen=True)
class EngineConfig:
    kv_cache_gb: float = 1.0
    """Memory for the paged KV cache."""
    block_size: int = 16
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)


@dataclass(frozen=True)
class RequestOutput:
    request_id: str
    text: str
    """Text completed by this step (a delta)."""
    samples: tuple[Sample, ...]
    """Tokens sampled for this request in this step (0 or 1 today)."""
    finish_reason: str | None
    handed_off: tuple[int, ...] | None = None
    """Prefill-only requests: the blocks now held for a decode worker."""
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0


@dataclass(frozen=True)
class Completion:
    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    samples: list[Sample]


class LLMEngine:
    def __init__(self, loaded: LoadedModel, config: EngineConfig = EngineConfig()) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.args = loaded.args
        self.config = config
        spec = KVCacheSpec.for_budget(
            self.args, config.kv_cache_gb, loaded.model.dtype, config.block_size
        )
        self.kv = KVCache(spec)
        self.pool = BlockPool(spec.num_blocks, config.block_size)
        self.scheduler = Scheduler(config.scheduler, self.pool)
        self._ids = itertools.count()

    @property
    def max_model_len(self) -> int:
        return self.args.max_seq_len

    def validate(self, prompt_ids: Sequence[int], params: SamplingParams) -> None:
        """Raise a typed `InvalidRequest` for anything that can never be served."""
        if not prompt_ids:
            raise EmptyPrompt()
        bad = next((t for t in prompt_ids if not 0 <= t < self.args.vocab_size), None)
        if bad is not None:
            raise TokenOutOfRange(bad, self.args.vocab_size)
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise ContextLengthExceeded(len(prompt_ids), params.max_tokens, self.max_model_len)

    def add_request(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        request_id: str | None = None,
        hand_off: bool = False,
    ) -> str:
        """Queue a request. hand_off: prefill only; after the first token the blocks are
        held (see `release_handed_off`) for a decode worker to pull."""
        self.validate(prompt_ids, params)
        seq = self._new_sequence(prompt_ids, params, request_id)
        seq.hand_off = hand_off
        self.scheduler.add(seq)
        return seq.request_id

    def add_prefilled(
        self, prompt_ids: Sequence[int], params: SamplingParams, first: Sample, request_id: str
    ) -> list[int] | None:
        """A request prefilled elsewhere: reserve blocks for its prompt's KV and replay its
        first token. -> the blocks to pull the KV into, or None if they do not fit now."""
        self.validate(prompt_ids, params)
        seq = self._new_sequence(prompt_ids, params, request_id, output_ids=[first.token_id])
        blocks = self.scheduler.reserve_remote_kv(seq, len(prompt_ids))
        if blocks is not None:
            seq.replay(first)
        return blocks

    def add_continuation(
        self, prompt_ids: Sequence[int], params: SamplingParams, first: Sample, request_id: str
    ) -> None:
        """A request whose first token was sampled elsewhere but whose KV is not available:
        queue it to recompute prompt and first token here, then go on decoding."""
        self.validate(prompt_ids, params)
        seq = self._new_sequence(prompt_ids, params, request_id, output_ids=[first.token_id])
        seq.replay(first)
        self.scheduler.add(seq)

    def kv_arrived(self, request_id: str) -> None:
        seq = self.scheduler.waiting_for_kv[request_id]
        self.scheduler.kv_arrived(request_id, len(seq.prompt_ids))

    def kv_failed(self, request_id: str) -> None:
        self.scheduler.kv_failed(request_id)

    def release_handed_off(self, request_id: str) -> bool:
        return self.scheduler.release_handed_off(request_id)

    def _new_sequence(
        self,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        request_id: str | None,
        output_ids: Sequence[int] = (),
    ) -> Seq:
        return Seq(
            request_id=request_id if request_id is not None else f"req-{next(self._ids)}",
            prompt_ids=list(prompt_ids),
            params=params,
            sampler=SamplerState.create(params, prompt_ids, output_ids),
            detokenizer=self.tokenizer.detokenizer(),
            stop_ids=stop_ids_for(params, self.tokenizer.info.eos_ids),
            max_model_len=self.max_model_len,
        )

    def abort(self, request_id: str) -> bool:
        return self.scheduler.abort(request_id) is not None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[RequestOutput]:
        plan = self.scheduler.schedule()
        if not plan.chunks:
            return []
        samples = self.execute(plan)
        texts = self.scheduler.update(plan, samples)
        return [
            RequestOutput(
                seq.request_id,
                texts[seq.request_id],
                (s,),
                seq.status.finish_reason,
                handed_off=tuple(seq.block_table) if seq.status == SeqStatus.HANDED_OFF else None,
                prompt_tokens=len(seq.prompt_ids),
                cached_prompt_tokens=seq.num_cached_prompt,
            )
            for seq, s in zip(plan.sampled, samples, strict=True)
        ]

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> list[Sample]:
        """Run the step's forward and sample; samples come back in `plan.sampled` order."""
        ordered = sorted(plan.chunks, key=lambda c: c.end - c.start > 1)  # decodes first
        batch = build_batch(
            [
                SeqChunk(c.seq.tokens(c.start, c.end), c.start, c.seq.block_table, c.samples)
                for c in ordered
            ],
            self.kv,
        )
        logits = self.model(batch, self.kv)
        sampled = [c.seq for c in ordered if c.samples]
        samples = sample(logits, [s.sampler for s in sampled])
        by_request = {s.request_id: x for s, x in zip(sampled, samples, strict=True)}
        return [by_request[s.request_id] for s in plan.sampled]

    def stream(self, request_id: str) -> Iterator[RequestOutput]:
        """Step until `request_id` finishes, yielding its outputs (others advance too)."""
        while self.has_unfinished():
            for out in self.step():
                if out.request_id == request_id:
                    yield out
                    if out.finish_reason is not None:
                        return

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[Completion]:
        """Run every prompt to completion, batched; results in prompt order."""
        plist = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist, strict=True)]
        acc: dict[str, list[RequestOutput]] = {rid: [] for rid in ids}
        reasons: dict[str, str] = {}
        while self.has_unfinished():
            for out in self.step():
                acc[out.request_id].append(out)
                if out.finish_reason is not None:
                    reasons[out.request_id] = out.finish_reason
        results = []
        for rid, prompt in zip(ids, prompts, strict=True):
            samples = [s for o in acc[rid] for s in o.samples]
            results.append(
                Completion(
                    request_id=rid,
                    prompt_ids=list(prompt),
                    token_ids=[s.token_id for s in samples],
                    text="".join(o.text for o in acc[rid]),
                    finish_reason=reasons[rid],
                    samples=samples,
                )
            )
        return results
