"""One forward step's inputs, built once per step and read by every layer (plan, then run).

A step mixes single decode tokens and prefill chunks from sequences of any length. The
batch's token rows are ordered decodes first, then each prefill chunk:

    rows: [d0 d1 ... d(B-1) | p0 p0 p0 ... | p1 p1 ... ]
           one token each     chunk of seq p0  chunk of seq p1

Every token knows its position and its slot (block, offset) in the paged cache;
attention reads earlier tokens only through each sequence's block table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.kv_cache import KVCache


@dataclass(frozen=True)
class SeqChunk:
    """The tokens one sequence feeds this step: positions start .. start+len-1."""

    token_ids: Sequence[int]
    start: int
    """Tokens already in the cache before this chunk (0 for a fresh prompt)."""
    block_table: Sequence[int]
    """Blocks covering at least start + len(token_ids) tokens."""
    want_logits: bool = True
    """False for a prefill chunk that does not reach the prompt's end."""

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)


@dataclass(frozen=True)
class PrefillSpan:
    """A chunk of more than one query token, attended to on its own."""

    row_start: int
    num_tokens: int
    tile_rows: torch.Tensor
    """(2, H_kv, nb) tile rows of this sequence's blocks, layer 0."""
    mask: torch.Tensor
    """(num_tokens, nb*16) bool: True where query i may attend key j (causal)."""


@dataclass(frozen=True)
class KernelPlan:
    """The same step described the way the Triton kernels read it (int32 tensors)."""

    decode_block_tables: torch.Tensor  # (B, nb_max), padded with block 0
    decode_context_lens: torch.Tensor  # (B,) tokens each decode row attends to
    prefill_block_tables: torch.Tensor  # (S, nb_max)
    prefill_q_starts: torch.Tensor  # (S,) first row of each chunk, counted from row B
    prefill_q_lens: torch.Tensor  # (S,)
    prefill_starts: torch.Tensor  # (S,) tokens cached before each chunk

    def to(self, device: torch.device | str) -> KernelPlan:
        return KernelPlan(*(t.to(device) for t in self.__dict__.values()))


@dataclass(frozen=True)
class AttentionPlan:
    num_decode: int
    decode_tile_rows: torch.Tensor
    """(2, B, H_kv, nb_max) tile rows for the decode sequences, padded with block 0."""
    decode_bias: torch.Tensor
    """(B, 1, 1, nb_max*16) additive mask: 0 for real keys, -inf past each context."""
    prefills: tuple[PrefillSpan, ...]
    kernel: KernelPlan


@dataclass(frozen=True)
class ForwardBatch:
    token_ids: torch.Tensor  # (N,) int64
    positions: torch.Tensor  # (N,) int64
    slot_blocks: torch.Tensor  # (N,) int64: the block each token's K/V goes to
    slot_offsets: torch.Tensor  # (N,) int64: its offset inside that block
    logits_rows: torch.Tensor  # (S,) rows whose next-token logits are wanted
    attention: AttentionPlan

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])


def build_batch(chunks: Sequence[SeqChunk], kv: KVCache) -> ForwardBatch:
    """Chunks must list every single-token chunk before the multi-token ones."""
    bs = kv.spec.block_size
    n_single = sum(len(c.token_ids) == 1 for c in chunks)
    decodes, prefills = chunks[:n_single], chunks[n_single:]
    if any(len(c.token_ids) == 1 for c in prefills):
        raise ValueError("single-token chunks must come before prefill chunks")
    for c in chunks:
        if not c.token_ids:
            raise ValueError("a chunk needs at least one token")
        if len(c.block_table) * bs < c.end:
            raise ValueError(f"block table covers {len(c.block_table) * bs} < {c.end} tokens")

    token_ids: list[int] = []
    positions: list[int] = []
    blocks: list[int] = []
    offsets: list[int] = []
    logits_rows: list[int] = []
    for c in chunks:
        for pos in range(c.start, c.end):
            positions.append(pos)
            blocks.append(c.block_table[pos // bs])
            offsets.append(pos % bs)
        token_ids.extend(c.token_ids)
        if c.want_logits:
            logits_rows.append(len(token_ids) - 1)

    plan = AttentionPlan(
        num_decode=len(decodes),
        prefills=_prefill_spans(prefills, len(decodes), kv),
        kernel=_kernel_plan(decodes, prefills, bs),
        **_decode_plan(decodes, kv),
    )
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return ForwardBatch(
        token_ids=as_long(token_ids),
        positions=as_long(positions),
        slot_blocks=as_long(blocks),
        slot_offsets=as_long(offsets),
        logits_rows=as_long(logits_rows),
        attention=plan,
    )


def _decode_plan(decodes: Sequence[SeqChunk], kv: KVCache) -> dict[str, torch.Tensor]:
    bs = kv.spec.block_size
    if not decodes:
        return {
            "decode_tile_rows": torch.zeros((2, 0, kv.spec.num_kv_heads, 0), dtype=torch.long),
            "decode_bias": torch.zeros((0, 1, 1, 0)),
        }
    nb_max = max(-(-c.end // bs) for c in decodes)
    tables = torch.zeros((len(decodes), nb_max), dtype=torch.long)
    for i, c in enumerate(decodes):
        nb = -(-c.end // bs)
        tables[i, :nb] = torch.tensor(c.block_table[:nb], dtype=torch.long)
    ends = torch.tensor([c.end for c in decodes]).view(-1, 1)
    key_pos = torch.arange(nb_max * bs).view(1, -1)
    bias = torch.zeros((len(decodes), nb_max * bs), dtype=kv.spec.dtype)
    bias.masked_fill_(key_pos >= ends, float("-inf"))
    return {
        "decode_tile_rows": kv.tile_rows(tables),
        "decode_bias": bias.view(len(decodes), 1, 1, -1),
    }


def _prefill_spans(
    prefills: Sequence[SeqChunk], row_start: int, kv: KVCache
) -> tuple[PrefillSpan, ...]:
    bs = kv.spec.block_size
    spans = []
    for c in prefills:
        nb = -(-c.end // bs)
        table = torch.tensor(c.block_table[:nb], dtype=torch.long)
        q_pos = torch.arange(c.start, c.end).view(-1, 1)
        k_pos = torch.arange(nb * bs).view(1, -1)
        spans.append(
            PrefillSpan(
                row_start=row_start,
                num_tokens=len(c.token_ids),
                tile_rows=kv.tile_rows(table),
                mask=k_pos <= q_pos,
            )
        )
        row_start += len(c.token_ids)
    return tuple(spans)


def _padded_tables(chunks: Sequence[SeqChunk], bs: int) -> torch.Tensor:
    nb_max = max((-(-c.end // bs) for c in chunks), default=0)
    tables = torch.zeros((len(chunks), nb_max), dtype=torch.int32)
    for i, c in enumerate(chunks):
        nb = -(-c.end // bs)
        tables[i, :nb] = torch.tensor(c.block_table[:nb], dtype=torch.int32)
    return tables


def _kernel_plan(decodes: Sequence[SeqChunk], prefills: Sequence[SeqChunk], bs: int) -> KernelPlan:
    as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
    q_lens = [len(c.token_ids) for c in prefills]
    return KernelPlan(
        decode_block_tables=_padded_tables(decodes, bs),
        decode_context_lens=as_i32([c.end for c in decodes]),
        prefill_block_tables=_padded_tables(prefills, bs),
        prefill_q_starts=as_i32([sum(q_lens[:i]) for i in range(len(q_lens))]),
        prefill_q_lens=as_i32(q_lens),
        prefill_starts=as_i32([c.start for c in prefills]),
    )
