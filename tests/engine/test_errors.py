"""Requests that can never be served fail with a typed error and allocate nothing."""

from __future__ import annotations

import pytest

from engine.errors import ContextLengthExceeded, EmptyPrompt, InvalidRequest, TokenOutOfRange
from engine.sampling_params import SamplingParams


def test_context_overflow_is_a_typed_error_not_an_index_error(smol, make_engine):
    engine = make_engine(smol)
    limit = smol.args.max_seq_len
    with pytest.raises(ContextLengthExceeded) as err:
        engine.add_request([5] * (limit - 10), SamplingParams(max_tokens=11))
    assert err.value.code == "context_length_exceeded"
    assert f"maximum context length is {limit}" in str(err.value)
    assert engine.pool.num_in_use == 0 and not engine.has_unfinished()


def test_exactly_at_the_window_is_allowed_and_stops_at_it(tiny_factory, make_engine):
    tiny = tiny_factory(max_len=64)
    engine = make_engine(tiny.loaded)
    prompt = [7] * 60
    [result] = engine.generate(
        [prompt], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    )
    assert len(result.token_ids) == 4 and result.finish_reason == "length"
    with pytest.raises(ContextLengthExceeded):
        engine.add_request(prompt, SamplingParams(max_tokens=5))


@pytest.mark.parametrize(
    ("prompt", "error"),
    [([], EmptyPrompt), ([1, -1], TokenOutOfRange), ([1, 10**9], TokenOutOfRange)],
)
def test_bad_prompts(smol, make_engine, prompt, error):
    engine = make_engine(smol)
    with pytest.raises(error) as err:
        engine.add_request(prompt, SamplingParams())
    assert isinstance(err.value, InvalidRequest)
    assert engine.pool.num_in_use == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"temperature": -1},
        {"top_p": 0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"min_p": 2},
        {"repetition_penalty": 0},
        {"frequency_penalty": 3},
        {"presence_penalty": -3},
        {"logprobs": 21},
    ],
)
def test_sampling_params_reject_out_of_range(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
