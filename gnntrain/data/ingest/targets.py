"""Regression targets of an ingest (``task=node_regression``): T real values per node, NaN where a
node has no value for a target.

They come from, in this order of preference:

* ``--targets FILE.npy``: an (N,) or (N, T) array of numbers in node order (``--target-columns``
  names its columns, else ``target`` / ``target_0..``);
* ``--targets TABLE`` (CSV/TSV or Parquet) keyed by node ID, the ID column as for labels: the
  ``--target-columns`` named there, else every column but the ID; nodes left out have no target;
* ``--target-columns a,b`` alone: numeric columns of the node table (``--features TABLE``), read in
  the same pass as the features (:mod:`.node_table`).

A whole graph's ``y`` (``--graph``) stays its labels; its targets come with ``--targets``.

An empty cell (or NaN) is a node without that target; an infinite value, a value beyond float32's
range or a column that is not numeric is one :class:`DatasetError` naming the row or the column.
They are stored as ``targets.npy``, float32 (N, T) (:mod:`gnntrain.data.ondisk` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from gnntrain.data.ingest.nodes import NodeIds, NodeResult
from gnntrain.data.ingest.options import IngestOptions
from gnntrain.data.ingest.tables import ParquetTable, open_table, require_file, table_format
from gnntrain.errors import DatasetError

TARGETS_FILE = "targets.npy"
NOT_A_NUMBER = (
    "a regression target must be a number per node (leave the cell empty for a node without "
    "that target). Fix: convert the column to numbers, or leave it out of --target-columns"
)


@dataclass
class Targets:
    values: np.ndarray  # float32 (N, T), NaN where a node has no target
    names: List[str]
    source: str  # what they were read from, for meta.json's "sources"

    @property
    def present(self) -> np.ndarray:
        """bool (N,): the nodes with at least one target."""
        return ~np.isnan(self.values).all(axis=1)


def target_hints(names: Sequence[str]) -> Dict[str, str]:
    """What a CSV reader adds to "'x' is not a number" for a target column."""
    return dict.fromkeys(names, f"; {NOT_A_NUMBER}")


def target_columns(table, wanted: Sequence[str], id_col: str) -> List[str]:
    """The table's columns ``wanted`` (``--target-columns``): a missing one names the columns
    there are; the node ID column is refused."""
    names = [table.column(c, 0, "--target-columns") for c in wanted]
    if id_col in names:
        raise DatasetError(
            f"ingest: {table.path}, column {id_col!r} holds the node IDs (--id-column); it cannot "
            "be a regression target (--target-columns)."
        )
    return names


def check_target_types(table, names: Sequence[str]) -> None:
    """A Parquet table's target columns are numbers (integers, floats, booleans, decimals)."""
    import pyarrow as pa

    if not isinstance(table, ParquetTable):
        return  # CSV: read as float64, a cell that is no number is named by the reader
    for name in names:
        kind = table.schema.field(name).type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_decimal(kind)
        ):
            raise DatasetError(
                f"ingest: {table.path}, column {name!r} has type {kind}, which is not numeric; "
                f"{NOT_A_NUMBER}."
            )


def finite_targets(
    block: np.ndarray, where: str, locate: Callable[[int], str], names: Sequence[str]
) -> np.ndarray:
    """``block`` (rows, T) as float32, NaN kept; an infinite value (or one float32 cannot hold) is
    refused naming its row and column."""
    block = np.asarray(block, dtype=np.float64).reshape(block.shape[0], -1)
    with np.errstate(over="ignore"):  # a value past float32's range is refused below, by name
        out = block.astype(np.float32)
    bad = np.isinf(out)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        value = block[r, c]
        why = "is infinite" if np.isinf(value) else "is beyond float32's range (|x| < 3.4e38)"
        raise DatasetError(
            f"ingest: {where} {locate(r)}, column {names[c]!r}: the target {value} {why}; a "
            f"target must be a finite number (leave the cell empty for a node without that "
            f"target). Fix that row and ingest again."
        )
    return out


