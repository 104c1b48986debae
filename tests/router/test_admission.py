"""Admission policy, token-bucket arithmetic, and one contract suite for both stores."""

from __future__ import annotations

import asyncio

import pytest

from router.admission import Admit, Ask, ClusterLoad, Queue, Reject, after_budget, claims_for, plan
from router.buckets import Bucket, Claim, give_back, take
from router.budget_store import MemoryStore, RedisStore
from router.config import Limits, RouterConfig, Tenant
from router.routing import Cooldowns, WorkerLoad, pick_decode, pick_prefill, prompt_block_hashes

LOAD = ClusterLoad(prefill_workers=1, decode_workers=1, decode_queue_depth=0, decode_kv_usage=0.1)


def config(**kw: object) -> RouterConfig:
    tenants = {
        "default": Tenant(
            limits=Limits(input_tokens_per_min=1000, output_tokens_per_min=600, requests_per_min=10)
        ),
        "gold": Tenant(priority=2),
    }
    return RouterConfig(model="m", tenants=tenants, **kw)


def ask(inp: int = 100, out: int = 50, tenant: str = "default", priority: int = 0) -> Ask:
    return Ask(tenant, inp, out, priority)


def test_claims_cover_tenant_then_global_in_tokens_and_requests():
    cfg = config(global_limits=Limits(output_tokens_per_min=6000))
    keys = [(c.key, c.amount, c.capacity) for c in claims_for(ask(), cfg)]
    assert keys == [
        ("tenant:default:input_tokens", 100, 1000),
        ("tenant:default:output_tokens", 50, 600),
        ("tenant:default:requests", 1, 10),
        ("global:output_tokens", 50, 6000),
    ]


@pytest.mark.parametrize(
    ("load", "reason"),
    [
        (ClusterLoad(0, 1, 0, 0.0), "no_workers"),
        (ClusterLoad(1, 1, 10_000, 0.0), "queue_full"),
        (ClusterLoad(1, 1, 0, 0.99), "kv_pressure"),
    ],
)
def test_load_is_shed_with_503_before_budgets(load, reason):
    d = plan(ask(), load, config())
    assert isinstance(d, Reject) and d.reason == reason and d.status == 503


def test_a_request_bigger_than_the_bucket_is_refused_at_once():
    d = plan(ask(out=601), LOAD, config())
    assert isinstance(d, Reject) and d.status == 429 and d.reason == "exceeds_limit"


def test_over_budget_queues_when_the_wait_is_short_else_429():
    cfg = config(max_queue_wait_s=2.0)
    admit = plan(ask(), LOAD, cfg)
    assert isinstance(admit, Admit)
    assert after_budget(True, 0.0, 0.0, ask(), admit, cfg) == admit
    assert after_budget(False, 1.5, 0.0, ask(), admit, cfg) == Queue(1.5)
    late = after_budget(False, 1.5, 1.0, ask(), admit, cfg)
    assert isinstance(late, Reject) and late.status == 429 and late.retry_after_s == 1.5
    # A higher tier may wait longer: 2 s x (1 + priority 2) = 6 s.
    assert after_budget(False, 5.0, 0.0, ask(tenant="gold", priority=2), admit, cfg) == Queue(5.0)


def test_bucket_take_is_all_or_nothing_and_refills():
    a, b = Claim("a", 10, 100, 1.0), Claim("b", 60, 50, 10.0)
    ok, states, retry = take([None, None], [a, b], now=0)
    assert not ok and retry == pytest.approx(1.0)  # b needs 10 more units at 10/s
    assert states[0].level == 100  # nothing taken from a
    ok, states, _ = take([None, Bucket(50, 0)], [a, Claim("b", 60, 100, 10.0)], now=1)
    assert ok and states[0].level == 90 and states[1].level == 0
    assert give_back(Bucket(95, 0), a, now=0).level == 100  # never above capacity


@pytest.fixture(params=["memory", "redis"])
def store(request, redis_url):
    if request.param == "memory":
        return MemoryStore()
    return RedisStore(redis_url)


