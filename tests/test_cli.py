"""The `pdserve` command as a user runs it: a real process, real model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def pdserve(*args: str, cache_dir, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PDSERVE_CACHE_DIR": str(cache_dir)}
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_generate_answers_paris(smol, cache_dir):
    out = pdserve(
        "generate",
        "--chat",
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "16",
        "--temperature",
        "0",
        cache_dir=cache_dir,
    )
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout


def test_generate_rejects_bad_settings_clearly(cache_dir):
    out = pdserve("generate", "--prompt", "x", "--top-p", "7", cache_dir=cache_dir)
    assert out.returncode == 2
    assert "top_p must be in (0, 1]" in out.stderr


def test_generate_context_overflow_is_reported_not_a_traceback(smol, cache_dir):
    out = pdserve("generate", "--prompt", "hi", "--max-tokens", "9000", cache_dir=cache_dir)
    assert out.returncode == 2
    assert "maximum context length is 8192" in out.stderr
    assert "Traceback" not in out.stderr


def test_interactive_chat_reads_turns_from_stdin(smol, cache_dir):
    env = {**os.environ, "PDSERVE_CACHE_DIR": str(cache_dir)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cluster.cli",
            "generate",
            "--max-tokens",
            "12",
            "--temperature",
            "0",
        ],
        input="What is the capital of France?\n\n",
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout


@pytest.mark.slow
def test_bench_engine_prints_one_json_line_with_roofline_figures(smol, cache_dir):
    out = pdserve("bench", "engine", "--quick", cache_dir=cache_dir, timeout=600)
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.strip().splitlines()
    figures = json.loads(line)
    for key in (
        "bw_gbs",
        "matmul_gflops",
        "prefill_tok_s_512",
        "decode_ms_b1",
        "decode_roofline_b1",
        "prefill_roofline_512",
    ):
        assert figures[key] > 0, key
    assert 0 < figures["decode_roofline_b1"] <= 1.5  # a ratio to a bound, not a time


def test_help_lists_the_commands():
    out = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "--help"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0
    assert "generate" in out.stdout and "bench" in out.stdout


@pytest.mark.slow
def test_bench_transfer_prints_one_json_line(smol, cache_dir):
    out = pdserve("bench", "transfer", cache_dir=cache_dir, timeout=600)
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.strip().splitlines()
    figures = json.loads(line)
    for n in (1, 16, 256):
        assert figures[f"nixl_gbs_{n}"] > 0 and figures[f"memcpy_gbs_{n}"] > 0
        assert figures[f"nixl_vs_memcpy_{n}"] > 0
    assert figures["transfer_ms_512tok"] > 0


@pytest.mark.slow
def test_bench_router_prints_one_json_line(cache_dir):
    out = pdserve("bench", "router", "--requests", "30", cache_dir=cache_dir, timeout=300)
    assert out.returncode == 0, out.stderr
    [line] = out.stdout.strip().splitlines()
    figures = json.loads(line)
    assert figures["routed_p50_ms"] > 0 and figures["direct_p50_ms"] > 0
    assert figures["admissions_per_s"] > 0
