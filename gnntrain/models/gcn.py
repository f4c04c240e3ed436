"""GCN (Kipf & Welling, Semi-Supervised Classification with Graph Convolutional Networks, Eq. 2)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gnntrain.models.gnn import Aggregate
from gnntrain.models.registry import ModelFamily, register_model
from gnntrain.models.sparse_inputs import times_weight
from gnntrain.sizing import aggregates_first


class GCNLayer(nn.Module):
    """h' = Â·h·W + b (Kipf & Welling); order of Â and W chosen per layer."""

    def __init__(self, d_in: int, d_out: int, aggregate_first: Optional[bool]):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.xavier_uniform_(self.weight)
        self.aggregate_first = aggregates_first(True, d_in, d_out, aggregate_first)

    def comm_width(self) -> int:
        return self.weight.shape[0] if self.aggregate_first else self.weight.shape[1]

    def aggregate(
        self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        return agg(h) if self.aggregate_first else agg(times_weight(h, self.weight))

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        # addmm adds the bias into the product's own output: no second pass, no second N x d_out
        # tensor
        return torch.addmm(self.bias, z, self.weight) if self.aggregate_first else z + self.bias


register_model(
    ModelFamily(
        name="gcn",
        layer=GCNLayer,
        normalization="gcn",
        linear=True,
        description="h' = D^-1/2 (A+I) D^-1/2 h W + b",
    )
)