def _run(coro):
    return asyncio.run(coro)


def test_store_contract_reserve_refund_refill(store, request):
    key = f"contract-{request.node.callspec.id}"
    claim = Claim(key, 40, 100, 10.0)  # 100 per 10 s

    async def scenario() -> None:
        assert await store.reserve([claim], now=1000.0) == (True, 0.0)
        assert await store.reserve([claim], now=1000.0) == (True, 0.0)
        ok, retry = await store.reserve([claim], now=1000.0)  # 20 left, 40 asked
        assert not ok and retry == pytest.approx(2.0)
        assert await store.level(claim, now=1000.0) == pytest.approx(20)
        await store.refund([Claim(key, 30, 100, 10.0)], now=1000.0)  # unused output back
        assert await store.level(claim, now=1000.0) == pytest.approx(50)
        assert (await store.reserve([claim], now=1001.0))[0]  # 60 after 1 s of refill
        assert await store.level(claim, now=1001.0) == pytest.approx(20)
        await store.close()

    _run(scenario())


def test_store_contract_multi_bucket_is_atomic(store, request):
    tag = request.node.callspec.id
    small = Claim(f"atomic-small-{tag}", 5, 5, 0.001)
    big = Claim(f"atomic-big-{tag}", 50, 100, 0.001)

    async def scenario() -> None:
        assert (await store.reserve([small, big], now=0.0))[0]
        ok, _ = await store.reserve([small, big], now=0.0)  # small is empty now
        assert not ok
        assert await store.level(big, now=0.0) == pytest.approx(50)  # big untouched
        await store.close()

    _run(scenario())


def test_routing_prefers_prefix_affinity_then_load():
    prompt = list(range(64))
    hashes = prompt_block_hashes(prompt)
    assert len(hashes) == 4
    cold = WorkerLoad("cold:1", outstanding_prefill_tokens=0)
    warm = WorkerLoad("warm:1", outstanding_prefill_tokens=500, prefix_hashes=frozenset(hashes[:3]))
    cool = Cooldowns(5.0)
    assert pick_prefill([cold, warm], hashes, cool, now=0) == "warm:1"
    assert pick_prefill([cold, warm], [], cool, now=0) == "cold:1"
    cool.mark("warm:1", now=0)
    assert pick_prefill([cold, warm], hashes, cool, now=1) == "cold:1"  # cooling down
    assert pick_prefill([warm], hashes, cool, now=1) == "warm:1"  # nothing else left
    assert pick_prefill([WorkerLoad("down", healthy=False)], hashes, cool, now=1) is None


def test_routing_decode_by_free_blocks_then_batch():
    a = WorkerLoad("a", free_blocks=100, running=10)
    b = WorkerLoad("b", free_blocks=100, running=2)
    c = WorkerLoad("c", free_blocks=50, running=0)
    assert pick_decode([a, b, c], Cooldowns(5), now=0) == "b"


def test_admission_queue_is_bounded_and_waits_then_admits():
    from router.budget_store import MemoryStore
    from router.errors import APIError
    from router.service import Router

    class Pool:  # only what Router.admit reads
        def cluster_load(self) -> ClusterLoad:
            return LOAD

    limits = Limits(requests_per_min=60)  # one request per second
    cfg = RouterConfig(
        model="m", tenants={"default": Tenant(limits=limits)}, max_queue_wait_s=2.0, max_waiting=1
    )
    router = Router(cfg, Pool(), MemoryStore())  # type: ignore[arg-type]

    async def scenario() -> None:
        for _ in range(60):  # drain the bucket
            await router.admit(ask())
        waiting = asyncio.create_task(router.admit(ask()))  # waits ~1 s for a token
        await asyncio.sleep(0.1)
        assert router.waiting == 1
        with pytest.raises(APIError) as err:  # the queue (size 1) is full
            await router.admit(ask())
        assert err.value.status == 503
        assert isinstance(await waiting, Admit)
        assert router.waiting == 0

    asyncio.run(scenario())
