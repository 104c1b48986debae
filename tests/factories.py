"""Test factories: tiny random Llamas with a transformers twin, prompts, sequences."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.batch import SeqChunk, build_batch
from engine.block_pool import BlockPool
from engine.config import ModelArgs
from engine.kv_cache import KVCache, KVCacheSpec
from engine.llama import Llama
from engine.loader import LoadedModel
from engine.model_source import ModelSource
from engine.tokenizer import Tokenizer
from engine.weights import convert_hf_state

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


@dataclass(frozen=True)
class TinyModel:
    loaded: LoadedModel
    reference: torch.nn.Module  # transformers LlamaForCausalLM with the same weights
    hf_config: dict[str, Any]


def make_tiny_model(
    tokenizer: Tokenizer,
    *,
    heads: int = 6,
    kv_heads: int = 2,
    head_dim: int = 16,
    layers: int = 2,
    vocab: int = 512,
    max_len: int = 1024,
    rope_scaling: dict[str, Any] | None = None,
    tie: bool = False,
    seed: int = 0,
) -> TinyModel:
    """A randomly initialised Llama (weights scaled up so greedy choices are clear-cut)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=heads * head_dim,
        intermediate_size=2 * heads * head_dim + 32,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_len,
        rope_theta=10000.0,
        rope_scaling=rope_scaling,
        tie_word_embeddings=tie,
        initializer_range=0.25,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(seed)
    reference = LlamaForCausalLM(cfg).eval()
    hf_config = cfg.to_dict()
    args = ModelArgs.from_hf_config(hf_config)
    model = Llama(args)
    model.load_state_dict(
        convert_hf_state(reference.state_dict().items(), args, torch.float32), assign=True
    )
    source = ModelSource("tiny", Path("/nonexistent"), "hf")
    return TinyModel(
        LoadedModel(source, args, model.eval(), tokenizer, False), reference, hf_config
    )


def random_prompt(n: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


@torch.no_grad()
def reference_greedy(
    reference: torch.nn.Module, prompt: list[int], steps: int
) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and each step's last-position logits, by full recomputation."""
    ids = list(prompt)
    tokens, logits = [], []
    for _ in range(steps):
        out = reference(torch.tensor([ids])).logits[0, -1].float()
        logits.append(out)
        tokens.append(int(out.argmax()))
        ids.append(tokens[-1])
    return tokens, logits


@torch.no_grad()
def paged_greedy(
    model: Llama, prompt: list[int], steps: int, chunk: int | None = None, seed: int = 0
) -> tuple[list[int], list[torch.Tensor], BlockPool]:
    """Greedy decoding through the paged path, prompt prefilled in chunks of `chunk`.

    Blocks come from a pool in shuffled order, so a sequence's blocks are scattered.
    Returns tokens, each step's logits and the pool (blocks still held, for checks).
    """
    a = model.args
    total = len(prompt) + steps
    num_blocks = -(-total // 16) + 8
    kv = KVCache(KVCacheSpec(num_blocks, a.n_layers, a.n_kv_heads, a.head_dim))
    pool = BlockPool(num_blocks)
    g = torch.Generator().manual_seed(seed)
    scattered = [pool.allocate(1)[0] for _ in range(num_blocks)]
    order = torch.randperm(num_blocks, generator=g).tolist()
    pool.free([scattered[i] for i in order[-(num_blocks - -(-total // 16)) :]])
    table = [scattered[i] for i in order[: -(-total // 16)]]

    ids = list(prompt)
    step = chunk or len(prompt)
    for start in range(0, len(prompt), step):
        piece = prompt[start : start + step]
        last = start + len(piece) == len(prompt)
        logits = model(build_batch([SeqChunk(piece, start, table, last)], kv), kv)
    tokens, all_logits = [], []
    for _ in range(steps):
        all_logits.append(logits[0])
        tokens.append(int(logits[0].argmax()))
        ids.append(tokens[-1])
        logits = model(build_batch([SeqChunk([tokens[-1]], len(ids) - 1, table)], kv), kv)
    pool.free(table)
    return tokens, all_logits, pool
