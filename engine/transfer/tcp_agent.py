"""A TCP-stream KV agent: the fallback where NIXL cannot be imported.

Same contract as `NixlKVAgent` (metadata, add_peer, read -> handle, state, release,
notifications, send_notification), so workers and tests do not care which one runs.

Wire format, one message per connection, no pickle:

    request   4-byte big-endian length | JSON header
              {"op": "read", "from": name, "blocks": [...], "notify": "<latin-1>"}
              {"op": "notify", "from": name, "notify": "<latin-1>"}
    response  (read only) the blocks' raw bytes, in order, then the connection closes

The serving side answers from a thread, reading straight out of the registered cache
tensor; a read's notification is delivered once all its bytes are sent. The reading
side runs each read in a thread (non-blocking for the engine loop) and receives into
its cache blocks in place. Metadata is "host:port" of the agent's server, which binds
the worker's own address (loopback by default).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from engine.transfer.nixl_agent import XferState

_LEN = struct.Struct(">I")


def _send_msg(sock: socket.socket, header: dict) -> None:
    raw = json.dumps(header).encode()
    sock.sendall(_LEN.pack(len(raw)) + raw)


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    while view:
        n = sock.recv_into(view)
        if n == 0:
            raise ConnectionError("peer closed the connection mid-transfer")
        view = view[n:]


def _recv_msg(sock: socket.socket) -> dict:
    head = bytearray(_LEN.size)
    _recv_exact(sock, memoryview(head))
    body = bytearray(_LEN.unpack(head)[0])
    _recv_exact(sock, memoryview(body))
    return json.loads(body)


class TcpKVAgent:
    def __init__(self, name: str, cache: torch.Tensor, host: str = "127.0.0.1") -> None:
        if cache.device.type != "cpu" or not cache.is_contiguous():
            raise ValueError("the TCP agent serves a contiguous CPU cache")
        self.name = name
        self._cache = cache
        self._blocks = cache.view(cache.shape[0], -1).view(torch.uint8)  # (NB, block bytes)
        self._server = socket.create_server((host, 0))
        self._address = f"{host}:{self._server.getsockname()[1]}"
        self._peers: dict[str, str] = {}
        self._inbox: dict[str, list[bytes]] = defaultdict(list)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"{name}-tcp")
        self._closed = False
        threading.Thread(target=self._serve, name=f"{name}-tcp-server", daemon=True).start()

    # -- the NixlKVAgent contract ----------------------------------------------------

    @property
    def base_address(self) -> int:
        return 0  # blocks are addressed by id on the wire, not by address

    def metadata(self) -> bytes:
        return f"tcp:{self.name}@{self._address}".encode()

    def add_peer(self, metadata: bytes) -> str:
        kind, _, rest = metadata.decode().partition(":")
        name, _, address = rest.partition("@")
        if kind != "tcp" or not name or not address:
            raise ValueError("not TCP agent metadata")
        self._peers[name] = address
        return name

    def read(
        self,
        peer: str,
        remote_base: int,
        remote_blocks: Sequence[int],
        local_blocks: Sequence[int],
        notification: bytes,
    ) -> Future[None]:
        return self._pool.submit(
            self._read, self._peers[peer], list(remote_blocks), list(local_blocks), notification
        )

    def state(self, handle: object) -> XferState:
        assert isinstance(handle, Future)
        if not handle.done():
            return "PROC"
        return "ERR" if handle.exception() is not None else "DONE"

    def release(self, handle: object) -> None:
        return None

    def send_notification(self, peer: str, message: bytes) -> None:
        host, port = self._peers[peer].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            _send_msg(
                sock, {"op": "notify", "from": self.name, "notify": message.decode("latin-1")}
            )

    def notifications(self) -> dict[str, list[bytes]]:
        with self._lock:
            out = dict(self._inbox)
            self._inbox.clear()
        return out

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self._pool.shutdown(wait=False)

    # -- both sides ------------------------------------------------------------------

    def _read(self, address: str, remote: list[int], local: list[int], notify: bytes) -> None:
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            header = {
                "op": "read",
                "from": self.name,
                "blocks": remote,
                "notify": notify.decode("latin-1"),
            }
            _send_msg(sock, header)
            for block in local:
                _recv_exact(sock, memoryview(self._blocks[block].numpy()))

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                msg = _recv_msg(conn)
                if msg["op"] == "read":
                    for block in msg["blocks"]:
                        conn.sendall(memoryview(self._blocks[int(block)].numpy()))
                if msg.get("notify"):
                    with self._lock:
                        self._inbox[msg["from"]].append(msg["notify"].encode("latin-1"))
            except (OSError, ValueError, KeyError, IndexError):
                return  # a broken or malformed request only ends its own connection
