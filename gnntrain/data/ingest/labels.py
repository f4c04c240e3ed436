"""Labels and masks of an ingest: labels from a ``.npy`` in node order, a table keyed by node ID, a
node table's label column or the whole graph, checked (whole numbers, 0..C-1); masks from ``.npy``
files, the node table or the graph, or drawn among the labeled nodes (:func:`_split`; a graph with
regression targets and no labels: among the nodes with a target)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

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
            f"ingest: node {nodes.ids.name(i)} has label {int(labels[i])}, but --num-classes is "
            f"{classes} (labels are 0..{classes - 1})."
        )
    if classes < 2:
        raise DatasetError(
            f"ingest: the labels name {classes} class(es); node classification needs at least 2."
        )
    return labels, classes


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
        has, what = labels >= 0, "label"
    elif targets is not None:
        has, what = targets.present, "target"
    else:
        has, what = np.ones(n, dtype=bool), "node"
        notes.append(
            "no labels and no targets: for link prediction (node classification is refused)"
        )
    masks = dict(nodes.masks)
    for name, path in opts.nodes.masks.items():
        if path is not None:
            masks[name] = read_mask(require_file(path, f"--{name.replace('_', '-')}"), name, n)
    if not masks and graph is not None:
        masks = {
            m: np.asarray(graph[m]).reshape(n, -1)[:, 0].astype(bool)
            for m in ("train_mask", "val_mask", "test_mask")
            if graph.get(m) is not None
        }
    if masks:
        for name in ("train_mask", "val_mask", "test_mask"):
            if name not in masks:
                masks[name] = np.zeros(n, dtype=bool)
                notes.append(f"no {name} given: it is empty")
    else:
        masks = _split(has, opts.split, opts.seed)
        among = {"label": "labeled nodes", "target": "nodes with a target"}.get(what, "nodes")
        notes.append(
            f"split {opts.split[0]:g}/{opts.split[1]:g}/{opts.split[2]:g} of the {among} "
            f"(seed {opts.seed})"
        )
    for name, mask in masks.items():
        bad = mask & ~has
        if bad.any():
            raise DatasetError(
                f"ingest: node {nodes.ids.name(int(np.flatnonzero(bad)[0]))} is in the {name} but "
                f"has no {what}."
            )
    if not masks["train_mask"].any():
        raise DatasetError(
            f"ingest: the train mask is empty; training needs training nodes with a {what}. Give "
            "a non-empty --train-mask, or let --split draw one."
        )
    return labels, classes, masks
