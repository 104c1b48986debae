"""Shared fixtures: the default model loaded once, its transformers twin, tiny models,
and engines whose block pools are checked for leaks when each test ends."""

from __future__ import annotations

import os

import torch

# Without a GPU, Triton kernels run in its interpreter on CPU tensors. This must be set
# before any kernel module is imported (triton.jit reads it when decorating).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.llm_engine import EngineConfig, LLMEngine
from engine.loader import LoadedModel, load_model
from engine.scheduler import SchedulerConfig
from tests.disagg.cluster import WorkerProcess, start_worker
from tests.factories import TinyModel, make_tiny_model

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Converted weights for the whole session; PDSERVE_CACHE_DIR reuses a warm one."""
    env = os.environ.get("PDSERVE_CACHE_DIR")
    return Path(env) if env else tmp_path_factory.mktemp("pdserve-cache")


@pytest.fixture(scope="session")
def smol(cache_dir: Path) -> LoadedModel:
    return load_model("smollm2-135m", cache_dir=cache_dir)


@pytest.fixture(scope="session")
def smol_reference(smol: LoadedModel) -> torch.nn.Module:
    """transformers' own GGUF loader and Llama: the reference we must match."""
    from transformers import AutoModelForCausalLM

    path = smol.source.path
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="session")
def tiny_factory(smol: LoadedModel) -> Callable[..., TinyModel]:
    return lambda **kw: make_tiny_model(smol.tokenizer, **kw)


@pytest.fixture(scope="session")
def prefill(cache_dir: Path, smol: LoadedModel) -> Iterator[WorkerProcess]:
    """A real prefill worker process on loopback (smol: the weight cache is warm)."""
    worker = start_worker("prefill", cache_dir, "--chunk-size", "256")
    yield worker
    assert worker.stop() == 0, "".join(worker.log[-20:])


@pytest.fixture(scope="session")
def decode(cache_dir: Path, smol: LoadedModel) -> Iterator[WorkerProcess]:
    """A real decode worker process on loopback."""
    worker = start_worker("decode", cache_dir)
    yield worker
    assert worker.stop() == 0, "".join(worker.log[-20:])


@pytest.fixture
def make_engine() -> Iterator[Callable[..., LLMEngine]]:
    """Builds engines; at teardown every one must hold no block and no request."""
    engines: list[LLMEngine] = []

    def build(loaded: LoadedModel, kv_cache_gb: float = 0.05, **scheduler: int) -> LLMEngine:
        config = EngineConfig(kv_cache_gb=kv_cache_gb, scheduler=SchedulerConfig(**scheduler))
        engine = LLMEngine(loaded, config)
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        assert_no_leaks(engine)


def assert_no_leaks(engine: LLMEngine) -> None:
    engine.pool.check_invariants()
    assert not engine.has_unfinished(), "requests left in the scheduler"
    assert engine.pool.num_in_use == 0, f"{engine.pool.num_in_use} KV blocks still in use"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` need CUDA: skipped (and reported as skipped) on CPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; its CPU twin runs interpreted")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
