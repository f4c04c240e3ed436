"""The direct path's plan side (HongTu, §4; docs/design.md#hongtu, "The direct path"): the graph as
a CSR in its own order (no edge lists), its row chunks, one part holding every node, the host and
disk-tier memory it needs and the disk bytes an epoch moves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from gnntrain.models.norm import degree_scales
from gnntrain.modes.hongtu.tiers import DISK

if TYPE_CHECKING:  # pragma: no cover
    pass


# mode.chunks=0: chunks of 65,536 rows (32 MiB per 128-wide float32 buffer)
ROWS_PER_CHUNK = 1 << 16


def chunk_ranges(num_nodes: int, chunks: int) -> List[Tuple[int, int]]:
    """Row ranges [lo, hi) of ``chunks`` near-equal chunks (0: of :data:`ROWS_PER_CHUNK` rows)."""
    n = max(1, -(-num_nodes // ROWS_PER_CHUNK)) if chunks <= 0 else min(int(chunks), num_nodes)
    cuts = np.linspace(0, num_nodes, n + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


@dataclass
class DirectGraph:
    """The graph as a destination-sorted CSR and its transpose (the same arrays when symmetric),
    without the model's self-loops, which the products add as a diagonal term."""

    num_nodes: int
    indptr: np.ndarray  # int64, N + 1: destination rows
    indices: np.ndarray  # int32 (int64 past 2^31 nodes): source columns
    t_indptr: np.ndarray
    t_indices: np.ndarray
    self_loop: bool
    normalization: str  # gcn | mean | sum (models.norm.edge_weights)
    # model.edge_weight: the user's weight of each entry of (indptr, indices) and of its transpose
    # (the same array when symmetric: an edge and its reverse weigh the same); None: unweighted
    values: Optional[np.ndarray] = None
    t_values: Optional[np.ndarray] = None

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0]) + (self.num_nodes if self.self_loop else 0)

    def scales(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """float64 (src_scale, dst_scale): edge u→v weighs src_scale[u]·dst_scale[v] (edge_weights'
        factors), times w_uv where the graph has ``values`` (the degrees are then weighted)."""
        loop = 1 if self.self_loop else 0
        if self.values is not None:
            from gnntrain.modes.row_edges import weighted_degrees

            n = self.num_nodes
            in_w = weighted_degrees(self.indptr, self.indices, self.values, n, True)[0]
            out_w = weighted_degrees(self.t_indptr, self.t_indices, self.t_values, n, True)[0]
            return degree_scales(
                self.normalization,
                lambda: torch.from_numpy(in_w + loop),
                lambda: torch.from_numpy(out_w + loop),
                n,
            )
        return degree_scales(
            self.normalization,
            lambda: torch.from_numpy(np.diff(self.indptr) + loop),
            lambda: torch.from_numpy(np.diff(self.t_indptr) + loop),
            self.num_nodes,
        )

    def entry_values(self, transpose: bool, dtype: torch.dtype) -> np.ndarray:
        """Each entry's whole weight src_scale[u] · w_uv · dst_scale[v] (``values`` only) of the
        CSR or its transpose, in ``dtype``, computed a block of entries at a time."""
        from gnntrain.modes.row_edges import DEGREE_ROWS

        src_scale, dst_scale = (s.numpy() for s in self.scales())
        indptr, indices, values = (
            (self.t_indptr, self.t_indices, self.t_values)
            if transpose
            else (self.indptr, self.indices, self.values)
        )
        # forward rows are destinations (columns sources); transposed rows are sources
        row_scale, col_scale = (src_scale, dst_scale) if transpose else (dst_scale, src_scale)
        out = np.empty(int(indptr[-1]), dtype=torch.empty((), dtype=dtype).numpy().dtype)
        n, row = self.num_nodes, 0
        while row < n:
            stop = int(np.searchsorted(indptr, indptr[row] + DEGREE_ROWS, side="right")) - 1
            stop = min(n, max(stop, row + 1))
            lo, hi = int(indptr[row]), int(indptr[stop])
            rows = np.repeat(np.arange(row, stop, dtype=np.int64), np.diff(indptr[row : stop + 1]))
            cols = np.asarray(indices[lo:hi], dtype=np.int64)
            # the order of models.norm.scaled_values: src_scale · w · dst_scale
            w = np.asarray(values[lo:hi], dtype=np.float64)
            src_part = row_scale[rows] if transpose else col_scale[cols]
            dst_part = col_scale[cols] if transpose else row_scale[rows]
            out[lo:hi] = src_part * w * dst_part
            row = stop
        return out


def _csr_of(
    rows: np.ndarray, cols: np.ndarray, num_nodes: int, values: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """(indptr, indices, values in the same order or None) of edges rows→cols, columns ascending
    per row: the native kernel's own builder."""
    from gnntrain.models._native import _csr

    indptr, indices, sorted_values = _csr(
        torch.from_numpy(rows),
        torch.from_numpy(cols),
        num_nodes,
        num_nodes,
        None if values is None else torch.from_numpy(np.asarray(values)),
    )
    return indptr, indices, None if sorted_values is None else sorted_values.numpy()


def direct_graph(data, self_loop: bool, normalization: str, weighted: bool = False) -> DirectGraph:
    """The CSR pair of ``data``: an ingested folder's mapped CSR as it is (its transpose built in
    memory only when the graph is not symmetric), else one built from the edge lists; with
    ``weighted`` (model.edge_weight), each entry's weight beside it."""
    n = int(data.num_nodes)
    csr = getattr(data, "csr", None)
    if csr is not None:
        indptr, indices = np.asarray(csr[0], dtype=np.int64), csr[1]
        values = data.csr_weights if weighted else None
        if getattr(data, "symmetric", False):
            return DirectGraph(
                n, indptr, indices, indptr, indices, self_loop, normalization, values, values
            )
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        t_indptr, t_indices, t_values = _csr_of(np.asarray(indices, dtype=np.int64), dst, n, values)
        return DirectGraph(
            n, indptr, indices, t_indptr, t_indices, self_loop, normalization, values, t_values
        )
    src, dst = data.src.numpy(), data.dst.numpy()
    w = data.edge_weight.numpy() if weighted else None
    indptr, indices, values = _csr_of(dst, src, n, w)
    t_indptr, t_indices, t_values = _csr_of(src, dst, n, w)
    return DirectGraph(
        n, indptr, indices, t_indptr, t_indices, self_loop, normalization, values, t_values
    )


def direct_disk_traffic(
    num_nodes: int, dims: Sequence[int], tiers: Dict[str, str], self_row: bool, value_bytes: int
) -> Dict[str, int]:
    """Disk-tier bytes of one training epoch after the first (the first also writes cache0 once):
    every chunk-range read and write of a table on disk, and one whole pass of the table a product
    reads."""
    on_disk = {name for name, tier in tiers.items() if tier == DISK}
    layers = len(dims) - 1
    table = lambda name, width: num_nodes * width * value_bytes if name in on_disk else 0
    # layer 0 reads the fixed inputs' cached product
    read = table("cache0", dims[0]) if layers else 0
    write = 0
    for layer in range(1, layers):  # forward
        d = dims[layer]
        # the product's pass (+ the chunk's own rows)
        read += table(f"act{layer}", d) * (2 if self_row else 1)
        write += table(f"cache{layer}", d)
        if layer + 1 < layers:
            write += table(f"act{layer + 1}", dims[layer + 1])
    if layers > 1:
        write += table("act1", dims[1])  # layer 0's output
    for layer in range(layers - 1, -1, -1):  # backward
        d = dims[layer]
        if layer + 1 < layers:
            read += table(f"grad{layer + 1}", dims[layer + 1])
        read += table(f"cache{layer}", d)
        if self_row and layer > 0:
            read += table(f"act{layer}", d)
        if layer > 0:
            write += table(f"cache{layer}", d)  # the aggregation's gradient, over the cache
            read += table(f"cache{layer}", d)  # the transposed product's pass
            write += table(f"grad{layer}", d)
            if self_row:  # the own rows' gradient first, the product added onto it
                write += table(f"grad{layer}", d)
                read += table(f"grad{layer}", d)
    return {"disk_read": int(read), "disk_write": int(write)}


def direct_memory(ctx, tiers: Dict[str, str], chunks: int):
    """Host bytes of the direct path (a MemoryEstimate): the CSR and its row scales, the input
    features, the tables kept on the host, the logits, one chunk's working set, and - where tables a
    product reads at random rows (activations, caches) are on disk - the page cache that must hold
    the largest of them through its layer (docs/design.md#hongtu: the page cache is the buffer; the
    features play that part in layer 0, so only what exceeds them is added). The transposed CSR of a
    directed graph comes on top."""
    from gnntrain.modes.hongtu.tiers import HOST, table_width
    from gnntrain.plan_types import MemoryEstimate
    from gnntrain.sizing import PROCESS_BYTES

    n, b, dims = ctx.num_nodes, ctx.dtype_bytes, ctx.dims
    graph = 8 * (n + 1) + (4 if n < 2**31 else 8) * ctx.num_edges + 3 * 8 * n
    features = n * ctx.feat_dim * b
    size = {name: n * table_width(name, dims) * b for name in tiers}
    on_host = sum(v for name, v in size.items() if tiers[name] == HOST)
    random_reads = max(
        [v for name, v in size.items() if tiers[name] != HOST and not name.startswith("grad")] + [0]
    )
    rows = ROWS_PER_CHUNK if chunks <= 0 else -(-n // chunks)
    held = (
        on_host
        + max(0, random_reads - features)
        + 3 * n * dims[-1] * b
        + 8 * n
        + 8 * rows * max(dims) * b
    )
    return MemoryEstimate(
        graph_bytes=int(graph),
        feature_bytes=int(features),
        activation_bytes=int(held),
        process_bytes=PROCESS_BYTES,
    )


# ------------------------------------------------------------------ the mode's side
def whole_graph_partitioning(num_nodes: int):
    """One part holding every node in its own order: the direct path's partitioning, made without
    the edges."""
    from gnntrain.partition.layout import Partitioning, PartitionMetrics

    ids = np.arange(num_nodes, dtype=np.int64)
    metrics = PartitionMetrics(
        num_parts=1,
        edge_cut=0,
        total_volume=0,
        max_send_volume=0,
        max_recv_volume=0,
        send_imbalance=0.0,
        nnz_balance=1.0,
        vertex_balance=1.0,
        send_volume=(0,),
        recv_volume=(0,),
    )
    return Partitioning(
        parts=np.zeros(num_nodes, dtype=np.int64),
        perm=ids,
        inverse=ids,
        offsets=np.array([0, num_nodes], dtype=np.int64),
        metrics=metrics,
    )


def direct_figures(
    num_nodes: int,
    chunks: List[Tuple[int, int]],
    dims: Sequence[int],
    tiers: Dict[str, str],
    self_row: bool,
    value_bytes: int,
    host_budget: Optional[int],
    disk_dir: str,
) -> Dict[str, object]:
    """The plan's and the summary's figures of the direct path: chunks, tiers, predicted disk
    bytes."""
    from gnntrain.modes.hongtu.tiers import disk_bytes_needed

    on_disk = any(tier == DISK for tier in tiers.values())
    return {
        "direct": True,
        "chunks_per_part": len(chunks),
        "rows_per_chunk": max(hi - lo for lo, hi in chunks),
        "device_memory_cap": 0,
        "tiers": {
            "host_budget": host_budget,
            "tables": tiers,
            "disk_dir": disk_dir if on_disk else None,
            "disk_bytes_per_rank": disk_bytes_needed(num_nodes, dims, tiers, value_bytes),
            "predicted_disk_bytes_per_epoch": direct_disk_traffic(
                num_nodes, dims, tiers, self_row, value_bytes
            ),
        },
    }
