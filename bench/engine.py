"""`pdserve bench engine`: forward-pass speed against this machine's physical limits.

Measured in one run, on one model:
- `bw_gbs`: memory read bandwidth (a torch sum over a buffer far larger than cache);
- `matmul_gflops`: best fp32 matmul rate on the model's own weight shapes;
- prefill throughput for one prompt of 128, 512 and 2048 tokens;
- decode step time for batches of 1, 8, 32 and 64 sequences at context 512, each step
  a real forward over the paged KV cache plus greedy sampling.

The roofline ratio of a step is the physical lower bound on its time divided by the
measured time, the bound being max(bytes read / bw, FLOPs / matmul rate), with bytes
= weights + the KV actually attended. 1.0 means the step ran at the machine's limit.
Medians over repetitions: this machine is shared and has multi-second stalls.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.batch import SeqChunk, build_batch
from engine.block_pool import BlockPool
from engine.config import ModelArgs
from engine.kv_cache import KVCache, KVCacheSpec
from engine.llama import Llama

DECODE_CONTEXT = 512


def median_seconds(fn: Callable[[], object], reps: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def memory_bandwidth_gbs(buffer_gb: float = 2.0, reps: int = 7) -> float:
    x = torch.ones(int(buffer_gb * 1e9) // 4, dtype=torch.float32)
    return x.numel() * 4 / median_seconds(x.sum, reps) / 1e9


def matmul_gflops(args: ModelArgs, reps: int = 5) -> float:
    """Best rate over activations of 512 and 2048 rows against the FFN's fused weight."""
    w = torch.randn(args.dim, 2 * args.ffn_dim)
    best = 0.0
    for m in (512, 2048):
        x = torch.randn(m, args.dim)
        t = median_seconds(lambda x=x: x @ w, reps)
        best = max(best, 2 * m * args.dim * 2 * args.ffn_dim / t / 1e9)
    return best


@dataclass(frozen=True)
class StepCost:
    """FLOPs and bytes a forward step needs at the very least."""

    flops: float
    bytes: float

    def bound_seconds(self, bw_gbs: float, gflops: float) -> float:
        return max(self.bytes / (bw_gbs * 1e9), self.flops / (gflops * 1e9))


def linear_params(args: ModelArgs) -> int:
    """Weights every token multiplies through: all linears and the LM head (no norms,
    no embedding lookup, which reads one row per token)."""
    norms = args.dim * (2 * args.n_layers + 1)
    separate_embedding = 0 if args.tie_embeddings else args.vocab_size * args.dim
    return args.num_params() - norms - separate_embedding


def decode_cost(args: ModelArgs, batch: int, context: int, elem: int = 4) -> StepCost:
    attn_flops = 4 * batch * context * args.n_heads * args.head_dim * args.n_layers
    kv_bytes = batch * context * args.kv_bytes_per_token(elem)
    weights = linear_params(args)
    return StepCost(2 * weights * batch + attn_flops, weights * elem + kv_bytes)


def prefill_cost(args: ModelArgs, tokens: int, elem: int = 4) -> StepCost:
    """The LM head runs for the last token only; attention is causal (half the square)."""
    head = args.vocab_size * args.dim
    body = linear_params(args) - head
    pairs = tokens * (tokens + 1) / 2
    attn_flops = 4 * pairs * args.n_heads * args.head_dim * args.n_layers
    kv_bytes = tokens * args.kv_bytes_per_token(elem)
    return StepCost(2 * body * tokens + 2 * head + attn_flops, (body + head) * elem + kv_bytes)


class _Harness:
    """A KV cache and block pool sized for the largest case, reused by every case."""

    def __init__(self, model: Llama, max_tokens: int) -> None:
        a = model.args
        blocks = -(-max_tokens // 16) + 64
        self.model = model
        self.kv = KVCache(
            KVCacheSpec(blocks, a.n_layers, a.n_kv_heads, a.head_dim, 16, model.dtype)
        )
        self.kv.data.normal_()  # attended KV must hold real numbers, not zeros
        self.pool = BlockPool(blocks)

    def prefill_seconds(self, tokens: int, reps: int) -> float:
        ids = torch.randint(0, self.model.args.vocab_size, (tokens,)).tolist()
        table = self.pool.allocate(-(-tokens // 16))
        batch = build_batch([SeqChunk(ids, 0, table)], self.kv)
        t = median_seconds(lambda: self.model(batch, self.kv), reps)
        self.pool.free(table)
        return t

    def decode_seconds(self, batch_size: int, context: int, reps: int) -> float:
        tables = [self.pool.allocate(-(-context // 16)) for _ in range(batch_size)]
        ids = torch.randint(0, self.model.args.vocab_size, (batch_size,)).tolist()
        chunks = [SeqChunk([t], context - 1, tb) for t, tb in zip(ids, tables, strict=True)]

        def step() -> list[int]:
            batch = build_batch(chunks, self.kv)  # planning is part of every real step
            return self.model(batch, self.kv).argmax(-1).tolist()

        t = median_seconds(step, reps, warmup=2)
        for tb in tables:
            self.pool.free(tb)
        return t


def run_engine_bench(model: Llama, quick: bool = False) -> dict[str, float | str]:
    args = model.args
    reps = 3 if quick else 7
    bw = memory_bandwidth_gbs(reps=reps)
    gflops = matmul_gflops(args, reps=reps)
    prefill_sizes = (128, 512) if quick else (128, 512, 2048)
    batches = (1, 8) if quick else (1, 8, 32, 64)
    harness = _Harness(model, max(max(prefill_sizes), max(batches) * DECODE_CONTEXT))
    out: dict[str, float | str] = {
        "bench": "engine",
        "threads": torch.get_num_threads(),
        "dtype": str(model.dtype).removeprefix("torch."),
        "bw_gbs": round(bw, 2),
        "matmul_gflops": round(gflops, 1),
    }
    for n in prefill_sizes:
        t = harness.prefill_seconds(n, reps=max(3, reps // 2))
        out[f"prefill_tok_s_{n}"] = round(n / t, 1)
        out[f"prefill_roofline_{n}"] = round(prefill_cost(args, n).bound_seconds(bw, gflops) / t, 3)
    for b in batches:
        t = harness.decode_seconds(b, DECODE_CONTEXT, reps=reps)
        bound = decode_cost(args, b, DECODE_CONTEXT).bound_seconds(bw, gflops)
        out[f"decode_ms_b{b}"] = round(t * 1e3, 2)
        out[f"decode_bound_ms_b{b}"] = round(bound * 1e3, 2)
        out[f"decode_roofline_b{b}"] = round(bound / t, 3)
    harness.pool.check_invariants()
    return out
