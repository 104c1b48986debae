"""Starting pdserve worker processes on this machine and waiting until they serve.

Used by benchmarks and tests (the Ray cluster issue replaces this for deployments).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY = re.compile(r"ready on (\S+):(\d+)")


@dataclass
class WorkerProcess:
    role: str
    proc: subprocess.Popen
    address: str
    log: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait; kill (and raise) if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode


def start_worker(
    role: str, *args: str, cache_dir: Path | None = None, timeout: float = 120.0
) -> WorkerProcess:
    """`pdserve {role}-worker --port 0 *args`, returned once it printed its address."""
    env = {**os.environ, "UCX_NET_DEVICES": os.environ.get("UCX_NET_DEVICES", "lo")}
    if cache_dir is not None:
        env["PDSERVE_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster.cli", f"{role}-worker", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    log: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        log.append(line)
        m = READY.search(line)
        if m:
            # Keep draining output so the pipe never fills and blocks the worker.
            threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True).start()
            return WorkerProcess(role, proc, f"{m.group(1)}:{m.group(2)}", log)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{role} worker did not start:\n{''.join(log[-30:])}")
