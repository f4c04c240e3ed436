"""A node table keyed by node ID (Parquet or CSV/TSV; its row order is the node order): the IDs, the
feature columns (scalars or fixed-length lists) written to features.npy, and a label column, mask
columns and regression target columns (``--target-columns``) where present, in one pass a batch at a
time (Parquet features a group of columns at a time)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from gnntrain.data.ingest.labels import LABEL_NAMES, table_labels
from gnntrain.data.ingest.nodes import FEATURE_ROWS, NodeIds, NodeOptions, NodeResult, _check_finite
from gnntrain.data.ingest.tables import ParquetTable, node_id_type, open_table
from gnntrain.data.ingest.targets import (
    check_target_types,
    target_block,
    target_columns,
    target_hints,
)
from gnntrain.errors import DatasetError

MASK_COLUMNS = ("train_mask", "val_mask", "test_mask")


def _is_list(kind) -> bool:
    import pyarrow as pa

    return (
        pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)
    )


def _numeric(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


# over the function budget: one pass over a node table: id, feature, label and mask columns by kind
def read_node_table(path: Path, kind: str, opts: NodeOptions, work: Path, progress) -> NodeResult:  # noqa: C901, PLR0912, PLR0915
    """Features (and a label column, mask columns where present) from a table keyed by node ID."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = open_table(path, kind, opts.csv)
    id_col = table.column(
        opts.id_column or ("id" if "id" in table.names else None), 0, "--id-column"
    )
    # regression targets in the node table: --target-columns without a --targets file
    target_cols: List[str] = []
    if opts.target_columns and opts.targets is None:
        target_cols = target_columns(table, opts.target_columns, id_col)
        check_target_types(table, target_cols)
    label_col = None
    if opts.label_column:
        label_col = table.column(opts.label_column, 0, "--label-column")
        if label_col in target_cols:
            raise DatasetError(
                f"ingest: {path}, column {label_col!r} is named as the label (--label-column) and "
                "as a regression target (--target-columns); a column is one or the other."
            )
    elif opts.labels is None:
        label_col = next(
            (
                n
                for n in table.names
                if n.lower() in LABEL_NAMES and n != id_col and n not in target_cols
            ),
            None,
        )
    mask_cols = [n for n in MASK_COLUMNS if n in table.names]
    reserved = {id_col, label_col, *mask_cols, *target_cols}
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
    id_type = node_id_type(table, id_col, opts.id_type)
    types[id_col] = id_type
    if label_col and not parquet:
        types[label_col] = pa.float64()
    if not parquet:
        types.update({m: pa.bool_() for m in mask_cols})
        types.update({c: pa.float64() for c in target_cols})
    # Parquet with scalar feature columns: features are decoded a group of columns at a time
    # (decoding a row group's every column at once held ~600 MB for 250k rows x 128); the batches
    # carry IDs, labels, masks
    by_group = parquet and not any(_is_list(table.schema.field(n).type) for n in chosen)
    columns = (
        [id_col]
        + ([] if by_group else chosen)
        + ([label_col] if label_col else [])
        + mask_cols
        + target_cols
    )
    raw = open(work / ".features.raw", "wb")
    ids, labels, masks, targets = [], [], {m: [] for m in mask_cols}, []
    rows, width = 0, None
    where = str(path)
    wanted = {k: v for k, v in types.items() if k in columns}
    for batch in table.batches(columns, wanted, target_hints(target_cols)):
        t = batch.table
        ids.append(t.column(id_col).combine_chunks())
        if target_cols:
            node = t.column(id_col)
            targets.append(
                target_block(t, target_cols, where, batch.locate, lambda i, c=node: c[i].as_py())
            )
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
            labels.append(table_labels(col, f"{where}, column {label_col!r}", batch.locate))
        for m in mask_cols:
            masks[m].append(_mask_values(t.column(m).combine_chunks(), f"{where}, column {m!r}"))
        rows += t.num_rows
        progress("reading node table", batch.done_bytes, table.size)
    raw.close()
    if rows == 0:
        raise DatasetError(f"ingest: --features {path} has no rows: the graph has no nodes.")
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
        np.concatenate(targets) if targets else None,
    )


def _mask_values(col, where: str) -> np.ndarray:
    """A mask column (bool, or integers: nonzero is in the mask) as bool; an empty cell is False,
    a column of another type refused naming ``where``."""
    import pyarrow as pa

    kind = col.type
    if not (pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_null(kind)):
        raise DatasetError(
            f"ingest: {where} has type {kind}; a mask column is bool (or 0/1). Fix: convert it, or "
            "rename it if it is no mask."
        )
    return col.cast(pa.bool_()).fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


COLUMN_GROUP = 16  # Parquet feature columns decoded at once


def _parquet_features(table: ParquetTable, chosen: Sequence[str], work: Path, progress) -> int:
    """features.npy from a Parquet node table, decoding ``COLUMN_GROUP`` columns of one row group at
    a time into one scratch file per column group, then interleaving the groups' rows into the
    row-major output."""
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
            if not _numeric(col.type.value_type):  # a list of lists or of strings: no vector
                raise DatasetError(
                    f"ingest: {path}, column {name!r}: a list column of {col.type.value_type} is "
                    "no feature vector; features are numbers or lists of numbers."
                )
            width = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
            if col.null_count or (width.size and (width != width[0]).any()):
                raise DatasetError(
                    f"ingest: {path}, column {name!r}: every node needs a vector of the same "
                    "length."
                )
            with np.errstate(over="ignore"):
                flat = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
            parts.append(flat.reshape(len(col), -1 if len(col) else 0))
        else:
            if col.null_count:
                raise DatasetError(
                    f"ingest: {path}, column {name!r}: {col.null_count} empty value(s); every node "
                    f"needs every feature."
                )
            # a value past float32's range becomes inf, named by _check_finite: no warning first
            with np.errstate(over="ignore"):
                values = col.to_numpy(zero_copy_only=False).astype(np.float32)
            parts.append(values.reshape(-1, 1))
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
