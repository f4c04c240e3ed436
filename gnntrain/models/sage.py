"""GraphSAGE with the mean aggregator (Hamilton et al., Inductive Representation Learning on Large
Graphs, Alg. 1)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gnntrain.models.gnn import Aggregate
from gnntrain.models.registry import ModelFamily, register_model
from gnntrain.models.sparse_inputs import times_weight
from gnntrain.sizing import aggregates_first


class SAGELayer(nn.Module):
    """h' = h·W_self + mean_{u∈N(v)} h_u · W_neigh + b (Hamilton et al., mean aggregator).

    The mean is linear, so mean(h)·W_neigh = mean(h·W_neigh): like DGL's ``SAGEConv``
    the narrower side is aggregated (``aggregate_first`` None: aggregate unless the
    layer narrows), which halves neither accuracy nor exactness, only the SpMM width."""

    def __init__(self, d_in: int, d_out: int, aggregate_first: Optional[bool] = None):
        super().__init__()
        self.aggregate_first = aggregates_first(True, d_in, d_out, aggregate_first)
        self.fc_self = nn.Linear(d_in, d_out, bias=False)
        self.fc_neigh = nn.Linear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out))
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    def comm_width(self) -> int:
        return (
            self.fc_self.weight.shape[1] if self.aggregate_first else self.fc_self.weight.shape[0]
        )

    def aggregate(
        self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        if self.aggregate_first:
            return agg(h)
        return agg(times_weight(h, self.fc_neigh.weight.t()))

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        # b + h·W_self (+ z·W_neigh) as addmm's, each adding into its input: no separate passes for
        # the sums
        out = times_weight(h, self.fc_self.weight.t(), self.bias)
        return torch.addmm(out, z, self.fc_neigh.weight.t()) if self.aggregate_first else out + z


register_model(
    ModelFamily(
        name="sage",
        layer=SAGELayer,
        normalization="mean",
        linear=True,
        self_row=True,
        description="h' = h W_self + mean(h_N) W_neigh + b",
    )
)
