"""The edges a mode trains on, with the model's self-loops and weights: the whole graph's as COO
(:func:`graph_tensors`), or a part's rows read from the graph's CSR (:class:`RowEdges`), so a
multi-rank prepare never builds the whole graph's edge lists (docs/design.md#partition-store).

:func:`graph_tensors` gives the whole graph as COO: src, dst and the weight
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

from gnntrain.models.norm import degree_scales, edge_weights, scaled_values
from gnntrain.models.registry import model_family
from gnntrain.plan_types import RunSettings

DEGREE_ROWS = 1 << 20  # CSR entries counted per step for the out-degrees


def graph_tensors(data, settings: RunSettings):
    """Edges with the model's self-loops and their global-degree weight factors (with
    ``model.edge_weight``: one value per edge from the weighted degrees), computed in float64 and
    kept in the run's dtype (float32 halves them)."""
    model = settings.model
    src, dst = data.edges(bool(model.self_loop))
    values = user_edge_values(data, settings)
    weights = edge_weights(
        model_family(model.name, model.target).normalization, src, dst, data.num_nodes, values
    )
    return src, dst, weights.float() if settings.dtype == "float32" else weights


def user_edge_values(data, settings: RunSettings):
    """float64 weights of ``data.edges(self_loop)`` where the run aggregates with them
    (``model.edge_weight``), else None; a graph without weights is refused (the plan refuses it
    first)."""
    if not getattr(settings.model, "edge_weight", False):
        return None
    values = data.edge_values(bool(settings.model.self_loop))
    if values is None:
        from gnntrain.errors import DatasetError

        raise DatasetError(
            f"model.edge_weight=true, but the graph {data.name} has no edge weights; ingest it "
            "with --weight-column (or set model.edge_weight=false)."
        )
    return values


@dataclass(frozen=True)
class RowEdges:
    """In-edges by destination row, with the model's self-loops and weight factors."""

    indptr: np.ndarray  # int64, N + 1
    indices: np.ndarray  # int32 or int64 sources, memory-mapped where the graph was ingested
    self_loop: bool
    src_scale: torch.Tensor  # float64, N: an edge u→v weighs src_scale[u] · dst_scale[v]
    dst_scale: torch.Tensor
    dtype: torch.dtype  # the run's: float32 halves the factors
    # each CSR entry's weight (model.edge_weight; mapped float32), or None: the factors above
    values: Optional[np.ndarray] = None

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0]) - 1

    def rows(self, rows: np.ndarray) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(position of the destination in ``rows``, source ID, weight factors (E, 2), or with
        ``values`` one weight per edge (E,)) of every in-edge of the rows ``rows`` (global IDs, in
        the order given), row by row."""
        position, src_t, raw = self._gather(rows)
        dst_ids = torch.from_numpy(np.asarray(rows, dtype=np.int64))[position]
        if raw is not None:
            weights = scaled_values(self.src_scale, self.dst_scale, src_t, dst_ids, raw)
        else:
            weights = torch.stack([self.src_scale[src_t], self.dst_scale[dst_ids]], dim=1)
        return position, src_t, weights.to(self.dtype)

    def _gather(self, rows) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """(position of the destination in ``rows``, source ID, the user's float64 weight of each
        edge or None) of the rows' in-edges, row by row, each row's self-loop last (weight 1)."""
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
        raw = None if self.values is None else np.ones(total, dtype=np.float64)
        edges = int(counts.sum())
        if edges:
            # the k-th in-edge of row i sits at indptr[rows[i]] + k in the CSR, first[i] + k here
            row_of = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
            within = np.arange(edges, dtype=np.int64) - (np.cumsum(counts) - counts)[row_of]
            at = starts[row_of] + within
            src[first[row_of] + within] = self.indices[at]
            if raw is not None:
                raw[first[row_of] + within] = self.values[at]
        if loop:
            src[first[1:] - 1] = rows
        return (
            torch.from_numpy(dst),
            torch.from_numpy(src),
            None if raw is None else torch.from_numpy(raw),
        )


def transposed_rows(
    edges: RowEdges, rows: np.ndarray
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(destination ID, position of the source in ``rows``, weight factors (E, 2)) of every edge
    *leaving* the rows ``rows``, for a CSR whose reverse edges are all present: a row's
    out-neighbours are then its in-neighbours, and each edge u→v carries (src_scale[u],
    dst_scale[v]) (CAGNET's transposed blocks, :mod:`gnntrain.modes.partition`); with weights, one
    value src_scale[u] · w_uv · dst_scale[v], w_uv read at the reverse entry (a symmetric graph's
    weights are symmetric: ingest gives an edge and its reverse one weight)."""
    position, neighbour, raw = edges._gather(rows)
    rows_t = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    if raw is not None:
        weights = scaled_values(edges.src_scale, edges.dst_scale, rows_t[position], neighbour, raw)
    else:
        weights = torch.stack(
            [edges.src_scale[rows_t[position]], edges.dst_scale[neighbour]], dim=1
        )
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


