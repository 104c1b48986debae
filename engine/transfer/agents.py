"""Choosing a KV agent: NIXL where it can be imported, the TCP stream otherwise.

Both satisfy `KVAgent`; workers hold one and never look at which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import torch

from engine.transfer.nixl_agent import NixlKVAgent, XferState, nixl_available
from engine.transfer.tcp_agent import TcpKVAgent

TransferBackend = Literal["auto", "nixl", "tcp"]


class KVAgent(Protocol):
    name: str

    @property
    def base_address(self) -> int: ...

    def metadata(self) -> bytes: ...

    def add_peer(self, metadata: bytes) -> str: ...

    def read(
        self,
        peer: str,
        remote_base: int,
        remote_blocks: Sequence[int],
        local_blocks: Sequence[int],
        notification: bytes,
    ) -> object: ...

    def state(self, handle: object) -> XferState: ...

    def release(self, handle: object) -> None: ...

    def send_notification(self, peer: str, message: bytes) -> None: ...

    def notifications(self) -> dict[str, list[bytes]]: ...

    def close(self) -> None: ...


def make_kv_agent(
    backend: TransferBackend, name: str, cache: torch.Tensor, host: str = "127.0.0.1"
) -> tuple[str, KVAgent]:
    """-> (the backend actually used, the agent)."""
    if backend == "auto":
        backend = "nixl" if nixl_available() else "tcp"
    if backend == "nixl":
        return "nixl", NixlKVAgent(name, cache)
    return "tcp", TcpKVAgent(name, cache, host)
