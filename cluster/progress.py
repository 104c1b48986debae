"""A rich progress indicator for model loading, shown on stderr."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from engine.loader import LoadedModel, load_model


@contextmanager
def _loading_progress(console: Console) -> Iterator[Progress]:
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        yield progress


def load_with_progress(
    name: str, dtype: torch.dtype = torch.float32, cache_dir: Path | None = None
) -> LoadedModel:
    console = Console(stderr=True)
    with _loading_progress(console) as progress:
        task = progress.add_task(f"loading {name}", total=None)

        def report(stage: str, done: int, total: int) -> None:
            progress.update(
                task, description=f"{name}: {stage}", completed=done, total=total or None
            )

        loaded = load_model(name, dtype=dtype, cache_dir=cache_dir, progress=report)
    where = "cache" if loaded.from_cache else "converted and cached"
    console.print(f"[dim]{name}: {loaded.args.num_params() / 1e6:.0f}M parameters ({where})[/dim]")
    return loaded
