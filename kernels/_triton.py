"""Triton import guard: the kernels' modules import fine where Triton is missing."""

from __future__ import annotations

import os
from collections.abc import Callable

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    HAVE_TRITON = False

    class _Missing:
        def __getattr__(self, name: str) -> object:
            raise ImportError("triton is not installed")

        @staticmethod
        def jit(fn: Callable[..., None]) -> Callable[..., None]:
            return fn

    triton = _Missing()  # type: ignore[assignment]
    tl = _Missing()  # type: ignore[assignment]


def interpreting() -> bool:
    """True when Triton runs kernels on CPU tensors in its interpreter."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


__all__ = ["HAVE_TRITON", "interpreting", "next_pow2", "tl", "triton"]
