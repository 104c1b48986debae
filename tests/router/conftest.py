"""Router fixtures: a config over the session's real workers, a Redis server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from router.config import RouterConfig
from tests.router.servers import redis_server


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
def router_config(prefill, decode) -> Callable[..., RouterConfig]:
    def build(**overrides: object) -> RouterConfig:
        base = {
            "model": "smollm2-135m",
            "prefill": (prefill.address,),
            "decode": (decode.address,),
            "short_prompt_tokens": 8,
        }
        return RouterConfig(**{**base, **overrides})

    return build
