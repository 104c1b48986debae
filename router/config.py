"""The router's configuration (frozen, validated by pydantic)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Limits(BaseModel):
    """Token-bucket limits per minute; None means unlimited."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    input_tokens_per_min: int | None = Field(default=None, ge=1)
    output_tokens_per_min: int | None = Field(default=None, ge=1)
    requests_per_min: int | None = Field(default=None, ge=1)


class Tenant(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    limits: Limits = Limits()
    priority: int = Field(default=0, ge=0, le=3)
    """Higher tiers may wait longer in the admission queue before a 429."""


class RouterConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """The served model name (`/v1/models`); requests for another get 404."""
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: dict[str, str] = {}
    """Bearer key -> tenant name. Empty: no auth, every request is tenant 'default'."""
    tenants: dict[str, Tenant] = {"default": Tenant()}
    global_limits: Limits = Limits()
    redis_url: str | None = None
    """Share budgets between router replicas through Redis; None keeps them in-process."""
    max_body_bytes: int = 1 << 20
    max_n: int = 4
    max_stop: int = 4
    max_stop_chars: int = 64
    max_logprobs: int = 20
    max_queue_wait_s: float = 2.0
    """How long an over-budget request may wait for its budget before a 429 (per tier)."""
    max_waiting: int = 1024
    """Requests waiting for budget at once; more are refused (503) instead of queued."""
    max_queue_depth: int = 256
    """Decode-side waiting requests above which the cluster sheds load (503)."""
    max_kv_usage: float = 0.95
    short_prompt_tokens: int = 32
    """Prompts shorter than this are prefilled on the decode worker itself."""
    worker_cooldown_s: float = 5.0

    @model_validator(mode="after")
    def _tenants_exist(self) -> RouterConfig:
        missing = {t for t in self.api_keys.values() if t not in self.tenants}
        if missing:
            raise ValueError(f"api keys name unknown tenants: {sorted(missing)}")
        if not self.api_keys and "default" not in self.tenants:
            raise ValueError("without api keys every request is tenant 'default': define it")
        return self
