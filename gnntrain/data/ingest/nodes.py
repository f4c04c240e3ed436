"""The node side of an ingest: which nodes exist (and their IDs), features, labels and masks.

Nodes come from, in this order of preference: a node table keyed by ID (Parquet/CSV; its row order
is the node order), a ``.npy`` feature matrix (nodes are 0..N-1), or a whole-graph file (PyG/DGL).
Arrays are written straight into the output folder, a batch at a time.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from gnntrain.data.ingest.tables import (
    CsvOptions,
    ParquetTable,
    id_type_of,
    open_table,
    require_file,
    table_format,
)
from gnntrain.data.ondisk import NpyFile
from gnntrain.errors import DatasetError

LABEL_NAMES = ("label", "labels", "y", "class")
MASK_COLUMNS = ("train_mask", "val_mask", "test_mask")
FEATURE_ROWS = 1 << 16  # rows copied per step from a .npy feature matrix


class NodeIds:
    """The map from a user's node ID to its index 0..N-1."""

    def __init__(self, ids=None, num_nodes: Optional[int] = None):
        import pyarrow as pa

        self.ids = ids  # pyarrow Array in node order; None: the IDs are the indices
        self.num_nodes = int(num_nodes if ids is None else len(ids))
        self.type = pa.int64() if ids is None else ids.type

    @property
    def identity(self) -> bool:
        return self.ids is None

    def name(self, index: int) -> str:
        return str(index if self.ids is None else self.ids[int(index)].as_py())

    def encode(self, values) -> np.ndarray:
        """Indices of ``values`` (a pyarrow Array or numpy ints); -1 where a value names no node."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.ids is None:
            if isinstance(values, (pa.Array, pa.ChunkedArray)):
                values = values.to_numpy(zero_copy_only=False)
            out = np.asarray(values).astype(np.int64, copy=False)
            bad = (out < 0) | (out >= self.num_nodes)
            if bad.any():
                out = np.where(bad, -1, out)
            return out
        if isinstance(values, np.ndarray):
            values = pa.array(values)
        if values.type != self.type:
            values = values.cast(self.type)
        found = pc.index_in(values, value_set=self.ids)
        return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)

    def arrow(self):
        import pyarrow as pa

        return pa.array(np.arange(self.num_nodes, dtype=np.int64)) if self.ids is None else self.ids


@dataclass
class NodeOptions:
    features: Optional[Path] = None
    features_format: str = "auto"
    id_column: Optional[str] = None  # node tables: default "id" when present, else the first column
    feature_columns: Optional[List[str]] = (
        None  # names or glob patterns; default every numeric column left
    )
    labels: Optional[Path] = None
    label_column: Optional[str] = None
    num_classes: int = 0  # 0: max label + 1
    # train_mask/val_mask/test_mask -> .npy
    masks: Dict[str, Optional[Path]] = field(default_factory=dict)
    id_type: str = "auto"
    # a .npy of labels in node order with negative entries for unlabeled nodes (the Python API's y =
    # -1; a file
    # leaves such nodes out instead, so files keep refusing negatives)
    negative_labels_unlabeled: bool = False
    csv: CsvOptions = field(default_factory=CsvOptions)


@dataclass
class NodeResult:
    ids: NodeIds
    feat_dim: int
    labels: Optional[np.ndarray]  # int64, -1 = unlabeled; None: none given
    masks: Dict[str, np.ndarray]  # the masks given (a node table's columns or .npy files)
    notes: List[str] = field(default_factory=list)


def _check_finite(
    block: np.ndarray, first_row: int, where: str, ids: Optional[NodeIds], columns
) -> None:
    bad = ~np.isfinite(block)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        node = (
            ids.name(first_row + r)
            if ids is not None and ids.ids is not None
            else str(first_row + r)
        )
        col = columns[c] if columns is not None else str(c)
        raise DatasetError(
            f"ingest: {where}: feature {col!r} of node {node} is {block[r, c]} (NaN or Inf). "
            f"Clean or impute the features first."
        )


def _is_list(kind) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)
    )


def _numeric(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _label_array(values: np.ndarray, where: str, locate) -> np.ndarray:
    if values.dtype.kind == "f":
        whole = np.isnan(values) | (values == np.round(values))
        if not whole.all():
            i = int(np.flatnonzero(~whole)[0])
            raise DatasetError(
                f"ingest: {where}: label {values[i]} at {locate(i)} is not a whole number."
            )
        values = np.where(np.isnan(values), -1, values)
    elif values.dtype.kind not in "iub":
        raise DatasetError(f"ingest: {where}: labels must be integers (got {values.dtype}).")
    return values.astype(np.int64)


def _check_labels(given: np.ndarray, where: str, locate) -> None:
    """Refuse negative labels (a node without a label is left out or left empty, never -1 in a
    file)."""
    negative = given < 0
    if negative.any():
        i = int(np.flatnonzero(negative)[0])
        raise DatasetError(
            f"ingest: {where}: label {int(given[i])} at {locate(i)} is negative; labels are "
            "classes "
            f"0..C-1 (leave a node out of the labels, or empty, to leave it unlabeled)."
        )


# over the function budget: one pass over a node table: id, feature, label and mask columns by kind
def read_node_table(path: Path, kind: str, opts: NodeOptions, work: Path, progress) -> NodeResult:  # noqa: C901, PLR0912, PLR0915
    """Features (and a label column, mask columns where present) from a table keyed by node ID."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = open_table(path, kind, opts.csv)
    id_col = table.column(
        opts.id_column or ("id" if "id" in table.names else None), 0, "--id-column"
    )
    label_col = None
    if opts.label_column:
        label_col = table.column(opts.label_column, 0, "--label-column")
    elif opts.labels is None:
        label_col = next((n for n in table.names if n.lower() in LABEL_NAMES and n != id_col), None)
    mask_cols = [n for n in MASK_COLUMNS if n in table.names]
    reserved = {id_col, label_col, *mask_cols}
    parquet = isinstance(table, ParquetTable)
    if opts.feature_columns:
        chosen: List[str] = []
        for pattern in opts.feature_columns:
            hits = [n for n in table.names if fnmatch.fnmatchcase(n, pattern) and n not in reserved]
            if not hits:
                raise DatasetError(
                    f"ingest: {path} has no column matching {pattern!r} (--feature-columns); its "
                    f"columns are {', '.join(table.names)}."
                )
            chosen += [h for h in hits if h not in chosen]
    else:
        chosen = [n for n in table.names if n not in reserved]
    notes: List[str] = []
    types: Dict[str, object] = {}
    if parquet:
        keep = []
        for name in chosen:
            kind_ = table.schema.field(name).type
            if _numeric(kind_) or _is_list(kind_):
                keep.append(name)
            elif opts.feature_columns:
                raise DatasetError(
                    f"ingest: {path}, column {name!r} has type {kind_}, which is not numeric; "
                    f"features must be numbers."
                )
            else:
                notes.append(f"ignored column {name!r} of {path.name} ({kind_}, not numeric)")
        chosen = keep
    else:
        types = {name: pa.float32() for name in chosen}
    if not chosen:
        others = ", ".join(sorted(n for n in reserved if n))
        raise DatasetError(
            f"ingest: {path} has no feature columns besides {others}; name them with "
            f"--feature-columns."
        )
    id_type = id_type_of(table, id_col, opts.id_type)
    types[id_col] = id_type
    if label_col and not parquet:
        types[label_col] = pa.float64()
    if not parquet:
        types.update({m: pa.bool_() for m in mask_cols})
    # Parquet with scalar feature columns: features are decoded a group of columns at a time
    # (decoding a row
    # group's every column at once held ~600 MB for 250k rows x 128); the batches carry IDs, labels,
    # masks
    by_group = parquet and not any(_is_list(table.schema.field(n).type) for n in chosen)
    columns = (
        [id_col] + ([] if by_group else chosen) + ([label_col] if label_col else []) + mask_cols
    )
    raw = open(work / ".features.raw", "wb")
    ids, labels, masks = [], [], {m: [] for m in mask_cols}
    rows, width = 0, None
    where = str(path)
    for batch in table.batches(columns, {k: v for k, v in types.items() if k in columns}):
        t = batch.table
        ids.append(t.column(id_col).combine_chunks())
        if not by_group:
            block = _feature_block(t, chosen, path)
            if width is None:
                width = block.shape[1]
            _check_finite(
                block, rows, where, None, chosen if len(chosen) == block.shape[1] else None
            )
            raw.write(memoryview(np.ascontiguousarray(block)).cast("B"))
        if label_col:
            col = t.column(label_col).combine_chunks()
            if col.null_count:
                col = pc.fill_null(col.cast(pa.float64()), float("nan"))
            values = _label_array(col.to_numpy(zero_copy_only=False), where, batch.locate)
            given = (
                values
                if col.null_count == 0
                else np.where(np.isnan(col.to_numpy(zero_copy_only=False)), 0, values)
            )
            _check_labels(given, f"{where}, column {label_col!r}", batch.locate)
            labels.append(values)
        for m in mask_cols:
            masks[m].append(
                t.column(m)
                .combine_chunks()
                .fill_null(False)
                .to_numpy(zero_copy_only=False)
                .astype(bool)
            )
        rows += t.num_rows
        progress("reading node table", batch.done_bytes, table.size)
    raw.close()
    all_ids = pa.concat_arrays(ids) if ids else pa.array([], type=id_type)
    if all_ids.null_count:
        raise DatasetError(f"ingest: {path}, column {id_col!r}: a node ID is empty.")
    if pc.count_distinct(all_ids).as_py() != len(all_ids):
        counts = pc.value_counts(all_ids)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
        raise DatasetError(
            f"ingest: {path}, column {id_col!r}: node ID {dup!r} appears more than once; each "
            f"node needs one row."
        )
    if by_group:
        (work / ".features.raw").unlink()
        width = _parquet_features(table, chosen, work, progress)
    else:
        _raw_to_npy(work / ".features.raw", work / "features.npy", (rows, width or 0))
    node_ids = NodeIds(all_ids)
    return NodeResult(
        node_ids,
        int(width or 0),
        np.concatenate(labels) if labels else None,
        {m: np.concatenate(v) for m, v in masks.items()},
        notes,
    )


