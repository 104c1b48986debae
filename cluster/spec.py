"""The cluster spec: one YAML file, validated by pydantic, frozen; CLI flags override.

Every default serves on one laptop-class machine (the default model on CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from engine.model_source import DEFAULT_MODEL


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PrefillSpec(_Frozen):
    replicas: int = Field(default=1, ge=0)
    tp: Literal[1] = 1
    """Tensor-parallel degree (only 1 until tensor parallelism lands)."""
    max_batch_tokens: int = Field(default=2048, ge=1)
    chunk: int = Field(default=512, ge=1)
    kv_cache_gb: float = Field(default=0.5, gt=0)
    num_cpus: float = Field(default=0.5, gt=0)
    """Ray CPU resources per worker (GPUs are requested when the node has them)."""


class DecodeSpec(_Frozen):
    replicas: int = Field(default=1, ge=0)
    tp: Literal[1] = 1
    max_num_seqs: int = Field(default=64, ge=1)
    kv_cache_gb: float = Field(default=0.5, gt=0)
    num_cpus: float = Field(default=0.5, gt=0)


class RouterSpec(_Frozen):
    host: str = "127.0.0.1"
    port: int = 8000
    redis_url: str | None = None


class TransferSpec(_Frozen):
    backend: Literal["auto", "nixl", "tcp"] = "auto"
    lease_s: float = Field(default=30.0, gt=0)


class ClusterSpec(_Frozen):
    model: str = DEFAULT_MODEL
    dtype: Literal["float32"] = "float32"
    """CPU workers run fp32 (fastest there); bf16 arrives with GPU workers."""
    prefill: PrefillSpec = PrefillSpec()
    decode: DecodeSpec = DecodeSpec()
    router: RouterSpec = RouterSpec()
    transfer: TransferSpec = TransferSpec()


def load_spec(path: str | Path | None) -> ClusterSpec:
    if path is None:
        return ClusterSpec()
    data = yaml.safe_load(Path(path).read_text()) or {}
    return ClusterSpec.model_validate(data)
