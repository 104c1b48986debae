"""The KV block pool: a fixed set of block ids, handed out and reclaimed by reference count.

Every block is in exactly one of three states:

    free    ref == 0, no hash          -> on the free list, reusable at once
    cached  ref == 0, has a hash       -> holds a full prompt block another request may
                                          reuse (prefix cache); evicted LRU when the free
                                          list runs dry
    in use  ref >= 1                   -> owned by one or more sequences

Conservation law, checked by `check_invariants()` after every test scenario:
free + cached + in use == total.

Hashes are chained (a block's hash covers every token before it too), write-once, and
only given to full blocks. The pool imports no torch: it is pure bookkeeping.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass


class OutOfBlocks(RuntimeError):
    """Raised by `allocate` when asked for more blocks than can be reclaimed."""


@dataclass
class _Block:
    ref: int = 0
    hash: int | None = None


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be > 0, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._blocks = [_Block() for _ in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()  # LRU order, oldest first
        self._by_hash: dict[int, int] = {}

    # -- queries ---------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks that `allocate` can hand out now (free + evictable cached)."""
        return len(self._free) + len(self._cached)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_in_use(self) -> int:
        return self.num_blocks - self.num_free

    def usage(self) -> float:
        return self.num_in_use / self.num_blocks

    def can_allocate(self, n: int) -> bool:
        return n <= self.num_free

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref

    def lookup(self, block_hash: int) -> int | None:
        """The block holding this chained hash, if any (in use or cached)."""
        return self._by_hash.get(block_hash)

    def cached_hashes(self) -> list[int]:
        return list(self._by_hash)

    # -- changes ---------------------------------------------------------------------

    def allocate(self, n: int) -> list[int]:
        """n fresh blocks with ref 1; evicts least-recently-used cached blocks if needed."""
        if not self.can_allocate(n):
            raise OutOfBlocks(f"asked for {n} blocks, {self.num_free} free of {self.num_blocks}")
        out = []
        for _ in range(n):
            if self._free:
                bid = self._free.popleft()
            else:
                bid, _ = self._cached.popitem(last=False)
                self._forget_hash(bid)
            self._blocks[bid].ref = 1
            out.append(bid)
        return out

    def share(self, block_id: int) -> None:
        """Take one more reference on a block found by `lookup` (a prefix-cache hit)."""
        block = self._blocks[block_id]
        if block.ref == 0:
            if block_id not in self._cached:
                raise ValueError(f"block {block_id} is free, not cached: nothing to share")
            del self._cached[block_id]
        block.ref += 1

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference from each block; a block reaching 0 becomes free or cached.

        Blocks are released in reverse so a sequence's tail (least likely to be shared)
        is evicted first.
        """
        for bid in reversed(block_ids):
            block = self._blocks[bid]
            if block.ref <= 0:
                raise ValueError(f"double free of block {bid}")
            block.ref -= 1
            if block.ref == 0:
                if block.hash is None:
                    self._free.append(bid)
                else:
                    self._cached[bid] = None

    def set_hash(self, block_id: int, block_hash: int) -> None:
        """Publish a full block's chained hash so later prompts can reuse it."""
        block = self._blocks[block_id]
        if block.ref == 0:
            raise ValueError(f"block {block_id} is not in use")
        if block.hash is not None:
            if block.hash != block_hash:
                raise ValueError(f"block {block_id} already has a different hash")
            return
        if block_hash in self._by_hash:
            return  # another block already holds this content; keep the first
        block.hash = block_hash
        self._by_hash[block_hash] = block_id

    def _forget_hash(self, block_id: int) -> None:
        block = self._blocks[block_id]
        if block.hash is not None:
            del self._by_hash[block.hash]
            block.hash = None

    # -- self-check ------------------------------------------------------------------

    def invariant_error(self) -> str:
        """'' when the invariants hold, else what is broken (for reports over the wire)."""
        try:
            self.check_invariants()
        except AssertionError as e:
            return str(e)
        return ""

    def check_invariants(self) -> None:
        """free + cached + in use == total, and each block's state agrees with its lists."""
        free, cached = set(self._free), set(self._cached)
        in_use = {i for i, b in enumerate(self._blocks) if b.ref > 0}
        problems = []
        if len(free) != len(self._free):
            problems.append("a block is on the free list twice")
        if free & cached or free & in_use or cached & in_use:
            problems.append("a block is in two states at once")
        if len(free) + len(cached) + len(in_use) != self.num_blocks:
            lost = self.num_blocks - len(free) - len(cached) - len(in_use)
            problems.append(f"{lost} blocks leaked (free+cached+in use != total)")
        if any(self._blocks[b].hash is not None for b in free):
            problems.append("a free block still has a hash")
        if any(self._blocks[b].hash is None for b in cached):
            problems.append("a cached block has no hash")
        if any(self._by_hash[self._blocks[b].hash] != b for b in cached):  # type: ignore[index]
            problems.append("hash index disagrees with a cached block")
        if problems:
            raise AssertionError("block pool invariants broken: " + "; ".join(problems))


def chain_hash(parent: int | None, token_ids: Sequence[int]) -> int:
    """Hash of a full block given its parent block's hash: the whole prefix is covered.

    Unsigned 64-bit, and the same in every process (tuples of ints hash without the
    per-process salt that str and bytes get), so a router can compute it too.
    """
    return hash((parent, tuple(token_ids))) & 0xFFFF_FFFF_FFFF_FFFF