COLUMN_GROUP = 16  # Parquet feature columns decoded at once


def _parquet_features(table: ParquetTable, chosen: Sequence[str], work: Path, progress) -> int:
    """features.npy from a Parquet node table, decoding ``COLUMN_GROUP`` columns of one row group at
    a time into
    one scratch file per column group, then interleaving the groups' rows into the row-major
    output."""
    groups = [list(chosen[k : k + COLUMN_GROUP]) for k in range(0, len(chosen), COLUMN_GROUP)]
    scratch = [work / f".features-{g}.raw" for g in range(len(groups))]
    handles = [open(p, "wb") for p in scratch]
    meta = table.file.metadata
    total_rows, done = int(meta.num_rows), 0
    try:
        for rg in range(meta.num_row_groups):
            rows = meta.row_group(rg).num_rows
            for g, names in enumerate(groups):
                t = table.file.read_row_group(rg, columns=names, use_threads=False)
                block = _feature_block(t, names, table.path)
                _check_finite(block, done, str(table.path), None, names)
                handles[g].write(memoryview(np.ascontiguousarray(block)).cast("B"))
                del t, block
            done += rows
            progress("reading node table", done, 2 * total_rows)
    finally:
        for h in handles:
            h.close()
    width = len(chosen)
    with open(work / "features.npy", "wb") as out:
        np.lib.format.write_array_header_1_0(
            out, {"descr": "<f4", "fortran_order": False, "shape": (total_rows, width)}
        )
        files = [open(p, "rb") for p in scratch]
        try:
            for lo in range(0, total_rows, FEATURE_ROWS):
                n = min(FEATURE_ROWS, total_rows - lo)
                parts = [
                    np.fromfile(f, dtype=np.float32, count=n * len(names)).reshape(n, len(names))
                    for f, names in zip(files, groups)
                ]
                out.write(memoryview(np.ascontiguousarray(np.hstack(parts))).cast("B"))
                progress("reading node table", total_rows + lo + n, 2 * total_rows)
        finally:
            for f in files:
                f.close()
    for p in scratch:
        p.unlink()
    return width


