"""Turn a step's logits into next tokens, one row per sequence.

Order per row: penalties -> (greedy: argmax) -> temperature -> top-k -> top-p -> min-p
-> draw with the request's own generator. A seeded request reseeds its generator from
(seed, output index) before every draw, so token i depends only on the seed, the
distribution and i: a request split across a prefill and a decode worker draws exactly
what it would draw in one engine. Logprobs are those of the model's raw
distribution (before penalties and temperature), as OpenAI reports them.
When every row is greedy without penalties, one argmax serves the whole batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from engine.sampling_params import SamplingParams


@dataclass
class SamplerState:
    """What the sampler needs to remember about one request."""

    params: SamplingParams
    prompt_ids: Sequence[int]
    generator: torch.Generator
    output_counts: Counter[int] = field(default_factory=Counter)

    @classmethod
    def create(
        cls, params: SamplingParams, prompt_ids: Sequence[int], output_ids: Sequence[int] = ()
    ) -> SamplerState:
        """output_ids: tokens already generated elsewhere (a prefill worker's first token)."""
        gen = torch.Generator()
        if params.seed is None:
            gen.seed()
        return cls(params, prompt_ids, gen, Counter(output_ids))

    def draw(self, probs: torch.Tensor) -> int:
        if self.params.seed is not None:
            index = sum(self.output_counts.values())
            self.generator.manual_seed((self.params.seed * 1_000_003 + index) % 2**63)
        return int(torch.multinomial(probs, 1, generator=self.generator))


@dataclass(frozen=True)
class Sample:
    token_id: int
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


def sample(logits: torch.Tensor, states: Sequence[SamplerState]) -> list[Sample]:
    """logits: (S, V) fp32, row i for states[i]."""
    if len(states) != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} logit rows for {len(states)} sequences")
    simple = all(s.params.greedy and not s.params.has_penalties for s in states)
    if simple:
        tokens = logits.argmax(dim=-1).tolist()
    else:
        tokens = [_sample_row(logits[i], s) for i, s in enumerate(states)]
    out = []
    for i, (tok, state) in enumerate(zip(tokens, states, strict=True)):
        state.output_counts[tok] += 1
        out.append(_with_logprobs(logits[i], tok, state.params.logprobs))
    return out


def _sample_row(row: torch.Tensor, state: SamplerState) -> int:
    p = state.params
    if p.has_penalties:
        row = _penalise(row.clone(), state)
    if p.greedy:
        return int(row.argmax())
    row = row / p.temperature
    if p.top_k:
        kth = torch.topk(row, min(p.top_k, row.numel())).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    probs = torch.softmax(row, dim=-1)
    if p.top_p < 1.0:
        probs = _top_p(probs, p.top_p)
    if p.min_p > 0.0:
        probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
    return state.draw(probs)


def _penalise(row: torch.Tensor, state: SamplerState) -> torch.Tensor:
    p = state.params
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(state.prompt_ids) | set(state.output_counts)))
        if seen.numel():
            vals = row[seen]
            row[seen] = torch.where(
                vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty
            )
    if state.output_counts and (p.frequency_penalty or p.presence_penalty):
        ids = torch.tensor(list(state.output_counts))
        counts = torch.tensor(list(state.output_counts.values()), dtype=row.dtype)
        row[ids] -= p.frequency_penalty * counts + p.presence_penalty
    return row


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p."""
    sorted_probs, order = probs.sort(descending=True)
    mass_before = sorted_probs.cumsum(0) - sorted_probs
    sorted_probs[mass_before >= top_p] = 0.0
    return torch.zeros_like(probs).scatter_(0, order, sorted_probs)


def _with_logprobs(row: torch.Tensor, token: int, n: int | None) -> Sample:
    if n is None:
        return Sample(token)
    logp = torch.log_softmax(row.float(), dim=-1)
    top = torch.topk(logp, n) if n else None
    pairs = (
        () if top is None else tuple(zip(top.indices.tolist(), top.values.tolist(), strict=True))
    )
    return Sample(token, float(logp[token]), pairs)
