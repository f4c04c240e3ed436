"""The node side of an ingest: which nodes exist (and their IDs), the options and result of reading
them, and the feature matrix.

Nodes come from, in this order of preference: a node table keyed by ID (Parquet/CSV; its row order
is the node order; :mod:`.node_table`), a ``.npy`` feature matrix (nodes are 0..N-1), or a
whole-graph file (PyG/DGL). Arrays are written straight into the output folder, a batch at a time.
Labels and masks are :mod:`.labels`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from gnntrain.data.ingest.tables import CsvOptions, require_file
from gnntrain.data.ondisk import NpyFile
from gnntrain.errors import DatasetError

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
    # names or glob patterns; default every numeric column left
    feature_columns: Optional[List[str]] = None
    labels: Optional[Path] = None
    label_column: Optional[str] = None
    num_classes: int = 0  # 0: max label + 1
    # regression targets (:mod:`.targets`): a .npy in node order or a table keyed by node ID; with
    # target_columns alone, those columns of the node table (``features``)
    targets: Optional[Path] = None
    target_columns: Optional[List[str]] = None
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
    # float32 (N, T) of the node table's target columns (NodeOptions.target_columns), or None
    targets: Optional[np.ndarray] = None


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


def write_features(features, work: Path, where: str, progress) -> int:
    """A feature matrix in node order (a numpy array, a tensor, or an :class:`NpyFile` read a block
    at a time) to features.npy, written sequentially (never memory-mapped)."""
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
    if shape[1] == 0:
        raise DatasetError(
            f"ingest: {where} has shape {tuple(shape)}: no feature columns; give at least one "
            "feature per node."
        )
    # a value past float32's range becomes inf, refused by _check_finite naming it: no warning first
    with open(work / "features.npy", "wb") as out, np.errstate(over="ignore"):
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


def open_npy(path: Path, option: str) -> NpyFile:
    """A large .npy (edges, features) to read a block at a time."""
    try:
        return NpyFile(path)
    except ValueError as exc:
        raise DatasetError(f"ingest: {option} {path}: not a plain NumPy array ({exc}).") from None
    except OSError as exc:
        raise DatasetError(f"ingest: {option} {path}: cannot read it as .npy ({exc}).") from None


def require_features(opts: NodeOptions) -> Path:
    if opts.features is None:
        raise DatasetError(
            "ingest: no node features given. Pass --features FILE (.npy in node order, or a "
            "Parquet/CSV table keyed by node ID), or --graph FILE (a saved PyG Data or DGL graph)."
        )
    return require_file(opts.features, "--features")
