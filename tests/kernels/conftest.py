"""Kernel tests run compiled on a GPU when there is one, else interpreted on CPU."""

from __future__ import annotations

import pytest
import torch

DTYPES = [torch.float32, torch.float16]


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-3, "rtol": 2e-3}
