"""Stop strings over streamed text: never emit text that might turn out to be a stop.

Text that could be the beginning of a stop string is held back until the next delta
decides it; when a stop string appears, everything from it on is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStringMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""

    def push(self, text: str) -> tuple[str, bool]:
        """-> (text safe to emit now, whether a stop string was reached)."""
        if not self._stops:
            return text, False
        pending = self._pending + text
        hits = [i for i in (pending.find(s) for s in self._stops) if i >= 0]
        if hits:
            self._pending = ""
            return pending[: min(hits)], True
        keep = self._held_back(pending)
        self._pending = pending[len(pending) - keep :]
        return pending[: len(pending) - keep], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out

    def _held_back(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop."""
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-n:]):
                    longest = n
                    break
        return longest
