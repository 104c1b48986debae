"""A NIXL agent that owns one registered KV cache and pulls blocks from peers.

CPU specifics: the UCX backend runs without a progress thread (on 2 cores a progress
thread halves bandwidth), so both sides make progress only when polled: the puller polls
`state()`, the side being read polls `notifications()` from its loop. NIXL's own
metadata listener is not used (it binds 0.0.0.0); agent metadata travels in our gRPC
handshake as opaque bytes. Metadata is taken after the cache is registered.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Literal

import torch

from engine.transfer.layout import block_runs

XferState = Literal["PROC", "DONE", "ERR"]


def nixl_available() -> bool:
    try:
        import nixl._api  # noqa: F401
    except ImportError:
        return False
    return True


class NixlKVAgent:
    def __init__(self, name: str, cache: torch.Tensor) -> None:
        os.environ.setdefault("UCX_NET_DEVICES", "lo")  # before UCX initialises
        os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")  # its INFO lines go to stdout
        from nixl._api import nixl_agent, nixl_agent_config

        config = nixl_agent_config(enable_prog_thread=False, enable_listen_thread=False)
        self.name = name
        self._agent = nixl_agent(name, config)
        self._cache = cache
        self._block_bytes = cache[0].numel() * cache.element_size()
        self._reg = self._agent.register_memory(cache)
        self._mem = "VRAM" if cache.is_cuda else "DRAM"
        self._device = cache.device.index or 0
        self._peers: set[str] = set()

    @property
    def base_address(self) -> int:
        return self._cache.data_ptr()

    def metadata(self) -> bytes:
        return self._agent.get_agent_metadata()

    def add_peer(self, metadata: bytes) -> str:
        name = self._agent.add_remote_agent(metadata)
        name = name.decode() if isinstance(name, bytes) else name
        self._peers.add(name)
        return name

    def read(
        self,
        peer: str,
        remote_base: int,
        remote_blocks: Sequence[int],
        local_blocks: Sequence[int],
        notification: bytes,
    ) -> object:
        """Post a non-blocking READ of whole blocks; the peer gets `notification` when it
        completes. -> a handle for `state` and `release`."""
        bb = self._block_bytes
        runs = block_runs(list(remote_blocks), list(local_blocks))
        local = [(self.base_address + lo * bb, n * bb, self._device) for _, lo, n in runs]
        remote = [(remote_base + r * bb, n * bb, 0) for r, _, n in runs]
        handle = self._agent.initialize_xfer(
            "READ",
            self._agent.get_xfer_descs(local, self._mem),
            self._agent.get_xfer_descs(remote, "DRAM" if self._mem == "DRAM" else "VRAM"),
            peer,
            notification,
        )
        if self._agent.transfer(handle) == "ERR":
            self._agent.release_xfer_handle(handle)
            raise RuntimeError(f"NIXL refused the READ from {peer}")
        return handle

    def state(self, handle: object) -> XferState:
        return self._agent.check_xfer_state(handle)

    def release(self, handle: object) -> None:
        self._agent.release_xfer_handle(handle)

    def send_notification(self, peer: str, message: bytes) -> None:
        self._agent.send_notif(peer, message)

    def notifications(self) -> dict[str, list[bytes]]:
        """Messages peers attached to completed transfers; also drives UCX progress."""
        return self._agent.get_new_notifs()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._agent.deregister_memory(self._reg)
