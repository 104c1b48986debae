"""A minimal client doing what the router will do: Prefill on P, then Generate on D."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from engine.sampling_params import SamplingParams
from proto.convert import params_to_proto
from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc


@dataclass
class Result:
    token_ids: list[int]
    text: str
    finish_reason: str
    prefill: pb.PrefillResponse


def run_disaggregated(
    p: rpc.PrefillWorkerStub,
    d: rpc.DecodeWorkerStub,
    request_id: str,
    prompt: list[int],
    params: SamplingParams,
) -> Result:
    wire = params_to_proto(params)
    first = p.Prefill(
        pb.PrefillRequest(request_id=request_id, prompt_token_ids=prompt, params=wire)
    )
    tokens, text = [first.first_token.token_id], first.text
    if first.finish_reason:
        return Result(tokens, text, first.finish_reason, first)
    reason = ""
    for chunk in generate_after(d, request_id, prompt, wire, first):
        tokens += [t.token_id for t in chunk.tokens]
        text += chunk.text
        reason = chunk.finish_reason or reason
    return Result(tokens, text, reason, first)


def generate_after(
    d: rpc.DecodeWorkerStub,
    request_id: str,
    prompt: list[int],
    wire: pb.SamplingParams,
    first: pb.PrefillResponse,
) -> Iterator[pb.TokenChunk]:
    """Open the decode stream that continues `first` (a PrefillResponse) on `d`."""
    return d.Generate(
        pb.GenerateRequest(
            request_id=request_id,
            prompt_token_ids=prompt,
            params=wire,
            first_token=first.first_token,
            kv=first.kv,
        )
    )
