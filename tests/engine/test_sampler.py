"""Sampling: each setting does what it says, and seeds make runs repeatable."""

from __future__ import annotations

import math

import pytest
import torch

from engine.sampler import SamplerState, sample
from engine.sampling_params import SamplingParams


def draw(logits: list[float], n: int = 200, **params) -> list[int]:
    state = SamplerState.create(SamplingParams(**params), prompt_ids=[])
    row = torch.tensor([logits])
    return [sample(row, [state])[0].token_id for _ in range(n)]


def test_greedy_is_argmax():
    assert set(draw([0.1, 3.0, 2.9], n=5, temperature=0)) == {1}


def test_top_k_keeps_only_the_k_best():
    assert set(draw([1.0, 1.1, 1.2, 5.0, 4.9], top_k=2, seed=0)) == {3, 4}


def test_top_p_keeps_the_smallest_set_reaching_p():
    # probs ~ [0.64, 0.24, 0.09, 0.03]: top_p=0.8 keeps tokens 0 and 1 only.
    logits = [math.log(p) for p in (0.64, 0.24, 0.09, 0.03)]
    assert set(draw(logits, top_p=0.8, seed=1)) == {0, 1}


def test_min_p_drops_tokens_far_below_the_best():
    logits = [math.log(p) for p in (0.5, 0.4, 0.05, 0.05)]
    assert set(draw(logits, min_p=0.2, seed=2)) == {0, 1}


def test_same_seed_same_tokens_different_seed_different_tokens():
    logits = [0.0] * 50
    assert draw(logits, seed=42) == draw(logits, seed=42)
    assert draw(logits, seed=42) != draw(logits, seed=43)


def test_temperature_sharpens_and_flattens():
    logits = [2.0, 0.0]
    cold = draw(logits, n=400, temperature=0.2, seed=3).count(0)
    hot = draw(logits, n=400, temperature=5.0, seed=3).count(0)
    assert cold > 390 and hot < 300


def test_repetition_penalty_discourages_prompt_tokens():
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    state = SamplerState.create(params, prompt_ids=[0])
    assert sample(torch.tensor([[3.0, 2.0]]), [state])[0].token_id == 1  # 3/2 < 2


def test_frequency_and_presence_penalties_count_output_tokens():
    params = SamplingParams(temperature=0, frequency_penalty=1.0, presence_penalty=0.5)
    state = SamplerState.create(params, prompt_ids=[])
    row = torch.tensor([[2.0, 0.0]])
    first = sample(row, [state])[0].token_id  # no output yet: 2.0 vs 0.0
    second = sample(row, [state])[0].token_id  # 2 - (1*1 + 0.5) = 0.5 vs 0.0
    third = sample(row, [state])[0].token_id  # 2 - (1*2 + 0.5) = -0.5 vs 0.0
    assert (first, second, third) == (0, 0, 1)
    assert state.output_counts == {0: 2, 1: 1}


def test_logprobs_are_the_raw_distribution():
    row = torch.tensor([[1.0, 2.0, 3.0]])
    state = SamplerState.create(SamplingParams(temperature=0, logprobs=2), prompt_ids=[])
    [s] = sample(row, [state])
    expected = torch.log_softmax(row[0], -1)
    assert s.token_id == 2
    assert s.logprob == pytest.approx(expected[2].item())
    assert [t for t, _ in s.top_logprobs] == [2, 1]
    assert s.top_logprobs[1][1] == pytest.approx(expected[1].item())


def test_mixed_batch_rows_use_their_own_settings():
    states = [
        SamplerState.create(SamplingParams(temperature=0), []),
        SamplerState.create(SamplingParams(top_k=1, seed=0), []),
    ]
    out = sample(torch.tensor([[5.0, 0.0], [0.0, 5.0]]), states)
    assert [s.token_id for s in out] == [0, 1]
