"""On-disk cache of converted weights and tokenizer, so a second load is an mmap.

Dequantising a GGUF takes seconds; the converted fp32 state (already fused and
transposed) is written once as safetensors under a key derived from the source file's
path, size and modification time and the target dtype. Writes go to a temporary
directory renamed into place, so a crash never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.model_source import ModelSource

_FORMAT = 1  # bump when the converted layout changes


def default_cache_dir() -> Path:
    base = os.environ.get("PDSERVE_CACHE_DIR") or Path.home() / ".cache" / "pdserve"
    return Path(base)


def cache_key(source: ModelSource, dtype: torch.dtype) -> str:
    files = [source.path] if source.kind == "gguf" else sorted(source.path.iterdir())
    h = hashlib.sha256(f"{_FORMAT}|{dtype}".encode())
    for f in files:
        st = f.stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


class WeightCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def entry(self, key: str) -> Path:
        return self.root / key

    def has(self, key: str) -> bool:
        return (self.entry(key) / "done").exists()

    def load_state(self, key: str) -> dict[str, torch.Tensor]:
        return load_file(self.entry(key) / "model.safetensors")

    def read_json(self, key: str, name: str) -> dict:
        return json.loads((self.entry(key) / name).read_text())

    def store(self, key: str, write: Callable[[Path], None]) -> Path:
        """`write(tmpdir)` fills a fresh directory; it becomes the entry atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=self.root, prefix=".tmp-"))
        try:
            write(tmp)
            (tmp / "done").write_text("ok")
            final = self.entry(key)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return self.entry(key)


def save_state(state: dict[str, torch.Tensor], directory: Path) -> None:
    save_file({k: v.contiguous() for k, v in state.items()}, directory / "model.safetensors")
