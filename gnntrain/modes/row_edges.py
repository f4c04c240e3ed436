"""The in-edges of a part's rows read from the graph's CSR, so a multi-rank prepare never builds the
whole graph's edge lists (docs/design.md#partition-store).

:func:`gnntrain.modes.single.graph_tensors` gives the whole graph as COO: src, dst and the weight
factors, 32 to 40 bytes per edge before any part is cut out of it. :class:`RowEdges` gives the same
edges one row set at a time from a destination-sorted CSR (an ingested folder's memory-mapped
``indptr``/``indices``, read where it lies): each row's in-edges in CSR order, then its self-loop
where the model adds one, weighted by the factors of :func:`gnntrain.models.norm.edge_weights` from
*global* degrees (exactness rule 1), which take two arrays of N. The order within a row is the COO
path's (its edges are the CSR's, stably sorted by destination, loops last), so a part holds the same
edges in the same order either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch

from gnntrain.models.norm import degree_scales
from gnntrain.models.registry import model_family

DEGREE_ROWS = 1 << 20  # CSR entries counted per step for the out-degrees


@dataclass(frozen=True)
class RowEdges:
    """In-edges by destination row, with the model's self-loops and weight factors."""

    indptr: np.ndarray  # int64, N + 1
    indices: np.ndarray  # int32 or int64 sources, memory-mapped where the graph was ingested
    self_loop: bool
    src_scale: torch.Tensor  # float64, N: an edge u→v weighs src_scale[u] · dst_scale[v]
    dst_scale: torch.Tensor
    dtype: torch.dtype  # the run's: float32 halves the factors

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0]) - 1

    def rows(self, rows: np.ndarray) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(position of the destination in ``rows``, source ID, weight factors (E, 2)) of every
        in-edge of the rows ``rows`` (global IDs, in the order given), row by row."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.indptr[rows]
        counts = self.indptr[rows + 1] - starts
        loop = 1 if self.self_loop else 0
        sizes = counts + loop
        first = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=first[1:])
        total = int(first[-1])
        dst = np.repeat(np.arange(rows.size, dtype=np.int64), sizes)
        src = np.empty(total, dtype=np.int64)
        edges = int(counts.sum())
        if edges:
            # the k-th in-edge of row i sits at indptr[rows[i]] + k in the CSR, first[i] + k here
            row_of = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
            within = np.arange(edges, dtype=np.int64) - (np.cumsum(counts) - counts)[row_of]
            src[first[row_of] + within] = self.indices[starts[row_of] + within]
        if loop:
            src[first[1:] - 1] = rows
        src_t, dst_t = torch.from_numpy(src), torch.from_numpy(dst)
        weights = torch.stack(
            [self.src_scale[src_t], self.dst_scale[torch.from_numpy(rows)[dst_t]]], dim=1
        )
        return dst_t, src_t, weights.to(self.dtype)


def transposed_rows(
    edges: RowEdges, rows: np.ndarray
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(destination ID, position of the source in ``rows``, weight factors (E, 2)) of every edge
    *leaving* the rows ``rows``, for a CSR whose reverse edges are all present: a row's
    out-neighbours are then its in-neighbours, and each edge u→v carries (src_scale[u],
    dst_scale[v]) (CAGNET's transposed blocks, :mod:`gnntrain.modes.partition`)."""
    position, neighbour, _ = edges.rows(rows)
    rows_t = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    weights = torch.stack([edges.src_scale[rows_t[position]], edges.dst_scale[neighbour]], dim=1)
    return neighbour, position, weights.to(edges.dtype)


def out_degrees(indptr: np.ndarray, indices: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each node's out-degree (its count among the CSR's sources), a block at a time."""
    degree = np.zeros(num_nodes, dtype=np.int64)
    total = int(indptr[-1])
    for lo in range(0, total, DEGREE_ROWS):
        degree += np.bincount(
            np.asarray(indices[lo : min(total, lo + DEGREE_ROWS)]), minlength=num_nodes
        )
    return degree


def row_edges(data, settings) -> Optional[RowEdges]:
    """:class:`RowEdges` of ``data`` for the run's model, or None where the graph has no CSR (it
    was built in memory as edge lists: the COO path serves it). Made once per graph and model
    (kept on the graph object)."""
    csr = getattr(data, "csr", None)
    if csr is None:
        return None
    model = settings.model
    normalization = model_family(model.name, model.target).normalization
    key = (normalization, bool(model.self_loop), settings.dtype)
    cached = getattr(data, "_row_edges", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    indptr = np.asarray(csr[0], dtype=np.int64)
    n = int(data.num_nodes)
    loop = 1 if model.self_loop else 0
    in_degree = np.diff(indptr)
    src_scale, dst_scale = degree_scales(
        normalization,
        lambda: torch.from_numpy(in_degree + loop),
        lambda: torch.from_numpy(
            (in_degree if getattr(data, "symmetric", False) else out_degrees(indptr, csr[1], n))
            + loop
        ),
        n,
    )
    dtype = torch.float32 if settings.dtype == "float32" else torch.float64
    edges = RowEdges(indptr, csr[1], bool(model.self_loop), src_scale, dst_scale, dtype)
    data._row_edges = (key, edges)
    return edges
