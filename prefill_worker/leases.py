"""Leases on handed-off KV: a prompt's blocks stay pinned until a decode worker has
pulled them (or says so), or until the lease runs out. Pure bookkeeping, no clock of its
own: callers pass `now`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Leases:
    duration_s: float
    _deadlines: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._deadlines

    def grant(self, request_id: str, now: float) -> None:
        self._deadlines[request_id] = now + self.duration_s

    def extend(self, request_ids: list[str], now: float) -> list[str]:
        """Heartbeat from a decode worker still pulling: -> the ids whose lease was live."""
        live = [r for r in request_ids if r in self._deadlines]
        for r in live:
            self._deadlines[r] = now + self.duration_s
        return live

    def end(self, request_id: str) -> bool:
        return self._deadlines.pop(request_id, None) is not None

    def expired(self, now: float) -> list[str]:
        """Remove and return the leases past their deadline."""
        gone = [r for r, t in self._deadlines.items() if t < now]
        for r in gone:
            del self._deadlines[r]
        return gone
