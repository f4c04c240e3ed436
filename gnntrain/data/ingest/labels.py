"""Labels and masks of an ingest: labels from a ``.npy`` in node order, a table keyed by node ID, a
node table's label column or the whole graph, checked (whole numbers, 0..C-1); masks from ``.npy``
files, the node table or the graph, or drawn among the labeled nodes (:func:`_split`; a graph with
regression targets and no labels: among the nodes with a target)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from gnntrain.data.checks import MAX_WIDTH
from gnntrain.data.ingest.nodes import NodeIds, NodeOptions, NodeResult
from gnntrain.data.ingest.options import IngestOptions
from gnntrain.data.ingest.tables import (
    ParquetTable,
    load_npy,
    open_table,
    require_file,
    table_format,
)
from gnntrain.data.ingest.targets import Targets
from gnntrain.errors import DatasetError

LABEL_NAMES = ("label", "labels", "y", "class")


def _label_array(values: np.ndarray, where: str, locate) -> np.ndarray:
    """int64 labels of ``values`` (NaN: -1, no label); a value that is no whole number, or one past
    the largest class a plan takes (``dataset.num_classes`` is at most ``MAX_WIDTH``), refused
    naming ``locate(i)``; a negative one is left to :func:`_check_labels`."""
    if values.dtype.kind not in "fiub":
        raise DatasetError(f"ingest: {where}: labels must be integers (got {values.dtype}).")
    if values.dtype.kind == "f":
        values = values.astype(np.float64)  # float16 cannot hold MAX_WIDTH
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(values) & (values == np.round(values)) & (abs(values) < MAX_WIDTH)
        bad = ~(whole | np.isnan(values))
    else:
        bad = values >= MAX_WIDTH
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DatasetError(
            f"ingest: {where}: label {values[i]} at {locate(i)} is not a whole number below "
            f"{MAX_WIDTH} (labels are class numbers)."
        )
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), -1, values)
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


def table_labels(col, where: str, locate) -> np.ndarray:
    """int64 labels of a table's label column (a pyarrow Array): an empty cell or NaN is -1 (no
    label); a column that is not numeric, or a value that is no class number, refused naming
    ``where`` (the file and column) and ``locate(i)``."""
    import pyarrow as pa

    kind = col.type
    if not (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_null(kind)
    ):
        raise DatasetError(
            f"ingest: {where} has type {kind}; labels are integers 0..C-1 (an empty cell: no "
            "label). Fix: convert the column to integers, or name another with --label-column."
        )
    # unsafe: an integer past 2^53 (no label a plan takes) rounds, and is refused as too large
    values = col.cast(pa.float64(), safe=False).fill_null(float("nan"))
    values = values.to_numpy(zero_copy_only=False)
    out = _label_array(values, where, locate)
    _check_labels(np.where(np.isnan(values), 0, out), where, locate)
    return out


def _npy_labels(path: Path, opts: NodeOptions, ids: NodeIds) -> np.ndarray:
    """Labels from a .npy in node order: one per node (a 2-D file: its first column)."""
    values = load_npy(path, "--labels")
    n = ids.num_nodes
    if values.ndim == 0 or values.size < values.shape[0]:
        raise DatasetError(
            f"ingest: --labels {path} has shape {values.shape}; a .npy of labels needs one label "
            f"per node ({n},), in node order."
        )
    if values.shape[0] != n:
        raise DatasetError(
            f"ingest: --labels {path} has {values.shape[0]} rows for {n} nodes; a .npy of labels "
            "needs one row per node, in node order."
        )
    values = values.reshape(n, -1)[:, 0] if values.ndim > 1 else values
    if values.dtype.kind == "f" and np.isnan(values).any() and not opts.negative_labels_unlabeled:
        raise DatasetError(
            f"ingest: --labels {path}: label NaN at row {int(np.flatnonzero(np.isnan(values))[0])}"
            "; a .npy of labels has one per node. Leave unlabeled nodes out of a table of node ID "
            "and label (--labels TABLE) instead."
        )
    out = _label_array(np.asarray(values), str(path), lambda i: f"row {i}")
    if opts.negative_labels_unlabeled:
        return np.where(out < 0, -1, out)
    _check_labels(out, str(path), lambda i: f"row {i}")
    return out


def read_labels(path: Path, opts: NodeOptions, ids: NodeIds) -> np.ndarray:
    """Labels from .npy (node order) or a table keyed by node ID (nodes left out stay unlabeled)."""
    import pyarrow as pa

    kind = table_format(path, "auto")
    if kind == "npy":
        return _npy_labels(path, opts, ids)
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
    if label_col == id_col:
        raise DatasetError(
            f"ingest: --labels {path}: column {id_col!r} would be both the node ID and the "
            "label; a labels table has a node ID column (id) and a label column (--label-column)."
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
        out[index] = table_labels(col, f"{path}, column {label_col!r}", batch.locate)
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


def _split(
    eligible: np.ndarray, fractions: Tuple[float, float, float], seed: int
) -> Dict[str, np.ndarray]:
    """Masks drawn among the ``eligible`` nodes (the labeled ones; a graph without labels: those
    with a regression target), by a seeded permutation, numpy only."""
    n = eligible.shape[0]
    labeled = np.flatnonzero(eligible)
    order = labeled[np.random.default_rng(seed + 7919).permutation(labeled.shape[0])]
    masks, start = {}, 0
    for name, fraction in zip(("train_mask", "val_mask", "test_mask"), fractions):
        size = int(round(fraction * labeled.shape[0]))
        mask = np.zeros(n, dtype=bool)
        mask[order[start : start + size]] = True
        masks[name] = mask
        start += size
    return masks


def _labels(
    opts: IngestOptions, nodes: NodeResult, graph, targets: Optional[Targets]
) -> Tuple[np.ndarray, int]:
    """(labels, classes): int64 labels, -1 where a node has none, and the class count; a graph
    without labels (regression targets, or edges for link prediction) has every label -1 and 0
    classes, and node classification on it is refused at plan time."""
    n = nodes.ids.num_nodes
    labels = nodes.labels
    source = _label_source(opts, nodes)
    if opts.nodes.labels is not None:
        labels = read_labels(require_file(opts.nodes.labels, "--labels"), opts.nodes, nodes.ids)
    elif labels is None and graph is not None and graph.get("y") is not None:
        y = np.asarray(graph["y"])
        labels = (y.reshape(y.shape[0], -1)[:, 0]).astype(np.int64)
    if labels is None:  # regression targets, or a graph for link prediction: no classes
        return np.full(n, -1, dtype=np.int64), 0
    if labels.shape[0] != n:
        raise DatasetError(f"ingest: {labels.shape[0]} labels for {n} nodes.")
    top = int(labels.max()) if labels.size else -1
    classes = int(opts.nodes.num_classes) or top + 1
    if top >= classes:
        i = int(np.flatnonzero(labels >= classes)[0])
        raise DatasetError(
            f"ingest: {source}: node {nodes.ids.name(i)} has label {int(labels[i])}, but "
            f"--num-classes is {classes} (labels are 0..{classes - 1})."
        )
    if classes < 2:
        raise DatasetError(
            f"ingest: the labels ({source}) name {classes} class(es); node classification needs "
            "at least 2."
        )
    return labels, classes


def _label_source(opts: IngestOptions, nodes: NodeResult) -> str:
    """Where the labels come from, for a message."""
    if opts.nodes.labels is not None:
        return f"--labels {opts.nodes.labels}"
    if nodes.labels is not None:
        return f"--features {opts.nodes.features}"
    return f"--graph {opts.graph}"


def _given_masks(
    opts: IngestOptions, nodes: NodeResult, graph, n: int
) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """The masks given (files, node table columns, the graph), and where each came from."""
    masks = dict(nodes.masks)
    sources = dict.fromkeys(masks, f"--features {opts.nodes.features}")
    for name, path in opts.nodes.masks.items():
        if path is not None:
            option = f"--{name.replace('_', '-')}"
            masks[name] = read_mask(require_file(path, option), name, n)
            sources[name] = f"{option} {path}"
    if not masks and graph is not None:
        masks = {
            m: np.asarray(graph[m]).reshape(n, -1)[:, 0].astype(bool)
            for m in ("train_mask", "val_mask", "test_mask")
            if graph.get(m) is not None
        }
        sources = dict.fromkeys(masks, f"--graph {opts.graph}")
    return masks, sources


def _labels_and_masks(
    opts: IngestOptions,
    nodes: NodeResult,
    graph,
    notes: List[str],
    targets: Optional[Targets] = None,
):
    """Labels, the class count and the three masks. Masks given (files, node table columns, the
    graph) are kept; otherwise they are drawn among the labeled nodes, or, in a graph with
    regression targets and no labels, among the nodes with a target."""
    n = nodes.ids.num_nodes
    labels, classes = _labels(opts, nodes, graph, targets)
    # what a node in a mask must have: a label, or (no labels) a target, or (neither) nothing
    if classes:
        has, what, source = labels >= 0, "label", _label_source(opts, nodes)
    elif targets is not None:
        has, what, source = targets.present, "target", targets.source
    else:
        has, what, source = np.ones(n, dtype=bool), "node", ""
        notes.append(
            "no labels and no targets: for link prediction (node classification is refused)"
        )
    masks, sources = _given_masks(opts, nodes, graph, n)
    if masks:
        given = "; ".join(f"{m} from {s}" for m, s in sources.items())
        for name in ("train_mask", "val_mask", "test_mask"):
            if name not in masks:
                masks[name] = np.zeros(n, dtype=bool)
                sources[name] = f"none given: {given}"
                notes.append(f"no {name} given: it is empty")
    else:
        masks = _split(has, opts.split, opts.seed)
        among = {"label": "labeled nodes", "target": "nodes with a target"}.get(what, "nodes")
        split = f"{opts.split[0]:g}/{opts.split[1]:g}/{opts.split[2]:g}"
        notes.append(f"split {split} of the {among} (seed {opts.seed})")
        sources = dict.fromkeys(
            masks, f"--split {split} of the {among}" + (f", {source}" if source else "")
        )
    for name, mask in masks.items():
        bad = mask & ~has
        if bad.any():
            raise DatasetError(
                f"ingest: {sources[name]}: node {nodes.ids.name(int(np.flatnonzero(bad)[0]))} is "
                f"in the {name} but has no {what} ({source})."
            )
    if not masks["train_mask"].any():
        raise DatasetError(
            f"ingest: the train mask is empty ({sources['train_mask']}); training needs training "
            f"nodes with a {what}. Give a non-empty --train-mask, or let --split draw one."
        )
    return labels, classes, masks
