"""Typed errors a caller can map to a clear response (HTTP 400, gRPC INVALID_ARGUMENT)."""

from __future__ import annotations


class InvalidRequest(ValueError):
    """The request can never be served as given; nothing was allocated for it."""

    code = "invalid_request"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.max_model_len = max_model_len
        super().__init__(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, "
            f"{max_tokens} for the completion). Please reduce the prompt or max_tokens."
        )


class EmptyPrompt(InvalidRequest):
    code = "empty_prompt"

    def __init__(self) -> None:
        super().__init__("the prompt is empty: at least one token is needed")


class TokenOutOfRange(InvalidRequest):
    code = "invalid_token_id"

    def __init__(self, token_id: int, vocab_size: int) -> None:
        super().__init__(f"token id {token_id} is outside the vocabulary [0, {vocab_size})")
