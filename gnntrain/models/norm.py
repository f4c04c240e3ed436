"""Edge weights from *global* degrees (docs/design.md#exactness, rule 1), kept as
the two factors of each weight.

They are computed once on the whole graph, before partitioning, and shipped
with each partition's edges. Degrees counted per partition would be wrong.

Every model's weight factors as w_uv = src_scale[u] · dst_scale[v], so each
edge carries the pair (src_scale[u], dst_scale[v]): modes slice and reorder
edges as before, and :class:`~gnntrain.models.kernels.SparseAdjacency` turns
the factors back into two row scales around an unweighted SpMM (the form of
DGL's ``GraphConv``).

With the user's edge weights (``model.edge_weight=true``, docs/design.md#edge-weights) the degrees
are weighted, deg_w(v) = Σ_{u→v} w_uv (a self-loop weighs 1), and an edge carries one value,
src_scale[u] · w_uv · dst_scale[v] (:func:`edge_values`): it no longer factors, so the SpMM is the
weighted one. The scales are the same formulas over the weighted degrees.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch


def degree_scales(
    normalization: str,
    in_degree: Callable[[], torch.Tensor],
    out_degree: Callable[[], torch.Tensor],
    num_nodes: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """float64 (src_scale, dst_scale) per node for a model family's ``normalization``, from each
    node's in- and out-degree (self-loops counted; each asked for only where the formula needs it):
    an edge u→v weighs src_scale[u] · dst_scale[v] (see :func:`edge_weights`)."""
    ones = torch.ones(num_nodes, dtype=torch.float64)
    if normalization == "sum":
        return ones, ones
    # a node without such edges is never read through this scale: 1 (what clamping an integer
    # degree to 1 gave; a weighted degree may lie in (0, 1))
    in_deg = in_degree().to(torch.float64)
    if normalization == "mean":
        return ones, torch.where(in_deg > 0, in_deg.reciprocal(), ones)
    out_deg = out_degree().to(torch.float64)
    return (
        torch.where(out_deg > 0, out_deg.rsqrt(), ones),
        torch.where(in_deg > 0, in_deg.rsqrt(), ones),
    )


def edge_weights(
    normalization: str,
    src: torch.Tensor,
    dst: torch.Tensor,
    num_nodes: int,
    values: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """With ``values`` (the user's weight of each edge, self-loops 1): the 1-D float64 values of
    :func:`edge_values`. Without: float64 (E, 2) factors (src_scale[u], dst_scale[v]) per edge
    src→dst, for a model family's ``normalization`` (or a registered model's name, which stands
    for its family's):

    * gcn: 1/sqrt(out_deg(u)) and 1/sqrt(in_deg(v)), the symmetric
      D^-1/2 (A+I) D^-1/2 when self-loops are present (DGL GraphConv ``norm='both'``).
    * mean: 1 and 1/in_deg(v), the neighbour mean (DGL SAGEConv ``'mean'``).
    * sum: 1 and 1 (GIN; GAT computes its own attention weights).
    """
    if normalization not in ("gcn", "mean", "sum"):
        from gnntrain.models.registry import model_family

        normalization = model_family(normalization).normalization
    if values is not None:
        return edge_values(normalization, src, dst, num_nodes, values)
    src_scale, dst_scale = degree_scales(
        normalization,
        lambda: torch.bincount(dst, minlength=num_nodes),
        lambda: torch.bincount(src, minlength=num_nodes),
        num_nodes,
    )
    return torch.stack([src_scale[src], dst_scale[dst]], dim=1)


def weighted_degree(index: torch.Tensor, values: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """float64 Σ of ``values`` per node ``index`` (in-degree: index = dst; out-degree: src)."""
    return torch.zeros(num_nodes, dtype=torch.float64).index_add_(
        0, index, values.to(torch.float64)
    )


def scaled_values(
    src_scale: torch.Tensor,
    dst_scale: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    values: torch.Tensor,
) -> torch.Tensor:
    """float64 src_scale[u] · w_uv · dst_scale[v] per edge u→v: the one formula every path uses, so
    every mode computes the same value of an edge."""
    return src_scale[src] * values.to(torch.float64) * dst_scale[dst]


def edge_values(
    normalization: str, src: torch.Tensor, dst: torch.Tensor, num_nodes: int, values: torch.Tensor
) -> torch.Tensor:
    """float64 (E,) weight of each edge src→dst from the user's ``values`` (self-loops included,
    weighing 1) and the *weighted* degrees of the whole graph:

    * gcn: w_uv / sqrt(deg_w^out(u) · deg_w^in(v)), i.e. D_w^-1/2 (A_w + I) D_w^-1/2;
    * mean: w_uv / Σ_u w_uv (the weighted neighbour mean);
    * sum: w_uv (GIN's weighted sum)."""
    src_scale, dst_scale = degree_scales(
        normalization,
        lambda: weighted_degree(dst, values, num_nodes),
        lambda: weighted_degree(src, values, num_nodes),
        num_nodes,
    )
    return scaled_values(src_scale, dst_scale, src, dst, values)


def edge_weight_values(weights: torch.Tensor) -> torch.Tensor:
    """One weight per edge: the product of the factors (a 1-D tensor is returned as it is)."""
    return weights if weights.dim() == 1 else weights[:, 0] * weights[:, 1]


def transposed(weights: torch.Tensor) -> torch.Tensor:
    """The factors of the transposed adjacency (dst → src): the two columns swap."""
    return weights if weights.dim() == 1 else weights.flip(1)


def source_scale(weights: torch.Tensor, src: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """src_scale per node (zero where a node has no out-edge) from factored ``weights``."""
    return torch.zeros(num_nodes, dtype=weights.dtype).index_put_((src,), weights[:, 0])
