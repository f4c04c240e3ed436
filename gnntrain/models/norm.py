"""Edge weights from *global* degrees (notes/exactness.md, first rule).

They are computed once on the whole graph, before partitioning, and shipped
with each partition's edges. Degrees counted per partition would be wrong.
"""
from __future__ import annotations

import torch


def edge_weights(model: str, src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """float64 weight per edge src→dst for the model's aggregation.

    * gcn: 1/sqrt(out_deg(u)·in_deg(v)), the symmetric D^-1/2 (A+I) D^-1/2 when
      self-loops are present (DGL GraphConv ``norm='both'``).
    * sage: 1/in_deg(v), the neighbour mean (DGL SAGEConv ``'mean'``).
    * gin, gat: 1 (sum; GAT computes its own attention weights).
    """
    if model == "gcn":
        out_deg = torch.bincount(src, minlength=num_nodes).clamp(min=1).to(torch.float64)
        in_deg = torch.bincount(dst, minlength=num_nodes).clamp(min=1).to(torch.float64)
        return out_deg[src].rsqrt() * in_deg[dst].rsqrt()
    if model == "sage":
        in_deg = torch.bincount(dst, minlength=num_nodes).clamp(min=1).to(torch.float64)
        return 1.0 / in_deg[dst]
    if model in ("gin", "gat"):
        return torch.ones(src.numel(), dtype=torch.float64)
    raise ValueError(f"unknown model {model!r}")