def target_block(table, names: Sequence[str], where: str, locate, node_of) -> np.ndarray:
    """float32 (rows, T) of the target columns ``names`` of a pyarrow table (nulls: NaN)."""
    import pyarrow as pa

    cols = [
        table.column(name)
        .combine_chunks()
        .cast(pa.float64(), safe=False)  # an integer past 2^53 rounds: targets are float32
        .fill_null(float("nan"))
        .to_numpy(zero_copy_only=False)
        for name in names
    ]
    block = np.stack(cols, axis=1) if cols else np.empty((table.num_rows, 0))
    return finite_targets(block, where, lambda i: f"{locate(i)} (node {node_of(i)!r})", names)


def _from_npy(path: Path, names: Optional[List[str]], ids: NodeIds) -> Targets:
    from gnntrain.data.ingest.tables import load_npy

    values = load_npy(path, "--targets")
    if values.dtype.kind not in "fiub":
        raise DatasetError(
            f"ingest: --targets {path} holds {values.dtype} values, not numbers; {NOT_A_NUMBER}."
        )
    if values.ndim not in (1, 2) or values.shape[0] != ids.num_nodes or values.size == 0:
        raise DatasetError(
            f"ingest: --targets {path} has shape {tuple(values.shape)}; a .npy of targets is "
            f"({ids.num_nodes},) or ({ids.num_nodes}, T): one row per node, in node order."
        )
    values = values.reshape(ids.num_nodes, -1)
    width = values.shape[1]
    if names is not None and len(names) != width:
        raise DatasetError(
            f"ingest: --targets {path} has {width} column(s) but --target-columns names "
            f"{len(names)} ({', '.join(names)}); name each column once, or leave the names out."
        )
    names = names or (["target"] if width == 1 else [f"target_{j}" for j in range(width)])
    out = finite_targets(values, f"--targets {path}", lambda i: f"row {i}", names)
    return Targets(out, names, str(path))


def _from_table(path: Path, kind: str, opts: IngestOptions, ids: NodeIds) -> Targets:
    """Targets from a table keyed by node ID (nodes left out: NaN)."""
    import pyarrow as pa

    n_opts = opts.nodes
    table = open_table(path, kind, n_opts.csv)
    id_col = table.column(
        n_opts.id_column
        if n_opts.id_column in table.names
        else ("id" if "id" in table.names else None),
        0,
        "--id-column",
    )
    if n_opts.target_columns:
        names = target_columns(table, n_opts.target_columns, id_col)
    else:
        names = [c for c in table.names if c != id_col]
    if not names:
        raise DatasetError(
            f"ingest: --targets {path} has no column besides the node ID {id_col!r}; it needs one "
            "column per target."
        )
    check_target_types(table, names)
    out = np.full((ids.num_nodes, len(names)), np.nan, dtype=np.float32)
    types = {id_col: ids.type}
    if not isinstance(table, ParquetTable):
        types.update({c: pa.float64() for c in names})
    for batch in table.batches([id_col, *names], types, target_hints(names)):
        column = batch.table.column(id_col)
        index = ids.encode(column.combine_chunks())
        if (index < 0).any():
            i = int(np.flatnonzero(index < 0)[0])
            raise DatasetError(
                f"ingest: {path} {batch.locate(i)}: node ID {column[i].as_py()!r} is not a node "
                "of the graph."
            )
        out[index] = target_block(
            batch.table, names, str(path), batch.locate, lambda i, c=column: c[i].as_py()
        )
    return Targets(out, names, str(path))


def read_targets(
    opts: IngestOptions, nodes: NodeResult, graph, notes: List[str]
) -> Optional[Targets]:
    """The regression targets the options name (None where there are none)."""
    n_opts = opts.nodes
    if n_opts.targets is not None:
        path = require_file(n_opts.targets, "--targets")
        kind = table_format(path, "auto")
        if kind == "npy":
            return _from_npy(path, n_opts.target_columns, nodes.ids)
        if kind not in ("csv", "tsv", "parquet"):
            raise DatasetError(
                f"ingest: --targets {path}: a .npy in node order, or a CSV/TSV/Parquet table "
                "keyed by node ID."
            )
        return _from_table(path, kind, opts, nodes.ids)
    if n_opts.target_columns:
        if nodes.targets is None:
            given = f"--features {n_opts.features}" if n_opts.features else f"--graph {opts.graph}"
            raise DatasetError(
                f"ingest: --target-columns names columns of the node table, but {given} is no "
                "table; pass --targets FILE (a table keyed by node ID, or a .npy in node order)."
            )
        return Targets(nodes.targets, list(n_opts.target_columns), str(n_opts.features))
    return None
