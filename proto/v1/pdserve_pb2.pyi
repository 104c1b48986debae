from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "frequency_penalty", "presence_penalty", "stop", "stop_token_ids", "ignore_eos", "logprobs")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: int
    repetition_penalty: float
    frequency_penalty: float
    presence_penalty: float
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    logprobs: int
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., seed: _Optional[int] = ..., repetition_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., logprobs: _Optional[int] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class SampledToken(_message.Message):
    __slots__ = ("token_id", "logprob", "top_logprobs")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., top_logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...

class KVLayout(_message.Message):
    __slots__ = ("num_layers", "num_kv_heads", "head_dim", "block_size", "dtype", "block_bytes")
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    dtype: str
    block_bytes: int
    def __init__(self, num_layers: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., block_size: _Optional[int] = ..., dtype: _Optional[str] = ..., block_bytes: _Optional[int] = ...) -> None: ...

class KVHandle(_message.Message):
    __slots__ = ("engine_id", "prefill_address", "block_ids", "num_tokens", "lease_ms")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    PREFILL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    prefill_address: str
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    num_tokens: int
    lease_ms: int
    def __init__(self, engine_id: _Optional[str] = ..., prefill_address: _Optional[str] = ..., block_ids: _Optional[_Iterable[int]] = ..., num_tokens: _Optional[int] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "params")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    params: SamplingParams
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., params: _Optional[_Union[SamplingParams, _Mapping]] = ...) -> None: ...

class PrefillResponse(_message.Message):
    __slots__ = ("request_id", "first_token", "text", "finish_reason", "kv", "usage")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    first_token: SampledToken
    text: str
    finish_reason: str
    kv: KVHandle
    usage: Usage
    def __init__(self, request_id: _Optional[str] = ..., first_token: _Optional[_Union[SampledToken, _Mapping]] = ..., text: _Optional[str] = ..., finish_reason: _Optional[str] = ..., kv: _Optional[_Union[KVHandle, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class ReleaseKVRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ReleaseKVResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class LeaseHeartbeatRequest(_message.Message):
    __slots__ = ("request_ids",)
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LeaseHeartbeatResponse(_message.Message):
    __slots__ = ("extended",)
    EXTENDED_FIELD_NUMBER: _ClassVar[int]
    extended: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, extended: _Optional[_Iterable[str]] = ...) -> None: ...

class TransferMetadataRequest(_message.Message):
    __slots__ = ("protocol_version",)
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    def __init__(self, protocol_version: _Optional[int] = ...) -> None: ...

class TransferMetadataResponse(_message.Message):
    __slots__ = ("protocol_version", "engine_id", "backend", "agent_metadata", "base_address", "layout")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    AGENT_METADATA_FIELD_NUMBER: _ClassVar[int]
    BASE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    engine_id: str
    backend: str
    agent_metadata: bytes
    base_address: int
    layout: KVLayout
    def __init__(self, protocol_version: _Optional[int] = ..., engine_id: _Optional[str] = ..., backend: _Optional[str] = ..., agent_metadata: _Optional[bytes] = ..., base_address: _Optional[int] = ..., layout: _Optional[_Union[KVLayout, _Mapping]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "params", "first_token", "kv")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    params: SamplingParams
    first_token: SampledToken
    kv: KVHandle
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., params: _Optional[_Union[SamplingParams, _Mapping]] = ..., first_token: _Optional[_Union[SampledToken, _Mapping]] = ..., kv: _Optional[_Union[KVHandle, _Mapping]] = ...) -> None: ...

class TokenChunk(_message.Message):
    __slots__ = ("request_id", "text", "tokens", "finish_reason", "usage")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    tokens: _containers.RepeatedCompositeFieldContainer[SampledToken]
    finish_reason: str
    usage: Usage
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., tokens: _Optional[_Iterable[_Union[SampledToken, _Mapping]]] = ..., finish_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("protocol_version", "role", "model", "engine_id", "max_model_len")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    role: str
    model: str
    engine_id: str
    max_model_len: int
    def __init__(self, protocol_version: _Optional[int] = ..., role: _Optional[str] = ..., model: _Optional[str] = ..., engine_id: _Optional[str] = ..., max_model_len: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("queue_depth", "running", "free_blocks", "used_blocks", "cached_blocks", "total_blocks", "outstanding_prefill_tokens", "prefix_block_hashes", "prefix_cache_hit_tokens", "leased_requests", "transfers_in_flight", "preemptions", "invariant_error")
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    USED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    OUTSTANDING_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LEASED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TRANSFERS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    INVARIANT_ERROR_FIELD_NUMBER: _ClassVar[int]
    queue_depth: int
    running: int
    free_blocks: int
    used_blocks: int
    cached_blocks: int
    total_blocks: int
    outstanding_prefill_tokens: int
    prefix_block_hashes: _containers.RepeatedScalarFieldContainer[int]
    prefix_cache_hit_tokens: int
    leased_requests: int
    transfers_in_flight: int
    preemptions: int
    invariant_error: str
    def __init__(self, queue_depth: _Optional[int] = ..., running: _Optional[int] = ..., free_blocks: _Optional[int] = ..., used_blocks: _Optional[int] = ..., cached_blocks: _Optional[int] = ..., total_blocks: _Optional[int] = ..., outstanding_prefill_tokens: _Optional[int] = ..., prefix_block_hashes: _Optional[_Iterable[int]] = ..., prefix_cache_hit_tokens: _Optional[int] = ..., leased_requests: _Optional[int] = ..., transfers_in_flight: _Optional[int] = ..., preemptions: _Optional[int] = ..., invariant_error: _Optional[str] = ...) -> None: ...
