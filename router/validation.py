"""From an HTTP body to a checked request: JSON, schema, deployment limits, context.

Each failure is an `APIError` with the status, type and param OpenAI clients expect.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from engine.sampling_params import SamplingParams
from router.config import RouterConfig
from router.errors import APIError, clip, invalid, model_not_found
from router.schemas import ChatCompletionRequest, CompletionRequest

B = TypeVar("B", bound=BaseModel)


def parse_body(raw: bytes, schema: type[B], config: RouterConfig) -> B:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("The request body is not valid UTF-8") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise invalid(f"The request body is not valid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise invalid("The request body must be a JSON object")
    try:
        body = schema.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        if err["type"] == "extra_forbidden":
            raise invalid(f"Unrecognized request argument supplied: {clip(param)}", param) from None
        raise invalid(f"Invalid value for '{param}': {err['msg']}", param) from None
    if getattr(body, "model", None) != config.model:
        raise model_not_found(getattr(body, "model", ""))
    return body


def check_limits(body: ChatCompletionRequest | CompletionRequest, config: RouterConfig) -> None:
    if body.n > config.max_n:
        raise invalid(f"n must be at most {config.max_n}", "n")
    stops = body.stops()
    if len(stops) > config.max_stop:
        raise invalid(f"At most {config.max_stop} stop sequences are allowed", "stop")
    for s in stops:
        if not s:
            raise invalid("Stop sequences must not be empty", "stop")
        if len(s) > config.max_stop_chars:
            raise invalid(
                f"Stop sequences are limited to {config.max_stop_chars} characters", "stop"
            )
    if isinstance(body, ChatCompletionRequest):
        if body.top_logprobs is not None and body.top_logprobs > config.max_logprobs:
            raise invalid(f"top_logprobs must be at most {config.max_logprobs}", "top_logprobs")
        if body.top_logprobs and not body.logprobs:
            raise invalid("top_logprobs requires logprobs to be true", "top_logprobs")
    else:
        if body.logprobs is not None and body.logprobs > config.max_logprobs:
            raise invalid(f"logprobs must be at most {config.max_logprobs}", "logprobs")
        if body.echo:
            raise invalid("echo is not supported", "echo")


def check_context(prompt_tokens: int, max_tokens: int, max_model_len: int, param: str) -> None:
    if prompt_tokens + max_tokens > max_model_len:
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            "invalid_request_error",
            param,
            "context_length_exceeded",
        )
    if prompt_tokens == 0:
        raise invalid("The prompt is empty", param)


def sampling_params(
    body: ChatCompletionRequest | CompletionRequest,
    max_tokens: int,
    logprobs: int | None,
    index: int,
) -> SamplingParams:
    """One choice's settings; choice i of a seeded request gets seed + i."""
    try:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            min_p=body.min_p,
            seed=None if body.seed is None else body.seed + index,
            repetition_penalty=body.repetition_penalty,
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
            stop=tuple(body.stops()),
            ignore_eos=body.ignore_eos,
            logprobs=logprobs,
        )
    except ValueError as e:
        raise invalid(str(e)) from None
