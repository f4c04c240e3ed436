"""One-head GAT (Velickovic et al., Graph Attention Networks, Eqs. 1-4)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from gnntrain.models.registry import ModelFamily, register_model


class GATLayer(nn.Module):
    """One-head GAT (Veličković et al.; DGL ``GATConv`` with ``num_heads=1`` and no
    feature/attention dropout): e_uv = LeakyReLU(a_l·Wh_u + a_r·Wh_v), α = softmax
    of e over v's in-edges, h'_v = Σ_u α_uv·Wh_u + b.

    The attention needs both endpoints, so ``aggregate`` takes the edge list
    from ``agg.edge_index()`` (a :class:`SparseAdjacency`) instead of an SpMM;
    modes that split the graph call :meth:`attend` on their own row blocks.
    """

    # attention scores read the layer's input rows (the estimates' layer order)
    aggregate_first = True

    def __init__(self, d_in: int, d_out: int, negative_slope: float = 0.2, heads: int = 1):
        """``model.negative_slope``: the LeakyReLU slope of the attention scores; ``model.heads``:
        one (the only count this layer implements)."""
        if heads != 1:
            raise ValueError(
                f"{heads} heads asked for; the GAT layer here has one head. Fix: use model.heads=1"
            )
        super().__init__()
        self.fc = nn.Linear(d_in, d_out, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, d_out))
        self.attn_r = nn.Parameter(torch.empty(1, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        self.negative_slope = negative_slope
        gain = nn.init.calculate_gain("relu")
        for weight in (self.fc.weight, self.attn_l, self.attn_r):
            nn.init.xavier_normal_(weight, gain=gain)

    def comm_width(self) -> int:
        return self.fc.weight.shape[1]

    def attend(
        self,
        h_src: torch.Tensor,
        dst: torch.Tensor,
        src: torch.Tensor,
        dst_rows: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Attention-weighted sum into the destinations; ``src`` indexes ``h_src``, ``dst``
        the destinations, whose own rows are ``h_src[dst_rows]`` (all of ``h_src`` if None)."""
        z = self.fc(h_src)
        z_dst = z if dst_rows is None else z[dst_rows]
        el = (z * self.attn_l).sum(-1)
        er = (z_dst * self.attn_r).sum(-1)
        e = F.leaky_relu(el[src] + er[dst], self.negative_slope)
        num_dst = z_dst.shape[0]
        e_max = torch.full((num_dst,), float("-inf"), dtype=e.dtype, device=e.device)
        # a shift: softmax is invariant to it
        e_max = e_max.scatter_reduce(0, dst, e.detach(), "amax")
        w = torch.exp(e - e_max[dst])
        denom = torch.zeros(num_dst, dtype=e.dtype, device=e.device).index_add(0, dst, w)
        alpha = (w / denom[dst]).unsqueeze(1)
        return torch.zeros_like(z_dst).index_add(0, dst, alpha * z[src])

    def aggregate(self, h: torch.Tensor, agg, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        dst, src = agg.edge_index()
        return self.attend(h, dst, src)

    def update(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return z + self.bias


register_model(
    ModelFamily(
        name="gat",
        layer=GATLayer,
        normalization="sum",
        elementwise=False,
        description="h'_v = sum_u alpha_uv W h_u + b, one head",
    )
)
