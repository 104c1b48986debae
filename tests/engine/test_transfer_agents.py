"""One contract for both KV agents (NIXL over UCX, and the TCP fallback): pull blocks
by id into other blocks, deliver the notification, report errors."""

from __future__ import annotations

import time

import pytest
import torch

from engine.transfer.agents import make_kv_agent


def pump(agents, until, inbox: dict[str, list[bytes]], timeout: float = 10.0) -> None:
    """Poll every agent (no progress threads) until `until(inbox)` holds; notifications
    collected on the way land in `inbox` (they may arrive before the reader sees DONE)."""
    deadline = time.monotonic() + timeout
    while not until(inbox):
        for a in agents:
            for peer, msgs in a.notifications().items():
                inbox.setdefault(peer, []).extend(msgs)
        assert time.monotonic() < deadline, "transfer did not finish"
        time.sleep(0.001)


@pytest.fixture(params=["nixl", "tcp"])
def pair(request):
    src = torch.randn(12, 3, 2, 1024)  # 12 blocks of 24 KiB
    dst = torch.zeros(10, 3, 2, 1024)
    tag = f"{request.param}-{time.monotonic_ns()}"
    kind_a, a = make_kv_agent(request.param, f"src-{tag}", src)
    kind_b, b = make_kv_agent(request.param, f"dst-{tag}", dst)
    assert kind_a == kind_b == request.param
    yield a, b, src, dst
    a.close()
    b.close()


def test_pull_scattered_blocks_and_notify(pair):
    a, b, src, dst = pair
    peer = b.add_peer(a.metadata())
    remote, local = [7, 2, 3, 11], [0, 5, 6, 9]
    handle = b.read(peer, a.base_address, remote, local, b"release:req-1")
    inbox: dict[str, list[bytes]] = {}
    pump([a, b], lambda _: b.state(handle) != "PROC", inbox)
    assert b.state(handle) == "DONE"
    b.release(handle)
    for r, lo in zip(remote, local, strict=True):
        assert torch.equal(dst[lo], src[r])
    untouched = [i for i in range(10) if i not in local]
    assert dst[untouched].count_nonzero() == 0
    pump([a, b], lambda box: bool(box), inbox)
    assert inbox == {b.name: [b"release:req-1"]}


def test_notification_without_transfer(pair):
    a, b, _, _ = pair
    peer = b.add_peer(a.metadata())
    warm = b.read(peer, a.base_address, [0], [0], b"")  # connect first (UCX needs a path)
    inbox: dict[str, list[bytes]] = {}
    pump([a, b], lambda _: b.state(warm) != "PROC", inbox)
    b.release(warm)
    b.send_notification(peer, b"release:never-read")
    pump([a, b], lambda box: bool(box), inbox)
    assert inbox[b.name] == [b"release:never-read"]


def test_tcp_read_of_a_missing_block_fails_cleanly():
    src, dst = torch.randn(2, 256), torch.zeros(2, 256)
    _, a = make_kv_agent("tcp", "src-bad", src)
    _, b = make_kv_agent("tcp", "dst-bad", dst)
    handle = b.read(b.add_peer(a.metadata()), 0, [5], [0], b"")
    pump([a, b], lambda _: b.state(handle) != "PROC", {})
    assert b.state(handle) == "ERR"
    assert dst.count_nonzero() == 0
    a.close()
    b.close()
