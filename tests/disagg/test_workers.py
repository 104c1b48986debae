"""Prefill and decode workers as real processes: concurrency, aborts at every stage,
lease expiry, prefix caching, bad requests. Each test ends with both workers' block
pools checked (invariants hold, no block in use)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

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

GREEDY = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)


@pytest.fixture
def stubs(prefill, decode):
    p, d = prefill_stub(prefill), decode_stub(decode)
    yield p, d
    assert_no_leaks(p.Stats)
    assert_no_leaks(d.Stats)


def test_32_concurrent_requests_complete_correctly(smol, make_engine, stubs):
    p, d = stubs
    lengths = [1 + (i * 37) % 300 for i in range(32)]
    prompts = [random_prompt(n, smol.args.vocab_size, seed=100 + i) for i, n in enumerate(lengths)]
    reference = make_engine(smol, kv_cache_gb=0.2).generate(prompts, GREEDY)
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(
            pool.map(
                lambda ip: run_disaggregated(p, d, f"c{ip[0]}", ip[1], GREEDY), enumerate(prompts)
            )
        )
    for got, ref in zip(results, reference, strict=True):
        assert got.token_ids == ref.token_ids


def test_abort_during_prefill_frees_blocks(smol, stubs):
    p, _ = stubs
    prompt = random_prompt(2000, smol.args.vocab_size, seed=5)  # 8 chunks of 256
    wire = params_to_proto(GREEDY)
    future = p.Prefill.future(
        pb.PrefillRequest(request_id="ab-p", prompt_token_ids=prompt, params=wire)
    )
    time.sleep(0.3)
    assert p.Abort(pb.AbortRequest(request_id="ab-p")).found
    with pytest.raises(grpc.RpcError) as err:
        future.result(timeout=30)
    assert err.value.code() == grpc.StatusCode.CANCELLED


def test_abort_during_decode_by_client_disconnect(smol, stubs):
    p, d = stubs
    prompt = random_prompt(50, smol.args.vocab_size, seed=6)
    long = SamplingParams(max_tokens=500, temperature=0, ignore_eos=True)
    wire = params_to_proto(long)
    first = p.Prefill(pb.PrefillRequest(request_id="ab-d", prompt_token_ids=prompt, params=wire))
    stream = generate_after(d, "ab-d", prompt, wire, first)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.cancel()  # the client goes away mid-stream; the worker must free everything
    s = d.Stats(pb.StatsRequest())
    assert s.running <= 1


def test_abort_right_after_generate_at_any_stage(smol, stubs):
    """Abort races the pull: waiting, transferring or decoding, nothing may leak."""
    p, d = stubs
    wire = params_to_proto(SamplingParams(max_tokens=200, temperature=0, ignore_eos=True))
    for i in range(6):
        prompt = random_prompt(300 + 50 * i, smol.args.vocab_size, seed=200 + i)
        rid = f"race-{i}"
        first = p.Prefill(pb.PrefillRequest(request_id=rid, prompt_token_ids=prompt, params=wire))
        stream = generate_after(d, rid, prompt, wire, first)
        threading.Timer(0.002 * i, lambda rid=rid: d.Abort(pb.AbortRequest(request_id=rid))).start()
        reasons = [c.finish_reason for c in stream if c.finish_reason]
        assert reasons in (["abort"], ["length"])


@pytest.fixture(scope="module")
def short_lease_prefill(cache_dir, smol) -> Iterator[WorkerProcess]:
    worker = start_worker("prefill", cache_dir, "--lease-s", "1")
    yield worker
    assert worker.stop() == 0


def test_kv_nobody_reads_is_freed_at_lease_expiry(smol, short_lease_prefill):
    p = prefill_stub(short_lease_prefill)
    prompt = random_prompt(100, smol.args.vocab_size, seed=8)
    first = p.Prefill(
        pb.PrefillRequest(
            request_id="lease", prompt_token_ids=prompt, params=params_to_proto(GREEDY)
        )
    )
    assert len(first.kv.block_ids) == 7 and first.kv.lease_ms == 1000
    held = p.Stats(pb.StatsRequest())
    assert held.used_blocks == 7 and held.leased_requests == 1
    time.sleep(1.5)  # no decode worker ever reads
    after = p.Stats(pb.StatsRequest())
    assert after.leased_requests == 0
    assert_no_leaks(p.Stats)


@pytest.fixture(scope="module")
def tiny_decode(cache_dir, smol) -> Iterator[WorkerProcess]:
    """A decode worker with room for 2 blocks: bigger prompts wait for blocks."""
    block_gb = 16 * smol.args.kv_bytes_per_token(4) / 1e9
    worker = start_worker("decode", cache_dir, "--kv-cache-gb", f"{2.5 * block_gb:.6f}")
    yield worker
    assert worker.stop() == 0


def test_abort_while_waiting_for_blocks_releases_the_prefill_side(smol, prefill, tiny_decode):
    p, d = prefill_stub(prefill), decode_stub(tiny_decode)
    prompt = random_prompt(100, smol.args.vocab_size, seed=9)  # 7 blocks: never fits in 2
    wire = params_to_proto(GREEDY)
    first = p.Prefill(pb.PrefillRequest(request_id="wait", prompt_token_ids=prompt, params=wire))
    stream = generate_after(d, "wait", prompt, wire, first)
    time.sleep(0.3)
    assert d.Stats(pb.StatsRequest()).queue_depth == 0  # the pull waits outside the queue
    assert p.Stats(pb.StatsRequest()).leased_requests >= 1
    assert d.Abort(pb.AbortRequest(request_id="wait")).found
    assert [c.finish_reason for c in stream if c.finish_reason] == ["abort"]
    assert_no_leaks(p.Stats)  # the decode worker told the prefill worker to let go
    assert_no_leaks(d.Stats)


def test_prefix_cache_hit_skips_recomputation_and_keeps_output(smol, stubs):
    p, d = stubs
    prompt = random_prompt(200, smol.args.vocab_size, seed=10)
    before = p.Stats(pb.StatsRequest()).prefix_cache_hit_tokens
    first = run_disaggregated(p, d, "pc-1", prompt, GREEDY)
    second = run_disaggregated(p, d, "pc-2", prompt, GREEDY)
    assert first.prefill.usage.cached_prompt_tokens == 0
    assert second.prefill.usage.cached_prompt_tokens == 192  # 12 full blocks; the rest recomputed
    assert p.Stats(pb.StatsRequest()).prefix_cache_hit_tokens - before == 192
    assert second.token_ids == first.token_ids


def _unknown_field(message: pb.PrefillRequest) -> bytes:
    return message.SerializeToString() + bytes([0xF8, 0x3F, 0x01])  # field 1023 = 1


@pytest.mark.parametrize(
    ("case", "prompt", "params"),
    [
        ("empty prompt", [], pb.SamplingParams(max_tokens=4)),
        ("prompt beyond context", [5] * 8200, pb.SamplingParams(max_tokens=4)),
        ("absurd max_tokens", [5, 6], pb.SamplingParams(max_tokens=4_000_000_000)),
        ("zero max_tokens", [5, 6], pb.SamplingParams(max_tokens=0)),
        ("token out of vocabulary", [5, 10**9], pb.SamplingParams(max_tokens=4)),
        ("negative temperature", [5], pb.SamplingParams(max_tokens=4, temperature=-1)),
        ("top_p above 1", [5], pb.SamplingParams(max_tokens=4, top_p=3)),
    ],
)
def test_bad_requests_get_invalid_argument_and_change_nothing(stubs, case, prompt, params):
    p, d = stubs
    request = pb.PrefillRequest(request_id=f"bad-{case}", prompt_token_ids=prompt, params=params)
    with pytest.raises(grpc.RpcError) as err:
        p.Prefill(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
    generate = pb.GenerateRequest(request_id=f"bad-{case}", prompt_token_ids=prompt, params=params)
    with pytest.raises(grpc.RpcError) as err:
        list(d.Generate(generate))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case


def test_unknown_fields_are_rejected(prefill):
    channel = grpc.insecure_channel(prefill.address)
    call = channel.unary_unary(
        "/pdserve.v1.PrefillWorker/Prefill",
        request_serializer=lambda raw: raw,
        response_deserializer=pb.PrefillResponse.FromString,
    )
    good = pb.PrefillRequest(
        request_id="u", prompt_token_ids=[5], params=pb.SamplingParams(max_tokens=1)
    )
    with pytest.raises(grpc.RpcError) as err:
        call(_unknown_field(good))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "fields" in err.value.details()
    assert_no_leaks(prefill_stub(prefill).Stats)


def test_health_reports_role_and_protocol(prefill, decode):
    hp = prefill_stub(prefill).Health(pb.HealthRequest())
    hd = decode_stub(decode).Health(pb.HealthRequest())
    assert (hp.role, hd.role) == ("prefill", "decode")
    assert hp.protocol_version == hd.protocol_version == 1
    assert hp.max_model_len == 8192
