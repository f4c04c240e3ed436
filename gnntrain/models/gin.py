"""GIN (Xu et al., How Powerful are Graph Neural Networks?, Eq. 4.1)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from gnntrain.models.gnn import Aggregate
from gnntrain.models.registry import ModelFamily, register_model


class GINLayer(nn.Module):
    """h' = MLP((1+ε)·h + Σ_{u∈N(v)} h_u) (Xu et al.); ε lives on the aggregation side."""

    def __init__(self, d_in: int, d_out: int, eps_learnable: bool = True):
        """``eps_learnable`` (``model.eps_learnable``): ε is a parameter (GIN-ε) rather than fixed
        at 0 (GIN-0)."""
        super().__init__()
        eps = torch.zeros(1)
        if eps_learnable:
            self.eps = nn.Parameter(eps)
        else:
            self.register_buffer("eps", eps)
        self.mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(), nn.Linear(d_out, d_out))

    def comm_width(self) -> int:
        return self.mlp[0].weight.shape[1]

    def aggregate(
        self, h: torch.Tensor, agg: Aggregate, rows: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """``rows``: when ``agg`` yields only these destination rows (MoP's pipeline chunks)."""
        return self.self_term(h if rows is None else h[rows]) + agg(h)

    def self_term(self, h: torch.Tensor) -> torch.Tensor:
        """(1+ε)·h: row-local, so a mode that splits the aggregation by columns may add it on the
        row side instead (``self_term(h) + agg(h)`` is the same sum either way)."""
        return (1 + self.eps) * h

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.mlp(z)


register_model(
    ModelFamily(
        name="gin",
        layer=GINLayer,
        normalization="sum",
        self_row=True,
        description="h' = MLP((1+eps) h + sum(h_N))",
    )
)