def _feature_block(t, chosen: Sequence[str], path: Path) -> np.ndarray:
    import pyarrow as pa

    parts = []
    for name in chosen:
        col = t.column(name).combine_chunks()
        if _is_list(col.type):
            width = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
            if col.null_count or (width.size and (width != width[0]).any()):
                raise DatasetError(
                    f"ingest: {path}, column {name!r}: every node needs a vector of the same "
                    "length."
                )
            flat = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
            parts.append(flat.reshape(len(col), -1 if len(col) else 0))
        else:
            if col.null_count:
                raise DatasetError(
                    f"ingest: {path}, column {name!r}: {col.null_count} empty value(s); every node "
                    f"needs every feature."
                )
            parts.append(col.to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, 1))
    return parts[0] if len(parts) == 1 else np.hstack(parts)


def _raw_to_npy(raw: Path, out: Path, shape) -> None:
    """A headerless float32 file becomes a .npy: the header goes in front with one sequential
    copy."""
    import shutil

    with open(out, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)}
        )
        with open(raw, "rb") as src:
            shutil.copyfileobj(src, f, 16 << 20)
    raw.unlink()


def write_features(features, work: Path, where: str, progress) -> int:
    """A feature matrix in node order (a numpy array, a tensor, or an :class:`NpyFile` read a block
    at a time)
    to features.npy, written sequentially (never memory-mapped)."""
    if isinstance(features, NpyFile):
        rows, shape, dtype = features.rows, features.shape, features.dtype
    else:
        array = (
            features.detach().cpu().numpy() if hasattr(features, "detach") else np.asarray(features)
        )
        rows, shape, dtype = (lambda lo, hi: array[lo:hi]), array.shape, array.dtype
    if len(shape) == 1:
        shape = (shape[0], 1)
    if len(shape) != 2:
        raise DatasetError(
            f"ingest: {where}: features must be a 2-D array (nodes x features); got shape "
            f"{tuple(shape)}."
        )
    if dtype.kind not in "fiub":
        raise DatasetError(f"ingest: {where}: features of dtype {dtype} cannot be read as numbers.")
    with open(work / "features.npy", "wb") as out:
        np.lib.format.write_array_header_1_0(
            out, {"descr": "<f4", "fortran_order": False, "shape": tuple(shape)}
        )
        for lo in range(0, shape[0], FEATURE_ROWS):
            block = np.asarray(rows(lo, lo + FEATURE_ROWS), dtype=np.float32).reshape(-1, shape[1])
            block = np.ascontiguousarray(block)
            _check_finite(block, lo, where, None, None)
            out.write(memoryview(block).cast("B"))
            progress("copying features", lo + block.shape[0], shape[0])
    return int(shape[1])


