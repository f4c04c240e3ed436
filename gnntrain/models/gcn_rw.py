"""GCN with the random-walk normalisation: h' = D^-1 (A+I) h W + b.

Kipf & Welling (Semi-Supervised Classification with Graph Convolutional Networks, §2) use the
symmetric D^-1/2 (A+I) D^-1/2; the row-normalised D^-1 (A+I) is the variant they list beside it
(the "mean" normalisation here, with ``model.self_loop``). One module plus
``configs/model/gcn_rw.yaml``: the modes ask its family what they need (it is linear, so the
aggregate-first rule applies; its weights factor into row scales).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gnntrain.models.gnn import Aggregate
from gnntrain.models.registry import ModelFamily, register_model
from gnntrain.sizing import aggregates_first


class RandomWalkGCNLayer(nn.Module):
    """One weight matrix and a bias around the neighbour mean (self included)."""

    def __init__(self, d_in: int, d_out: int, aggregate_first: Optional[bool] = None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.xavier_uniform_(self.weight)
        self.aggregate_first = aggregates_first(True, d_in, d_out, aggregate_first)

    def comm_width(self) -> int:
        return self.weight.shape[0] if self.aggregate_first else self.weight.shape[1]

    def aggregate(self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        return agg(h) if self.aggregate_first else agg(h @ self.weight)

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return (z @ self.weight if self.aggregate_first else z) + self.bias


register_model(ModelFamily(
    name="gcn_rw", build=lambda d_in, d_out, o: RandomWalkGCNLayer(d_in, d_out, o.aggregate_first),
    normalization="mean", linear=True, description="h' = D^-1 (A+I) h W + b"))
