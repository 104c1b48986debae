"""`pdserve up` as a user runs it: Ray actors, the router, an OpenAI client, and a
shutdown that leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from openai import OpenAI

from tests.router.servers import free_port

RAY_PROCESSES = re.compile(r"raylet|gcs_server|ray::WorkerActor")


def ray_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if RAY_PROCESSES.search(line)]


def test_up_serves_openai_and_stops_cleanly(smol, cache_dir):
    before = ray_processes()
    port = free_port()
    env = {**os.environ, "PDSERVE_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", "up", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # our signal only, as a supervisor would send it
    )
    try:
        # 1. Ready, with the time it took.
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "pdserve ready" in line:
                break
        assert "pdserve ready" in lines[-1], "".join(lines[-30:])
        ready_s = float(re.search(r"ready in ([\d.]+)s", lines[-1]).group(1))
        assert ready_s < 60
        # 2. An unmodified OpenAI client gets an answer through prefill -> decode.
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        r = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=16,
            temperature=0,
        )
        assert "Paris" in r.choices[0].message.content
        assert len(ray_processes()) > len(before)
    finally:
        # 3. SIGTERM stops everything it started.
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, rest[-2000:]
    assert "pdserve: stopped" in rest
    deadline = time.monotonic() + 15
    while len(ray_processes()) > len(before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray_processes() == before, "processes left behind"
