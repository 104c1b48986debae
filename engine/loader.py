"""Load a model by name: resolve -> (cached) convert -> build the module.

The first load of a GGUF dequantises and converts it, then caches the result; later
loads read the cached safetensors and tokenizer directly (well under a second).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import ModelArgs, RopeScaling
from engine.gguf_file import GGUFFile
from engine.hf_files import hf_tensors, read_config
from engine.llama import Llama
from engine.model_source import ModelSource, resolve_model
from engine.tokenizer import Tokenizer
from engine.weight_cache import WeightCache, cache_key, default_cache_dir, save_state
from engine.weights import convert_hf_state

NamedTensor = tuple[str, torch.Tensor]
Progress = Callable[[str, int, int], None]
"""(stage, done, total): called while loading so a front end can draw progress."""


@dataclass(frozen=True)
class LoadedModel:
    source: ModelSource
    args: ModelArgs
    model: Llama
    tokenizer: Tokenizer
    from_cache: bool


def load_model(
    name: str,
    dtype: torch.dtype = torch.float32,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> LoadedModel:
    source = resolve_model(name)
    cache = WeightCache(cache_dir or default_cache_dir())
    key = cache_key(source, dtype)
    report = progress or (lambda stage, done, total: None)
    from_cache = cache.has(key)
    if not from_cache:
        _convert_into_cache(source, dtype, cache, key, report)
    report("loading cached weights", 0, 1)
    entry = cache.entry(key)
    args = args_from_json(cache.read_json(key, "model_args.json"))
    tokenizer = Tokenizer.load(entry)
    model = Llama(args, dtype)
    model.load_state_dict(cache.load_state(key), strict=True, assign=True)
    model.eval()
    report("loading cached weights", 1, 1)
    return LoadedModel(source, args, model, tokenizer, from_cache)


def load_tokenizer(
    name: str, cache_dir: Path | None = None, progress: Progress | None = None
) -> tuple[Tokenizer, ModelArgs]:
    """The tokenizer and architecture without the weights (what a router needs)."""
    source = resolve_model(name)
    cache = WeightCache(cache_dir or default_cache_dir())
    key = cache_key(source, torch.float32)
    if not cache.has(key):
        _convert_into_cache(source, torch.float32, cache, key, progress or (lambda *a: None))
    return Tokenizer.load(cache.entry(key)), args_from_json(cache.read_json(key, "model_args.json"))


def _convert_into_cache(
    source: ModelSource, dtype: torch.dtype, cache: WeightCache, key: str, report: Progress
) -> None:
    if source.kind == "gguf":
        gguf = GGUFFile(source.path)
        args = ModelArgs.from_gguf_metadata(gguf.metadata)
        tokenizer = Tokenizer.from_gguf_metadata(gguf.metadata)
        tensors = _counted(gguf.hf_tensors(args.n_heads, args.n_kv_heads), report)
    else:
        args = ModelArgs.from_hf_config(read_config(source.path))
        tokenizer = Tokenizer.from_hf_dir(source.path)
        tensors = _counted(hf_tensors(source.path), report)
    state = convert_hf_state(tensors, args, dtype)

    def write(directory: Path) -> None:
        save_state(state, directory)
        tokenizer.save(directory)
        (directory / "model_args.json").write_text(json.dumps(dataclasses.asdict(args)))

    cache.store(key, write)


def _counted(tensors: Iterator[NamedTensor], report: Progress) -> Iterator[NamedTensor]:
    for i, item in enumerate(tensors):
        report("converting weights", i + 1, 0)
        yield item


def args_from_json(raw: dict) -> ModelArgs:
    scaling = raw.pop("rope_scaling", None)
    return ModelArgs(**raw, rope_scaling=None if scaling is None else RopeScaling(**scaling))
