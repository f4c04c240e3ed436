"""The edge side of an ingest: edges read a batch at a time from CSV/TSV, Parquet, NumPy (one
2xE/Ex2 array or two 1-D arrays), a scipy sparse ``.npz`` or a whole graph, each node named mapped
to its index (an unknown node refused with where it was read), with each edge's weight where the
ingest reads one (``--weight-column`` of a table, or ``--weights`` FILE.npy in edge order; a weight
that is NaN, infinite or negative refused with its row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np

from gnntrain.data.ingest.nodes import NodeIds, open_npy
from gnntrain.data.ingest.options import IngestOptions
from gnntrain.data.ingest.tables import (
    id_type_of,
    node_id_type,
    open_table,
    require_file,
    table_format,
)
from gnntrain.errors import DatasetError

EDGE_BATCH = 1 << 22  # edges per step from in-memory or .npy sources
FLOAT32_MAX = float(np.finfo(np.float32).max)  # weights are stored as float32 (ondisk.py)


def check_weights(weights: np.ndarray, locate, where: str) -> None:
    """One DatasetError naming the first weight that is NaN, infinite, negative or past float32's
    range (``locate(i)``: where the i-th of ``weights`` was read)."""
    bad = ~np.isfinite(weights) | (weights < 0) | (weights > FLOAT32_MAX)
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    value = float(weights[i])
    what = (
        "missing or NaN"
        if np.isnan(value)
        else "negative"
        if value < 0
        else "infinite"
        if np.isinf(value)
        else "beyond float32's range (weights are stored as float32)"
    )
    raise DatasetError(
        f"ingest: {where} {locate(i)}: the edge weight {value!r} is {what}; weights must be finite "
        f"and >= 0. Fix that row (or drop the edge) and ingest again."
    )


def edge_batches(
    opts: IngestOptions, ids: NodeIds, graph: Optional[Dict[str, Any]]
) -> Iterator[Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Any, int, int]]:
    """(src index, dst index, float64 weights or None, locate(i) -> text, done bytes, total bytes)
    per batch: :func:`_edge_batches` with the ``--weights`` file read beside it, every weight
    checked."""
    weights = None
    if opts.weights is not None:
        path = require_file(opts.weights, "--weights")
        if opts.weight_column:
            raise DatasetError(
                "ingest: give the weights once: --weight-column (a column of the edge table) or "
                "--weights FILE.npy, not both."
            )
        weights = open_npy(path, "--weights")
        if weights.ndim != 1 or weights.dtype.kind not in "fiu":
            raise DatasetError(
                f"ingest: --weights {path}: one number per edge (a 1-D array), got shape "
                f"{weights.shape} of {weights.dtype}."
            )
    offset = 0
    for s, d, w, locate, done, total in _edge_batches(opts, ids, graph):
        where = f"--edges {opts.edges[0]}" if opts.edges else f"--graph {opts.graph}"
        if weights is not None:
            w = weights.rows(offset, offset + s.shape[0])
            if w.shape[0] != s.shape[0]:
                raise DatasetError(
                    f"ingest: --weights {opts.weights} has {len(weights)} weights, but the edges "
                    "go on past them; give one weight per edge, in edge order."
                )
            locate = _weight_row(offset)
            where = f"--weights {opts.weights}"
        if w is not None:
            w = np.asarray(w, dtype=np.float64)
            check_weights(w, locate, where)
        offset += s.shape[0]
        yield s, d, w, locate, done, total
    if weights is not None and offset != len(weights):
        raise DatasetError(
            f"ingest: --weights {opts.weights} has {len(weights)} weights for {offset} edges; "
            "give one weight per edge, in edge order."
        )


def _weight_row(offset: int):
    return lambda i: f"row {offset + i + 1}"


# over the function budget: one branch per input format (CSV/TSV, Parquet, NumPy, npz, PyG, DGL)
def _edge_batches(
    opts: IngestOptions, ids: NodeIds, graph: Optional[Dict[str, Any]]
) -> Iterator[Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Any, int, int]]:
    """(src index, dst index, weights of a table's ``--weight-column`` or None, locate(i) -> text,
    done bytes, total bytes) per batch; unknown IDs refused."""
    if graph is not None and not opts.edges:
        ei = np.asarray(graph["edge_index"])
        yield from _array_batches(
            ei.shape[1],
            lambda lo, hi: (ei[0, lo:hi], ei[1, lo:hi]),
            ids,
            f"--graph {opts.graph}",
            _node_source(opts, ids),
        )
        return
    if opts.weight_column and (
        not opts.edges
        or table_format(Path(opts.edges[0]), opts.edges_format) not in ("csv", "tsv", "parquet")
    ):
        raise DatasetError(
            "ingest: --weight-column names a column of a CSV/TSV or Parquet edge table; for other "
            "edge sources give the weights as --weights FILE.npy (one number per edge, in edge "
            "order)."
        )
    if not opts.edges:
        raise DatasetError(
            "ingest: no edges given. Pass --edges FILE (CSV/TSV, Parquet, .npy, .npz) or --graph "
            "FILE."
        )
    files = [require_file(p, "--edges") for p in opts.edges]
    kind = table_format(files[0], opts.edges_format)
    if len(files) > 2 or (len(files) == 2 and kind != "npy"):
        raise DatasetError(
            "ingest: --edges takes one file, or two 1-D .npy files (sources, then destinations)."
        )
    if kind == "npy":  # read with pread a block at a time (a memory map would stay resident)
        yield from _npy_batches(opts, ids, files)
        return
    if kind == "npz":
        import scipy.sparse as sp

        try:
            coo = sp.load_npz(files[0]).tocoo()
        except Exception as exc:
            raise DatasetError(
                f"ingest: --edges {files[0]}: not a scipy sparse .npz ({type(exc).__name__}: "
                f"{exc})."
            ) from None
        if coo.shape[0] != coo.shape[1]:
            raise DatasetError(
                f"ingest: --edges {files[0]}: the adjacency matrix is "
                f"{coo.shape[0]}x{coo.shape[1]}; "
                f"it must be square (row = source, column = destination)."
            )
        yield from _array_batches(
            coo.nnz,
            lambda lo, hi: (coo.row[lo:hi], coo.col[lo:hi]),
            ids,
            f"--edges {files[0]}",
            _node_source(opts, ids),
        )
        return
    yield from _table_batches(opts, ids, files[0], kind)


def _npy_batches(opts: IngestOptions, ids: NodeIds, files):
    """:func:`_edge_batches` of one 2xE/Ex2 ``.npy`` or two 1-D ones (sources, destinations)."""
    arrays = [open_npy(f, "--edges") for f in files]
    for f, array in zip(files, arrays):
        if array.dtype.kind not in "iu":
            raise DatasetError(
                f"ingest: --edges {f}: node IDs in a .npy must be integers (got {array.dtype})."
            )
    if len(files) == 2:
        src, dst = arrays
        if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
            raise DatasetError(
                f"ingest: --edges {files[0]} {files[1]}: two edge files must be 1-D and of equal "
                f"length (got {src.shape} and {dst.shape})."
            )
        total, read = len(src), lambda lo, hi: (src.rows(lo, hi), dst.rows(lo, hi))
    else:
        (array,) = arrays
        if array.ndim != 2 or 2 not in array.shape:
            raise DatasetError(
                f"ingest: --edges {files[0]} has shape {array.shape}; an edge array must be 2xE "
                "or Ex2 (or give two 1-D files)."
            )
        if array.shape[0] == 2:
            total = array.shape[1]
            read = lambda lo, hi: (array.items(lo, hi - lo), array.items(total + lo, hi - lo))
        else:
            total = array.shape[0]
            read = lambda lo, hi: tuple(array.rows(lo, hi).T)
    where = f"--edges {' '.join(str(f) for f in files)}"
    yield from _array_batches(total, read, ids, where, _node_source(opts, ids))


def _table_batches(opts: IngestOptions, ids: NodeIds, path: Path, kind: str):
    """:func:`_edge_batches` of a CSV/TSV or Parquet edge table."""
    table = open_table(path, kind, opts.edges_csv)
    src_col = table.column(
        opts.src_column or ("src" if "src" in table.names else None), 0, "--src-column"
    )
    dst_col = table.column(
        opts.dst_column or ("dst" if "dst" in table.names else None), 1, "--dst-column"
    )
    if src_col == dst_col:
        raise DatasetError(
            f"ingest: {path}: --src-column and --dst-column name the same column {src_col!r}."
        )
    import pyarrow as pa

    weight_col = (
        table.column(opts.weight_column, -1, "--weight-column") if opts.weight_column else None
    )
    if weight_col in (src_col, dst_col):
        raise DatasetError(
            f"ingest: {path}: --weight-column names the edge's "
            f"{'source' if weight_col == src_col else 'destination'} column {weight_col!r}; name "
            "the column that holds each edge's weight."
        )

    for column in (src_col, dst_col):  # a Parquet column of floats (or else) is refused as IDs are
        node_id_type(table, column, opts.nodes.id_type)
    id_type = ids.type
    if not ids.identity and opts.nodes.id_type == "auto":
        edge_type = id_type_of(table, src_col, "auto")
        if edge_type != id_type and id_type.equals(pa.int64()):
            raise DatasetError(
                f"ingest: {path}: the edges name nodes by strings but the node table's IDs are "
                f"integers; the IDs must be the same kind (--id-type string reads both as text)."
            )
    columns = [src_col, dst_col] + ([weight_col] if weight_col else [])
    types = {
        src_col: id_type,
        dst_col: id_type,
        **({weight_col: pa.float64()} if weight_col else {}),
    }
    for batch in table.batches(columns, types):
        cols = [batch.table.column(c).combine_chunks() for c in (src_col, dst_col)]
        coded = [ids.encode(c) for c in cols]
        for col_name, col, code in zip((src_col, dst_col), cols, coded):
            if (code < 0).any():
                i = int(np.flatnonzero(code < 0)[0])
                raise DatasetError(
                    f"ingest: {path} {batch.locate(i)}, column {col_name!r}: node "
                    f"{col[i].as_py()!r} is not a node of the graph ({_node_source(opts, ids)})."
                )
        weights = None
        if weight_col:
            weights = (
                batch.table.column(weight_col)
                .combine_chunks()
                .to_numpy(zero_copy_only=False)
                .astype(np.float64)
            )
        yield coded[0], coded[1], weights, _row_of(batch), batch.done_bytes, table.size


def _row_of(batch):
    """``locate`` of a table's batch for a user: a CSV's file line, a Parquet file's 1-based row."""
    if batch.where == "row":
        return lambda i: f"row {int(batch.lines[i]) + 1}"
    return batch.locate


def _node_source(opts: IngestOptions, ids: NodeIds) -> str:
    if ids.identity:
        return f"nodes are 0..{ids.num_nodes - 1}"
    return f"nodes are the IDs of {opts.nodes.features}"


def _array_batches(total: int, read, ids: NodeIds, where: str, known: str):
    """Edges from arrays: ``read(lo, hi)`` -> (sources, destinations) of edges lo..hi-1; ``known``
    says which nodes exist, for the error on one that does not."""
    total = int(total)
    for lo in range(0, total, EDGE_BATCH):
        src, dst = read(lo, min(total, lo + EDGE_BATCH))
        s, d = ids.encode(np.asarray(src)), ids.encode(np.asarray(dst))
        for values, code in ((src, s), (dst, d)):
            if (code < 0).any():
                i = int(np.flatnonzero(code < 0)[0])
                raise DatasetError(
                    f"ingest: {where}, edge {lo + i}: node {values[i]} is not a node of the "
                    f"graph ({known})."
                )
        yield s, d, None, (lambda i, lo=lo: f"edge {lo + i}"), lo + s.shape[0], total