def load_npy(path: Path, option: str) -> np.ndarray:
    """A small .npy (labels, masks) read whole."""
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise DatasetError(f"ingest: {option} {path}: not a plain NumPy array ({exc}).") from None
    except OSError as exc:
        raise DatasetError(f"ingest: {option} {path}: cannot read it as .npy ({exc}).") from None


def open_npy(path: Path, option: str) -> NpyFile:
    """A large .npy (edges, features) to read a block at a time."""
    try:
        return NpyFile(path)
    except ValueError as exc:
        raise DatasetError(f"ingest: {option} {path}: not a plain NumPy array ({exc}).") from None
    except OSError as exc:
        raise DatasetError(f"ingest: {option} {path}: cannot read it as .npy ({exc}).") from None


def read_labels(path: Path, opts: NodeOptions, ids: NodeIds) -> np.ndarray:
    """Labels from .npy (node order) or a table keyed by node ID (nodes left out stay unlabeled)."""
    import pyarrow as pa

    kind = table_format(path, "auto")
    if kind == "npy":
        values = load_npy(path, "--labels")
        values = values.reshape(values.shape[0], -1)[:, 0] if values.ndim > 1 else values
        if values.shape[0] != ids.num_nodes:
            raise DatasetError(
                f"ingest: --labels {path} has {values.shape[0]} rows for {ids.num_nodes} nodes; "
                f"a .npy of labels needs one row per node, in node order."
            )
        out = _label_array(np.asarray(values), str(path), lambda i: f"row {i}")
        if opts.negative_labels_unlabeled:
            return np.where(out < 0, -1, out)
        _check_labels(out, str(path), lambda i: f"row {i}")
        return out
    table = open_table(path, kind, opts.csv)
    id_col = table.column(
        opts.id_column
        if opts.id_column in table.names
        else ("id" if "id" in table.names else None),
        0,
        "--id-column",
    )
    label_col = table.column(
        opts.label_column or next((n for n in table.names if n.lower() in LABEL_NAMES), None),
        1,
        "--label-column",
    )
    out = np.full(ids.num_nodes, -1, dtype=np.int64)
    types = (
        {id_col: ids.type}
        if isinstance(table, ParquetTable)
        else {id_col: ids.type, label_col: pa.float64()}
    )
    for batch in table.batches([id_col, label_col], types):
        index = ids.encode(batch.table.column(id_col).combine_chunks())
        if (index < 0).any():
            i = int(np.flatnonzero(index < 0)[0])
            raise DatasetError(
                f"ingest: {path} {batch.locate(i)}: node ID "
                f"{batch.table.column(id_col)[i].as_py()!r} is not a node of the graph."
            )
        col = batch.table.column(label_col).combine_chunks()
        values = col.cast(pa.float64()).fill_null(float("nan")).to_numpy(zero_copy_only=False)
        values = _label_array(values, str(path), batch.locate)
        empty = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        _check_labels(np.where(empty, 0, values), f"{path}, column {label_col!r}", batch.locate)
        out[index] = values
    return out


def read_mask(path: Path, name: str, num_nodes: int) -> np.ndarray:
    values = load_npy(path, f"--{name.replace('_', '-')}")
    if values.shape != (num_nodes,):
        raise DatasetError(
            f"ingest: --{name.replace('_', '-')} {path} has shape {tuple(values.shape)}; a mask "
            "needs "
            f"one entry per node ({num_nodes},), in node order."
        )
    if values.dtype.kind not in "biu":
        raise DatasetError(
            f"ingest: --{name.replace('_', '-')} {path}: a mask must be bool or 0/1 "
            f"(got {values.dtype})."
        )
    return np.asarray(values).astype(bool)


def require_features(opts: NodeOptions) -> Path:
    if opts.features is None:
        raise DatasetError(
            "ingest: no node features given. Pass --features FILE (.npy in node order, or a "
            "Parquet/CSV table keyed by node ID), or --graph FILE (a saved PyG Data or DGL graph)."
        )
    return require_file(opts.features, "--features")
