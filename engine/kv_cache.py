"""The paged KV cache: one tensor holding every block of every layer.

Layout (block-major, chosen for transfer):

    cache[block, layer, kv, head, slot, dim]      shape (NB, L, 2, H_kv, 16, D)

    block b ─┬─ layer 0 ─┬─ K: head 0 [16 x D] | head 1 [16 x D] | ... | head H_kv-1
             │           └─ V: head 0 [16 x D] | ...
             ├─ layer 1 ─ ...
             └─ layer L-1

- A block's bytes for one layer (K and V, all its heads) are contiguous, and so are a
  block's bytes for all layers: moving a block between workers is one region.
- Heads sit outside tokens, so one KV head of one block is a contiguous [16 x D] tile; a
  decode rank with a different TP degree reads just its heads' tiles.
- Viewed as rows of [16 x D] tiles, tile (b, l, kv, h) is row ((b*L + l)*2 + kv)*H_kv + h.
  Attention gathers whole tiles with one `index_select` over that row view.

A token's slot is `block * 16 + offset`; sequences address the cache only through
their block tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import ModelArgs
from engine.memory import hugepage_zeros


@dataclass(frozen=True)
class KVCacheSpec:
    num_blocks: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int = 16
    dtype: torch.dtype = torch.float32

    @property
    def shape(self) -> tuple[int, ...]:
        return (
            self.num_blocks,
            self.num_layers,
            2,
            self.num_kv_heads,
            self.block_size,
            self.head_dim,
        )

    @property
    def bytes_per_block(self) -> int:
        elem = torch.empty((), dtype=self.dtype).element_size()
        return self.num_layers * 2 * self.num_kv_heads * self.block_size * self.head_dim * elem

    @classmethod
    def for_budget(
        cls, args: ModelArgs, kv_cache_gb: float, dtype: torch.dtype, block_size: int = 16
    ) -> KVCacheSpec:
        """As many blocks as fit in `kv_cache_gb` gigabytes."""
        probe = cls(1, args.n_layers, args.n_kv_heads, args.head_dim, block_size, dtype)
        num_blocks = int(kv_cache_gb * 1e9) // probe.bytes_per_block
        if num_blocks < 1:
            raise ValueError(f"kv_cache_gb={kv_cache_gb} holds no block of this model")
        return cls(num_blocks, args.n_layers, args.n_kv_heads, args.head_dim, block_size, dtype)


class KVCache:
    """Owns the cache tensor; writes new K/V rows by slot."""

    def __init__(self, spec: KVCacheSpec, device: torch.device | str = "cpu") -> None:
        self.spec = spec
        if torch.device(device).type == "cpu":
            self.data = hugepage_zeros(spec.shape, spec.dtype)
        else:
            self.data = torch.zeros(spec.shape, dtype=spec.dtype, device=device)
        s = spec
        # (NB*L*2*H_kv, 16*D): one row per [16 x D] tile, see the module docstring.
        self.tiles = self.data.view(s.num_blocks * s.num_layers * 2 * s.num_kv_heads, -1)

    def write(
        self, layer: int, blocks: torch.Tensor, offsets: torch.Tensor, kv_new: torch.Tensor
    ) -> None:
        """Scatter K and V of N new tokens into their slots.

        kv_new: (N, 2, H_kv, D); token i goes to (blocks[i], offsets[i]) of `layer`.
        """
        # Indices separated by slices: the indexed view's leading dim is N -> (N, 2, H_kv, D).
        self.data[blocks, layer, :, :, offsets] = kv_new

    def tile_rows(self, blocks: torch.Tensor) -> torch.Tensor:
        """Row index of tile (block, layer 0, kv, head) for each block.

        blocks: (..., nb) -> (2, ..., H_kv, nb); add `layer * 2 * H_kv` for other layers.
        """
        s = self.spec
        kv = torch.arange(2, device=blocks.device).view((2,) + (1,) * (blocks.dim() + 1))
        head = torch.arange(s.num_kv_heads, device=blocks.device).view(-1, 1)
        base = blocks.unsqueeze(-2) * (s.num_layers * 2 * s.num_kv_heads)  # (..., 1, nb)
        return base.unsqueeze(0) + kv * s.num_kv_heads + head

    def layer_stride_rows(self) -> int:
        return 2 * self.spec.num_kv_heads
