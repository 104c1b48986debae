"""Incremental detokenisation that only ever emits complete UTF-8 text.

Byte-level BPE tokens are byte strings; one character may be split across several
tokens (an emoji is often two or three). We keep a UTF-8 incremental decoder over the
concatenated bytes: bytes of an unfinished character wait inside it, so a delta never
carries half a character, and invalid bytes become U+FFFD only once they are known to
be invalid.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class IncrementalDetokenizer:
    def __init__(
        self, token_bytes: Sequence[bytes], skip_ids: frozenset[int] = frozenset()
    ) -> None:
        self._token_bytes = token_bytes
        self._skip = skip_ids
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text completed by this token (often '', never a partial character)."""
        if token_id in self._skip:
            return ""
        return self._utf8.decode(self._token_bytes[token_id])

    def flush(self) -> str:
        """At the end of a sequence: whatever bytes are left, U+FFFD if incomplete."""
        return self._utf8.decode(b"", final=True)


def decode_all(token_bytes: Sequence[bytes], ids: Sequence[int], skip: frozenset[int]) -> str:
    return b"".join(token_bytes[i] for i in ids if i not in skip).decode("utf-8", "replace")
