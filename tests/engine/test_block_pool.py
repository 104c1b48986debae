"""The block pool's bookkeeping: allocation, sharing, prefix hashes, LRU eviction."""

from __future__ import annotations

import pytest

from engine.block_pool import BlockPool, OutOfBlocks, chain_hash


def make_pool(num_blocks: int = 8) -> BlockPool:
    return BlockPool(num_blocks)


def test_allocate_and_free_conserve_blocks():
    pool = make_pool(8)
    a = pool.allocate(3)
    b = pool.allocate(5)
    assert len(set(a + b)) == 8 and pool.num_free == 0
    assert not pool.can_allocate(1)
    with pytest.raises(OutOfBlocks):
        pool.allocate(1)
    pool.free(a)
    assert pool.num_free == 3
    pool.free(b)
    pool.check_invariants()
    assert pool.num_in_use == 0


def test_double_free_is_refused():
    pool = make_pool()
    [b] = pool.allocate(1)
    pool.free([b])
    with pytest.raises(ValueError, match="double free"):
        pool.free([b])
    pool.check_invariants()


def test_shared_block_is_freed_only_by_its_last_owner():
    pool = make_pool()
    [b] = pool.allocate(1)
    pool.set_hash(b, chain_hash(None, range(16)))
    pool.share(b)
    assert pool.ref_count(b) == 2
    pool.free([b])
    assert pool.ref_count(b) == 1 and pool.num_in_use == 1
    pool.free([b])
    assert pool.num_cached == 1 and pool.num_in_use == 0
    pool.check_invariants()


def test_cached_block_is_found_by_hash_and_revived():
    pool = make_pool()
    h = chain_hash(None, range(16))
    [b] = pool.allocate(1)
    pool.set_hash(b, h)
    pool.free([b])
    assert pool.lookup(h) == b
    pool.share(b)  # a prefix-cache hit takes it back from the cached set
    assert pool.ref_count(b) == 1 and pool.num_cached == 0
    pool.free([b])
    pool.check_invariants()


def test_eviction_takes_least_recently_freed_cached_block_first():
    pool = make_pool(3)
    blocks = pool.allocate(3)
    hashes = [chain_hash(None, [i] * 16) for i in range(3)]
    for b, h in zip(blocks, hashes, strict=True):
        pool.set_hash(b, h)
        pool.free([b])  # freed in order: 0 is the oldest
    assert pool.num_free == 3 and pool.num_cached == 3
    [got] = pool.allocate(1)
    assert got == blocks[0]
    assert pool.lookup(hashes[0]) is None
    assert pool.lookup(hashes[1]) == blocks[1]
    pool.free([got])
    pool.check_invariants()


def test_chain_hash_covers_the_whole_prefix():
    first = chain_hash(None, range(16))
    assert chain_hash(first, range(16)) != chain_hash(None, range(16))
    assert chain_hash(first, range(16)) == chain_hash(chain_hash(None, range(16)), range(16))


def test_invariant_check_catches_a_leak():
    pool = make_pool(4)
    pool.allocate(2)
    pool._blocks[0].ref = 0  # simulate a bug: a block dropped without going back to a list
    with pytest.raises(AssertionError, match="leaked"):
        pool.check_invariants()
