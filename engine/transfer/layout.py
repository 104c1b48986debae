"""What both sides of a KV transfer must agree on, checked at the handshake."""

from __future__ import annotations

from dataclasses import dataclass

from engine.kv_cache import KVCacheSpec

PROTOCOL_VERSION = 1


class IncompatiblePeer(RuntimeError):
    """The other worker speaks another protocol version or lays KV out differently."""


@dataclass(frozen=True)
class KVLayout:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    block_bytes: int

    @classmethod
    def of(cls, spec: KVCacheSpec) -> KVLayout:
        return cls(
            num_layers=spec.num_layers,
            num_kv_heads=spec.num_kv_heads,
            head_dim=spec.head_dim,
            block_size=spec.block_size,
            dtype=str(spec.dtype).removeprefix("torch."),
            block_bytes=spec.bytes_per_block,
        )


def check_compatible(ours: KVLayout, theirs: KVLayout, their_version: int) -> None:
    if their_version != PROTOCOL_VERSION:
        raise IncompatiblePeer(
            f"peer speaks protocol v{their_version}, this worker v{PROTOCOL_VERSION}"
        )
    if ours != theirs:
        raise IncompatiblePeer(f"KV layouts differ: ours {ours}, theirs {theirs}")


def block_runs(remote: list[int], local: list[int]) -> list[tuple[int, int, int]]:
    """(remote start, local start, length) runs where both sides are consecutive: each run
    becomes one descriptor instead of one per block."""
    runs: list[tuple[int, int, int]] = []
    for r, lo in zip(remote, local, strict=True):
        if runs and runs[-1][0] + runs[-1][2] == r and runs[-1][1] + runs[-1][2] == lo:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((r, lo, 1))
    return runs
