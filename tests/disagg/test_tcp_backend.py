"""The TCP-stream transfer backend through real worker processes: same lossless output,
no leaks; a decode worker refuses a prefill worker on another backend."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from engine.sampling_params import SamplingParams
from proto.convert import params_to_proto
from proto.v1 import pdserve_pb2 as pb
from tests.disagg.client import generate_after, run_disaggregated
from tests.disagg.cluster import (
    WorkerProcess,
    assert_no_leaks,
    decode_stub,
    prefill_stub,
    start_worker,
)
from tests.factories import random_prompt


@pytest.fixture(scope="module")
def tcp_workers(cache_dir, smol) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    p = start_worker("prefill", cache_dir, "--transfer", "tcp")
    d = start_worker("decode", cache_dir, "--transfer", "tcp")
    yield p, d
    assert p.stop() == 0 and d.stop() == 0


def test_tcp_transfer_is_lossless(smol, make_engine, tcp_workers):
    p, d = prefill_stub(tcp_workers[0]), decode_stub(tcp_workers[1])
    prompts = [random_prompt(n, smol.args.vocab_size, seed=n) for n in (1, 16, 17, 300)]
    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    reference = make_engine(smol, kv_cache_gb=0.1).generate(prompts, params)
    for i, (prompt, ref) in enumerate(zip(prompts, reference, strict=True)):
        got = run_disaggregated(p, d, f"tcp-{i}", prompt, params)
        assert got.prefill.kv.block_ids
        assert got.token_ids == ref.token_ids
    assert_no_leaks(p.Stats)
    assert_no_leaks(d.Stats)


def test_backends_must_match_at_handshake(smol, tcp_workers, decode):
    p = prefill_stub(tcp_workers[0])
    prompt = random_prompt(40, smol.args.vocab_size, seed=1)
    wire = params_to_proto(SamplingParams(max_tokens=4, temperature=0))
    first = p.Prefill(pb.PrefillRequest(request_id="mix", prompt_token_ids=prompt, params=wire))
    nixl_decode = decode_stub(decode)  # the session's decode worker runs NIXL
    with pytest.raises(grpc.RpcError) as err:
        list(generate_after(nixl_decode, "mix", prompt, wire, first))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "tcp" in err.value.details()
    assert p.ReleaseKV(pb.ReleaseKVRequest(request_id="mix")).released
    assert_no_leaks(p.Stats)
    assert_no_leaks(nixl_decode.Stats)
