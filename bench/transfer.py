"""`pdserve bench transfer`: KV block transfer speed against an in-process memcpy.

A real prefill worker process holds a KV cache registered with NIXL; this process plays
the decode side (its own NIXL agent and cache, the same handshake over gRPC) and pulls
1, 16 and 256 blocks with NIXL READs. The baseline is `copy_` of the same bytes between
two tensors in this process, measured in the same run: `nixl_vs_memcpy_N` is NIXL's
rate over memcpy's. The baseline is libc `memcpy`, one call per block from scattered
source blocks, like the READ (UCX's CMA copy is one thread too); `torch_copy_gbs_N`
(torch's multithreaded `copy_` of the same bytes) is reported beside it for scale.
`transfer_ms_512tok` is one request end to end: prefill a 512-token prompt on the
worker, then pull its blocks until the READ completes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import statistics
import time
import uuid

import grpc
import torch

from bench.engine import median_seconds
from cluster.local_process import start_worker
from engine.config import ModelArgs
from engine.kv_cache import KVCacheSpec
from engine.memory import hugepage_zeros
from engine.sampling_params import SamplingParams
from engine.transfer.layout import PROTOCOL_VERSION, KVLayout, check_compatible
from engine.transfer.nixl_agent import NixlKVAgent
from proto.convert import layout_from_proto, params_to_proto
from proto.v1 import pdserve_pb2 as pb
from proto.v1 import pdserve_pb2_grpc as rpc

BLOCK_COUNTS = (1, 16, 256)


def _wait(agent: NixlKVAgent, handle: object) -> None:
    while (state := agent.state(handle)) == "PROC":
        pass
    agent.release(handle)
    if state != "DONE":
        raise RuntimeError(f"NIXL READ ended in state {state}")


def run_transfer_bench(model: str, args: ModelArgs, reps: int = 7) -> dict[str, float | str]:
    kv_gb = (
        2
        * max(BLOCK_COUNTS)
        * KVCacheSpec.for_budget(args, 1.0, torch.float32).bytes_per_block
        / 1e9
    )
    worker = start_worker("prefill", "--model", model, "--kv-cache-gb", f"{kv_gb:.3f}")
    try:
        channel = grpc.insecure_channel(worker.address)
        stub = rpc.PrefillWorkerStub(channel)
        meta = stub.TransferMetadata(pb.TransferMetadataRequest(protocol_version=PROTOCOL_VERSION))
        spec = KVCacheSpec.for_budget(args, kv_gb / 2, torch.float32)
        local = hugepage_zeros(spec.shape, torch.float32)
        check_compatible(KVLayout.of(spec), layout_from_proto(meta.layout), meta.protocol_version)
        agent = NixlKVAgent(f"bench-{uuid.uuid4().hex[:8]}", local)
        peer = agent.add_peer(meta.agent_metadata)
        block_bytes = spec.bytes_per_block
        out: dict[str, float | str] = {"bench": "transfer", "model": model, "backend": "nixl-ucx"}
        out["block_kb"] = round(block_bytes / 1024, 1)
        src_spec = KVCacheSpec.for_budget(args, kv_gb, torch.float32)  # the worker's size
        src = hugepage_zeros(src_spec.shape, torch.float32).normal_()
        memcpy = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").memcpy
        memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        for n in BLOCK_COUNTS:
            # Scattered remote blocks (every other one), contiguous local blocks.
            remote = list(range(0, 2 * n, 2))
            local_ids = list(range(n))

            def pull(remote: list[int] = remote, local_ids: list[int] = local_ids) -> None:
                _wait(agent, agent.read(peer, meta.base_address, remote, local_ids, b""))

            def copy_blocks(remote: list[int] = remote) -> None:
                for dst_block, src_block in enumerate(remote):
                    memcpy(local[dst_block].data_ptr(), src[src_block].data_ptr(), block_bytes)

            nixl_s = median_seconds(pull, reps)
            memcpy_s = median_seconds(copy_blocks, reps)
            torch_s = median_seconds(lambda n=n: local[:n].copy_(src[:n]), reps)
            nbytes = n * block_bytes
            out[f"nixl_gbs_{n}"] = round(nbytes / nixl_s / 1e9, 2)
            out[f"memcpy_gbs_{n}"] = round(nbytes / memcpy_s / 1e9, 2)
            out[f"torch_copy_gbs_{n}"] = round(nbytes / torch_s / 1e9, 2)
            out[f"nixl_vs_memcpy_{n}"] = round(memcpy_s / nixl_s, 3)
        out["transfer_ms_512tok"] = round(
            _request_transfer_ms(stub, agent, peer, meta.base_address, args) * 1e3, 2
        )
        agent.close()
        channel.close()
        return out
    finally:
        worker.stop()


def _request_transfer_ms(
    stub: rpc.PrefillWorkerStub, agent: NixlKVAgent, peer: str, base: int, args: ModelArgs
) -> float:
    """Median over requests of: first token back from Prefill -> its KV pulled here."""
    times = []
    for i in range(5):
        prompt = torch.randint(
            3, args.vocab_size, (512,), generator=torch.Generator().manual_seed(i)
        ).tolist()
        params = params_to_proto(SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
        rid = f"bench-{i}"
        resp = stub.Prefill(
            pb.PrefillRequest(request_id=rid, prompt_token_ids=prompt, params=params)
        )
        blocks = list(resp.kv.block_ids)
        t0 = time.perf_counter()
        _wait(
            agent,
            agent.read(peer, base, blocks, list(range(len(blocks))), b"release:" + rid.encode()),
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
