"""Protobuf <-> internal dataclasses, at the process edge only (no proto in the logic)."""

from __future__ import annotations

from google.protobuf.unknown_fields import UnknownFieldSet

from engine.sampler import Sample
from engine.sampling_params import SamplingParams
from engine.transfer.layout import KVLayout
from proto.v1 import pdserve_pb2 as pb


def has_unknown_fields(message: object) -> bool:
    """True if the sender set fields this version does not know (a newer or bad client)."""
    return len(UnknownFieldSet(message)) > 0  # type: ignore[arg-type]


def params_from_proto(p: pb.SamplingParams) -> SamplingParams:
    """Raises ValueError for out-of-range values. 0 means 'unset' for top_p and
    repetition_penalty (0 is not a valid value for either)."""
    return SamplingParams(
        max_tokens=p.max_tokens,
        temperature=p.temperature,
        top_p=p.top_p or 1.0,
        top_k=p.top_k,
        min_p=p.min_p,
        seed=p.seed if p.HasField("seed") else None,
        repetition_penalty=p.repetition_penalty or 1.0,
        frequency_penalty=p.frequency_penalty,
        presence_penalty=p.presence_penalty,
        stop=tuple(p.stop),
        stop_token_ids=tuple(p.stop_token_ids),
        ignore_eos=p.ignore_eos,
        logprobs=p.logprobs if p.HasField("logprobs") else None,
    )


def params_to_proto(s: SamplingParams) -> pb.SamplingParams:
    return pb.SamplingParams(
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        min_p=s.min_p,
        seed=s.seed,
        repetition_penalty=s.repetition_penalty,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        stop=list(s.stop),
        stop_token_ids=list(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        logprobs=s.logprobs,
    )


def sample_to_proto(s: Sample) -> pb.SampledToken:
    return pb.SampledToken(
        token_id=s.token_id,
        logprob=s.logprob,
        top_logprobs=[pb.TokenLogprob(token_id=t, logprob=lp) for t, lp in s.top_logprobs],
    )


def sample_from_proto(t: pb.SampledToken) -> Sample:
    return Sample(
        token_id=t.token_id,
        logprob=t.logprob if t.HasField("logprob") else None,
        top_logprobs=tuple((x.token_id, x.logprob) for x in t.top_logprobs),
    )


def layout_to_proto(layout: KVLayout) -> pb.KVLayout:
    return pb.KVLayout(**layout.__dict__)


def layout_from_proto(p: pb.KVLayout) -> KVLayout:
    return KVLayout(
        num_layers=p.num_layers,
        num_kv_heads=p.num_kv_heads,
        head_dim=p.head_dim,
        block_size=p.block_size,
        dtype=p.dtype,
        block_bytes=p.block_bytes,
    )
