"""Loading: aliases, the weight cache, HF directories, and clear errors."""

from __future__ import annotations

import json

import pytest
import torch

from engine.loader import load_model
from engine.model_source import ModelNotFound, resolve_model
from tests.factories import random_prompt


def test_default_alias_resolves_to_the_packaged_gguf():
    source = resolve_model("smollm2-135m")
    assert source.kind == "gguf" and source.path.name.endswith(".gguf") and source.path.exists()


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="unknown model"):
        resolve_model("no-such-model")
    with pytest.raises(ModelNotFound):
        resolve_model(str(tmp_path))  # a directory without config.json


def test_second_load_comes_from_the_cache(smol, cache_dir):
    again = load_model("smollm2-135m", cache_dir=cache_dir)
    assert again.from_cache
    for (name, a), (_, b) in zip(
        smol.model.state_dict().items(), again.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_hf_directory_loads_and_matches_transformers(tiny_factory, smol, tmp_path):
    # 1. A tiny model saved the way HF saves models, with a tokenizer beside it.
    tiny = tiny_factory(heads=4, kv_heads=2)
    tiny.reference.save_pretrained(tmp_path, safe_serialization=True)
    smol.tokenizer.save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    # 2. Loaded by path, converted, cached.
    loaded = load_model(str(tmp_path), cache_dir=tmp_path / "cache")
    assert loaded.source.kind == "hf" and not loaded.from_cache
    assert loaded.tokenizer.info.eos_ids == (2,)
    # 3. Same logits as the reference.
    ids = random_prompt(20, 512, seed=0)
    with torch.no_grad():
        ref = tiny.reference(torch.tensor([ids])).logits[0, -1]
    from tests.factories import paged_greedy

    _, logits, _ = paged_greedy(loaded.model, ids, 1)
    assert torch.allclose(logits[0], ref, atol=1e-3, rtol=0)
