"""Negative edges for link prediction's training loss (``task.negatives``, ``task.num_negatives``).

The j-th negative of the train edge with global index i in epoch e keeps the edge's first endpoint
and draws the second from a hash of (seed, e, i, j): a counter-based draw that needs no shared
random state, so every mode and world size draws the same negatives for the same edge, whichever
rank scores it (as :class:`~gnntrain.models.GlobalDropout` draws its masks).
"""

from __future__ import annotations

from typing import Optional

import torch

from gnntrain.models.gnn import hash_stream, hash_uniform


def draw_negatives(
    edge_index: torch.Tensor,
    per_edge: int,
    num_nodes: int,
    seed: int,
    epoch: int,
    degree_cdf: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """(len(edge_index), per_edge) node ids: uniform over the nodes, or, with ``degree_cdf`` (the
    cumulative train degree), in proportion to each node's degree (a node without train edges is
    never drawn)."""
    k = int(per_edge)
    keys = edge_index.to(torch.int64).view(-1, 1) * k + torch.arange(k, dtype=torch.int64)
    u = hash_uniform(keys.reshape(-1), hash_stream(seed, epoch, 0x4E45)).view(-1, k)
    if degree_cdf is None:
        return (u * num_nodes).to(torch.int64).clamp_(max=num_nodes - 1)
    drawn = torch.searchsorted(degree_cdf, u * degree_cdf[-1], right=True)
    return drawn.clamp_(max=num_nodes - 1)
