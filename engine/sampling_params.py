"""Per-request sampling settings, validated once at construction."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    """Tokens to generate at most (the finish reason is then 'length')."""
    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    min_p: float = 0.0
    seed: int | None = None
    """Same seed, same prompt, same settings -> same tokens."""
    repetition_penalty: float = 1.0
    """HF-style: divides positive / multiplies negative logits of seen tokens (> 1 discourages)."""
    frequency_penalty: float = 0.0
    """OpenAI-style: minus penalty x count of the token in the output so far."""
    presence_penalty: float = 0.0
    """OpenAI-style: minus penalty once the token has appeared in the output."""
    stop: tuple[str, ...] = ()
    """Strings that end generation; they are not part of the returned text."""
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None
    """None: no logprobs; n >= 0: the sampled token's logprob plus the top n."""

    def __post_init__(self) -> None:
        checks = [
            (self.max_tokens >= 1, f"max_tokens must be >= 1, got {self.max_tokens}"),
            (self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}"),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}"),
            (self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}"),
            (0 <= self.min_p <= 1, f"min_p must be in [0, 1], got {self.min_p}"),
            (self.repetition_penalty > 0, "repetition_penalty must be > 0"),
            (-2 <= self.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2]"),
            (-2 <= self.presence_penalty <= 2, "presence_penalty must be in [-2, 2]"),
            (self.logprobs is None or 0 <= self.logprobs <= 20, "logprobs must be in [0, 20]"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def has_penalties(self) -> bool:
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )
