"""A model's forward over sampled blocks (HyScale-GNN §III): each layer aggregates a block's sources
into its destinations, which are the block's first source rows."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from gnntrain.models import SparseAdjacency, run_layers


def block_forward(
    model,
    adjs: Sequence[SparseAdjacency],
    x: torch.Tensor,
    dropout: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
) -> torch.Tensor:
    """The model's aggregate/update layers over sampled blocks (dst rows are the first src rows)."""

    def layer_step(i, layer, h):
        adj = adjs[i]
        rows = torch.arange(adj.num_dst, device=h.device)
        return layer.update(h[: adj.num_dst], layer.aggregate(h, adj.spmm, rows))

    return run_layers(
        model, x, layer_step, None if dropout is None else lambda h, _layer: dropout(h)
    )
