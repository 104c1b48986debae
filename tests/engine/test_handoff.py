"""Scheduler and engine support for disaggregation, without processes: hand-off of a
prompt's blocks, KV arriving from elsewhere, and the fallbacks."""

from __future__ import annotations

from engine.sampling_params import SamplingParams
from engine.sequence import SeqStatus
from engine.transfer.layout import block_runs
from prefill_worker.leases import Leases
from tests.factories import random_prompt

GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)


def test_hand_off_holds_blocks_until_released(smol, make_engine):
    engine = make_engine(smol)
    prompt = random_prompt(40, 1000, seed=1)
    rid = engine.add_request(prompt, GREEDY, hand_off=True)
    outs = engine.step()
    assert len(outs) == 1 and outs[0].handed_off is not None
    assert len(outs[0].handed_off) == 3  # 40 tokens -> 3 blocks
    assert not engine.has_unfinished()  # nothing left to compute here
    assert engine.pool.num_in_use == 3
    assert engine.scheduler.handed_off[rid].status == SeqStatus.HANDED_OFF
    assert engine.release_handed_off(rid)
    assert not engine.release_handed_off(rid)


def test_kv_copied_between_engines_continues_losslessly(smol, make_engine):
    """The data path in one process: P's blocks copied into D's blocks by hand."""
    prefill, decode = make_engine(smol), make_engine(smol)
    prompt = random_prompt(70, smol.args.vocab_size, seed=2)
    [reference] = make_engine(smol).generate([prompt], GREEDY)
    # 1. Prefill and hand off.
    rid = prefill.add_request(prompt, GREEDY, hand_off=True)
    [first] = prefill.step()
    # 2. Decode reserves blocks, "transfers" them, and is told the KV arrived.
    blocks = decode.add_prefilled(prompt, GREEDY, first.samples[0], rid)
    assert blocks is not None
    assert decode.scheduler.waiting_for_kv[rid].status == SeqStatus.WAITING_FOR_KV
    decode.kv.data[blocks] = prefill.kv.data[list(first.handed_off)]
    prefill.release_handed_off(rid)
    decode.kv_arrived(rid)
    # 3. Decode continues; the output equals the single-engine run.
    tokens = [first.samples[0].token_id]
    while decode.has_unfinished():
        tokens += [s.token_id for o in decode.step() for s in o.samples]
    assert tokens == reference.token_ids


def test_failed_pull_falls_back_to_recompute(smol, make_engine):
    engine = make_engine(smol)
    prompt = random_prompt(33, smol.args.vocab_size, seed=3)
    [reference] = make_engine(smol).generate([prompt], GREEDY)
    first = reference.samples[0]
    assert engine.add_prefilled(prompt, GREEDY, first, "r") is not None
    engine.kv_failed("r")  # the blocks hold garbage: recompute prompt + first token
    tokens = [first.token_id]
    while engine.has_unfinished():
        tokens += [s.token_id for o in engine.step() for s in o.samples]
    assert tokens == reference.token_ids


def test_no_room_for_remote_kv_allocates_nothing(smol, make_engine):
    block_gb = 16 * smol.args.kv_bytes_per_token(4) / 1e9
    engine = make_engine(smol, kv_cache_gb=2 * block_gb)
    first = make_engine(smol).generate([[5, 6]], GREEDY)[0].samples[0]
    assert engine.add_prefilled(random_prompt(100, 1000, 4), GREEDY, first, "big") is None
    assert engine.pool.num_in_use == 0 and not engine.scheduler.waiting_for_kv


def test_leases_grant_extend_expire():
    leases = Leases(duration_s=10)
    leases.grant("a", now=0)
    leases.grant("b", now=5)
    assert leases.extend(["a", "zzz"], now=8) == ["a"]  # a now lives until 18
    assert leases.expired(now=16) == ["b"]
    assert "a" in leases and len(leases) == 1
    assert leases.end("a") and not leases.end("a")


def test_block_runs_merge_only_when_both_sides_are_consecutive():
    assert block_runs([4, 5, 6, 9], [0, 1, 2, 3]) == [(4, 0, 3), (9, 3, 1)]
    assert block_runs([4, 5], [0, 7]) == [(4, 0, 1), (5, 7, 1)]
    assert block_runs([], []) == []
