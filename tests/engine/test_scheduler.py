"""Scheduler policy without a model: budgets, chunking, admission order, preemption."""

from __future__ import annotations

from engine.block_pool import BlockPool
from engine.detokenizer import IncrementalDetokenizer
from engine.sampler import Sample, SamplerState
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import SeqStatus, Sequence

TOKEN_BYTES = [bytes([i % 256]) for i in range(1000)]


def make_seq(rid: str, prompt_len: int, max_tokens: int = 8) -> Sequence:
    params = SamplingParams(max_tokens=max_tokens, temperature=0)
    prompt = list(range(1, prompt_len + 1))
    return Sequence(
        request_id=rid,
        prompt_ids=prompt,
        params=params,
        sampler=SamplerState.create(params, prompt),
        detokenizer=IncrementalDetokenizer(TOKEN_BYTES),
        stop_ids=frozenset(),
        max_model_len=4096,
    )


def make_scheduler(num_blocks: int = 64, **cfg: int) -> Scheduler:
    return Scheduler(SchedulerConfig(**cfg), BlockPool(num_blocks))


def run_step(s: Scheduler):
    plan = s.schedule()
    s.update(plan, [Sample(65) for _ in plan.sampled])
    return plan


def test_chunked_prefill_respects_chunk_and_budget():
    s = make_scheduler(max_batch_tokens=100, chunk_size=64)
    s.add(make_seq("a", 150))
    s.add(make_seq("b", 10))
    plan = s.schedule()
    # Step 1: a gets a 64-token chunk, b its whole 10-token prompt (74 <= 100).
    assert [(c.seq.request_id, c.start, c.end, c.samples) for c in plan.chunks] == [
        ("a", 0, 64, False),
        ("b", 0, 10, True),
    ]
    s.update(plan, [Sample(65)])
    # Step 2: b decodes first (1 token), then a continues with the next chunk.
    plan = s.schedule()
    assert [(c.seq.request_id, c.start, c.end) for c in plan.chunks] == [
        ("b", 10, 11),
        ("a", 64, 128),
    ]
    s.update(plan, [Sample(65)])
    while s.has_work():
        run_step(s)
    s.pool.check_invariants()
    assert s.pool.num_in_use == 0


def test_admission_is_first_come_first_served_and_capped():
    s = make_scheduler(max_num_seqs=2)
    for rid in "abc":
        s.add(make_seq(rid, 4))
    plan = s.schedule()
    assert [c.seq.request_id for c in plan.chunks] == ["a", "b"]
    assert [q.request_id for q in s.waiting] == ["c"]


def test_waiting_sequence_that_does_not_fit_blocks_admission():
    s = make_scheduler(num_blocks=4)
    s.add(make_seq("big", 100))  # needs 7 blocks: never fits
    s.add(make_seq("small", 4))
    plan = s.schedule()
    assert plan.chunks == ()
    assert [q.request_id for q in s.waiting] == ["big", "small"]


def test_preemption_frees_the_newest_and_requeues_it_first():
    # Two sequences of 16 tokens fill 2 of 3 blocks; decoding needs a block each.
    s = make_scheduler(num_blocks=3, max_batch_tokens=64)
    a, b = make_seq("a", 16, max_tokens=20), make_seq("b", 16, max_tokens=20)
    s.add(a)
    s.add(b)
    run_step(s)  # both prefill (2 blocks), each samples a token
    plan = run_step(s)  # a decodes into a 3rd block; b cannot grow: b is preempted
    assert [c.seq.request_id for c in plan.chunks] == ["a"]
    assert plan.preempted == (b,)
    assert b.status == SeqStatus.PREEMPTED and b.block_table == [] and b.num_computed == 0
    assert s.waiting[0] is b and s.num_preemptions == 1
    s.abort("a")
    s.abort("b")
    s.pool.check_invariants()
    assert s.pool.num_in_use == 0


def test_finished_sequences_free_their_blocks():
    s = make_scheduler()
    seq = make_seq("a", 20, max_tokens=3)
    s.add(seq)
    for _ in range(3):
        run_step(s)
    assert seq.status == SeqStatus.FINISHED_LENGTH
    assert not s.has_work() and s.pool.num_in_use == 0