def weighted_degrees(
    indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, num_nodes: int, symmetric: bool
) -> Tuple[np.ndarray, np.ndarray]:
    """float64 (in, out) weighted degrees Σ w over each node's in- and out-edges, from a CSR and
    its entries' weights, a block of about DEGREE_ROWS entries at a time."""
    in_deg = np.zeros(num_nodes, dtype=np.float64)
    out_deg = None if symmetric else np.zeros(num_nodes, dtype=np.float64)
    row = 0
    while row < num_nodes:
        stop = int(np.searchsorted(indptr, indptr[row] + DEGREE_ROWS, side="right")) - 1
        stop = min(num_nodes, max(stop, row + 1))
        lo, hi = int(indptr[row]), int(indptr[stop])
        w = np.asarray(values[lo:hi], dtype=np.float64)
        row_of = np.repeat(np.arange(stop - row, dtype=np.int64), np.diff(indptr[row : stop + 1]))
        in_deg[row:stop] = np.bincount(row_of, weights=w, minlength=stop - row)
        if out_deg is not None:
            out_deg += np.bincount(np.asarray(indices[lo:hi]), weights=w, minlength=num_nodes)
        row = stop
    return in_deg, in_deg if out_deg is None else out_deg


def row_edges(data, settings) -> Optional[RowEdges]:
    """:class:`RowEdges` of ``data`` for the run's model, or None where the graph has no CSR (it
    was built in memory as edge lists: the COO path serves it). Made once per graph and model
    (kept on the graph object)."""
    csr = getattr(data, "csr", None)
    if csr is None:
        return None
    model = settings.model
    normalization = model_family(model.name, model.target).normalization
    weighted = bool(getattr(model, "edge_weight", False))
    key = (normalization, bool(model.self_loop), settings.dtype, weighted)
    cached = getattr(data, "_row_edges", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    indptr = np.asarray(csr[0], dtype=np.int64)
    n = int(data.num_nodes)
    loop = 1 if model.self_loop else 0
    symmetric = getattr(data, "symmetric", False)
    values = getattr(data, "csr_weights", None) if weighted else None
    if weighted and values is None:
        user_edge_values(data, settings)  # refuses the graph without weights
    if values is not None:
        in_w, out_w = weighted_degrees(indptr, csr[1], values, n, symmetric)
        in_degree, out_degree = (
            (lambda: torch.from_numpy(in_w + loop)),
            (lambda: torch.from_numpy(out_w + loop)),
        )
    else:
        counts = np.diff(indptr)
        in_degree = lambda: torch.from_numpy(counts + loop)
        out_degree = lambda: torch.from_numpy(
            (counts if symmetric else out_degrees(indptr, csr[1], n)) + loop
        )
    src_scale, dst_scale = degree_scales(normalization, in_degree, out_degree, n)
    dtype = torch.float32 if settings.dtype == "float32" else torch.float64
    edges = RowEdges(indptr, csr[1], bool(model.self_loop), src_scale, dst_scale, dtype, values)
    data._row_edges = (key, edges)
    return edges
