"""``gnntrain ingest``: a user's own graph into the on-disk format (:mod:`gnntrain.data.ondisk`).

Edges come from CSV/TSV (optionally gzipped), Parquet, NumPy (one 2xE/Ex2 array or two 1-D
arrays), a scipy sparse ``.npz``, a saved PyG ``Data`` or a DGL graph; node features, labels and
masks from ``.npy`` (node order) or a Parquet/CSV table keyed by node ID. IDs may be any
integers or strings: they are mapped to 0..N-1 and kept in ``node_ids.parquet``. Everything is
read a block at a time (:mod:`.tables`) and the CSR is built by a counting sort through files
(:mod:`.csr`), so memory stays near the size of the CSR written.

This module is the driver (:func:`ingest`, :func:`ingest_arrays`); the readers are
:mod:`.edges` (edge lists by format), :mod:`.graph_file` (whole PyG/DGL graphs), :mod:`.nodes` and
:mod:`.node_table` (nodes and features), :mod:`.labels` (labels and masks) and :mod:`.targets`
(regression targets); the options are
:mod:`.options`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from gnntrain.data import ondisk
from gnntrain.data.ingest.csr import CsrBuilder, degree_summary
from gnntrain.data.ingest.edges import edge_batches
from gnntrain.data.ingest.graph_file import _read_graph_object, graph_arrays
from gnntrain.data.ingest.held_out import held_out_edges, held_out_keys
from gnntrain.data.ingest.labels import _labels_and_masks
from gnntrain.data.ingest.node_table import read_node_table
from gnntrain.data.ingest.nodes import (
    NodeIds,
    NodeOptions,
    NodeResult,
    open_npy,
    require_features,
    write_features,
)
from gnntrain.data.ingest.options import IngestOptions
from gnntrain.data.ingest.tables import CsvOptions, require_file, table_format
from gnntrain.data.ingest.targets import TARGETS_FILE, read_targets
from gnntrain.errors import DatasetError
from gnntrain.heap import release_heap

__all__ = ["CsvOptions", "IngestOptions", "NodeOptions", "graph_arrays", "ingest", "ingest_arrays"]


def _nothing(stage: str, done: int, total: int) -> None:
    return None


def _nodes(
    opts: IngestOptions, work: Path, graph: Optional[Dict[str, Any]], progress
) -> NodeResult:
    n_opts = opts.nodes
    if n_opts.features is None and graph is not None:
        if graph.get("x") is None:
            raise DatasetError(
                f"ingest: --graph {opts.graph} has no node features (x / feat); pass --features."
            )
        ids = NodeIds(num_nodes=graph["num_nodes"])
        width = write_features(graph["x"], work, f"--graph {opts.graph}", progress)
        if graph["x"].shape[0] != ids.num_nodes:
            raise DatasetError(
                f"ingest: --graph {opts.graph}: {graph['x'].shape[0]} feature rows for "
                f"{ids.num_nodes} nodes."
            )
        return NodeResult(ids, width, None, {})
    path = require_features(n_opts)
    kind = table_format(path, n_opts.features_format)
    if kind == "npy":
        array = open_npy(path, "--features")
        ids = NodeIds(num_nodes=len(array) if array.ndim else 0)
        if graph is not None and graph["num_nodes"] != ids.num_nodes:
            raise DatasetError(
                f"ingest: --features {path} has {ids.num_nodes} rows but --graph {opts.graph} has "
                f"{graph['num_nodes']} nodes; feature rows must equal nodes."
            )
        return NodeResult(
            ids, write_features(array, work, f"--features {path}", progress), None, {}
        )
    return read_node_table(path, kind, n_opts, work, progress)


def ingest(opts: IngestOptions, progress=_nothing) -> Dict[str, Any]:
    """Write the graph folder ``opts.out``; returns the summary (also stored in its meta.json)."""
    import pyarrow as pa

    # Arrow's buffers from the system allocator while ingesting: jemalloc kept ~300 MB of freed CSV
    # blocks mapped through the CSR stages (measured on 50M edges), the system heap gives them back
    # (_release_heap)
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        return _ingest(opts, progress)
    finally:
        pa.set_memory_pool(previous)


def _ingest(opts: IngestOptions, progress) -> Dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.perf_counter()
    for value, allowed, option in (
        (opts.self_loops, ("drop", "error"), "--self-loops"),
        (opts.duplicates, ("drop", "error"), "--duplicates"),
    ):
        if value not in allowed:
            raise DatasetError(f"ingest: {option} {value!r}: use one of {', '.join(allowed)}.")
    if len(opts.split) != 3 or any(f < 0 for f in opts.split) or sum(opts.split) > 1 + 1e-9:
        raise DatasetError(
            f"ingest: --split {opts.split}: three fractions >= 0 summing to at most 1."
        )
    out = Path(opts.out).expanduser()
    if out.exists() and not opts.overwrite:
        raise DatasetError(
            f"ingest: {out} already exists. Pass --overwrite to replace it, or choose another "
            "--out."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    work = ondisk.partial_dir(out)
    work.mkdir(parents=True)
    try:
        graph = None
        if opts.graph is not None:
            path = require_file(opts.graph, "--graph")
            kind = table_format(
                path, opts.edges_format if opts.edges_format in ("pyg", "dgl") else "auto"
            )
            if kind not in ("pyg", "dgl"):
                raise DatasetError(
                    f"ingest: --graph {path}: a whole graph is a saved PyG Data (.pt) or DGL graph "
                    f"(.bin); name the kind with --edges-format pyg|dgl."
                )
            graph = _read_graph_object(path, kind)
        notes: List[str] = []
        nodes = _nodes(opts, work, graph, progress)
        notes += nodes.notes
        n = nodes.ids.num_nodes
        if n < 1:
            source = (
                f"--features {opts.nodes.features}"
                if opts.nodes.features
                else f"--graph {opts.graph}"
            )
            raise DatasetError(f"ingest: {source} has no rows: the graph has no nodes.")
        targets = read_targets(opts, nodes, graph, notes)
        labels, classes, masks = _labels_and_masks(opts, nodes, graph, notes, targets)
        release_heap()
        weighted = bool(opts.weight_column) or opts.weights is not None
        builder = CsrBuilder(
            work, n, opts.symmetrize, opts.self_loops, opts.duplicates, nodes.ids.name, weighted
        )
        held_out = held_out_edges(opts, nodes.ids, graph, notes)
        _read_edges(opts, nodes.ids, graph, builder, held_out, notes, progress)
        release_heap()
        stats = builder.finish(progress)
        np.save(work / "labels.npy", labels)
        if targets is not None:
            np.save(work / TARGETS_FILE, targets.values)
        for split, edges in held_out.items():
            np.save(work / f"edges_{split}.npy", edges)
        for name, mask in masks.items():
            np.save(work / f"{name}.npy", mask)
        pq.write_table(pa.table({"id": nodes.ids.arrow()}), work / ondisk.NODE_IDS)
        indptr = np.load(work / "indptr.npy")
        progress("content digest", 0, 0)
        digest = ondisk.content_digest(
            indptr,
            work / "indices.npy",
            work / "features.npy",
            labels,
            tuple(masks[m] for m in ondisk.MASKS),
            work / "weights.npy" if weighted else None,
            targets.values if targets is not None else None,
            tuple(held_out.values()),
        )
        summary = {
            "name": opts.name or out.name,
            "num_nodes": n,
            "num_edges": stats.num_edges,
            "feat_dim": nodes.feat_dim,
            "num_classes": classes,  # 0: no labels (a graph for node regression only)
            # the regression targets' names, one per column of targets.npy (float32 (N, T))
            "targets": targets.names if targets is not None else [],
            "digest": digest,
            "index_dtype": str(np.dtype(builder.dtype)),
            "id_type": "int"
            if nodes.ids.identity or pa.types.is_integer(nodes.ids.type)
            else "string",
            "symmetrized": opts.symmetrize,
            # float32 per CSR entry in weights.npy (docs/design.md#edge-weights), or none
            "weights": "float32" if weighted else None,
            "edges_read": stats.num_entries_read,
            "self_loops_dropped": stats.self_loops,
            "duplicates_dropped": stats.duplicates,
            "degree": degree_summary(indptr),
            "unlabeled": int((labels < 0).sum()),
            "split": {m: int(v.sum()) for m, v in masks.items()},
            # link prediction's given held-out edges per split (edges_<split>.npy), or none
            "held_out_edges": {k: int(v.shape[1]) for k, v in held_out.items()},
            "sources": {
                "edges": [str(p) for p in opts.edges],
                "weights": opts.weight_column or (str(opts.weights) if opts.weights else None),
                "graph": str(opts.graph) if opts.graph else None,
                "features": str(opts.nodes.features) if opts.nodes.features else None,
                "labels": str(opts.nodes.labels) if opts.nodes.labels else None,
                "targets": targets.source if targets is not None else None,
            },
            "notes": notes,
            "ingest_seconds": round(time.perf_counter() - started, 3),
        }
        ondisk.finish(work, out, summary, opts.overwrite)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return summary


def _read_edges(opts, ids, graph, builder: CsrBuilder, held_out, notes: List[str], progress):
    """Every edge batch into ``builder``, less the held-out edges (link prediction's: a held-out
    edge never enters the message-passing graph)."""
    n = ids.num_nodes
    excluded = held_out_keys(held_out, n, opts.symmetrize)
    taken_out = 0
    for s, d, w, locate, done, total in edge_batches(opts, ids, graph):
        if excluded.size:
            keep = ~np.isin(s.astype(np.int64) * n + d, excluded)
            taken_out += int((~keep).sum())
            s, d, w = s[keep], d[keep], None if w is None else w[keep]
            locate = _kept_rows(locate, keep)
        builder.add(s, d, locate, w)
        progress("reading edges", done, total)
    if held_out:
        notes.append(f"{taken_out:,} edge lines of the graph were held-out edges: left out")


def _kept_rows(locate, keep: np.ndarray):
    """``locate`` for a batch of which only the rows ``keep`` remain."""
    rows = np.flatnonzero(keep)
    return lambda i: locate(int(rows[i]))


def ingest_arrays(
    out: Path,
    edge_index,
    features,
    labels,
    masks: Optional[Dict[str, Any]] = None,
    num_nodes: Optional[int] = None,
    edge_weight=None,
    targets=None,
    held_out_edges: Optional[Dict[str, Any]] = None,
    **options,
) -> Dict[str, Any]:
    """Ingest in-memory arrays (numpy or torch): ``edge_index`` 2xE of node indices 0..N-1,
    ``edge_weight`` (E,) where the edges have weights, ``targets`` (N,) or (N, T), NaN where a
    node has none, for node regression (``labels`` may then be None), and ``held_out_edges``
    {"val"/"test": 2 x m} for link prediction."""
    import tempfile

    to_np = lambda t: t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
    with tempfile.TemporaryDirectory(
        prefix="gnntrain-arrays-", dir=Path(out).expanduser().parent
    ) as tmp:
        tmp = Path(tmp)
        _save_rows(tmp / "edges.npy", to_np(edge_index))
        _save_rows(tmp / "features.npy", to_np(features))
        if labels is not None:
            np.save(tmp / "labels.npy", to_np(labels))
        if targets is not None:
            np.save(tmp / "targets.npy", to_np(targets))
        if edge_weight is not None:
            np.save(tmp / "weights.npy", to_np(edge_weight))
            options["weights"] = tmp / "weights.npy"
        for split, edges in (held_out_edges or {}).items():  # link prediction's, 2 x m each
            _save_rows(tmp / f"{split}_edges.npy", to_np(edges))
            options.setdefault("held_out", {})[split] = tmp / f"{split}_edges.npy"
        mask_paths = {}
        for name, mask in (masks or {}).items():
            key = name if name.endswith("_mask") else f"{name}_mask"
            np.save(tmp / f"{key}.npy", to_np(mask))
            mask_paths[key] = tmp / f"{key}.npy"
        feats = to_np(features)
        if num_nodes is not None and int(num_nodes) != feats.shape[0]:
            raise DatasetError(
                f"ingest: num_nodes={num_nodes} but features have {feats.shape[0]} rows."
            )
        # an in-memory label array cannot leave a node out: a negative label (y = -1) marks it
        # unlabeled
        node_opts = NodeOptions(
            features=tmp / "features.npy",
            labels=tmp / "labels.npy" if labels is not None else None,
            targets=tmp / "targets.npy" if targets is not None else None,
            masks=mask_paths,
            negative_labels_unlabeled=True,
        )
        names = {
            tmp / "edges.npy": "edge_index",
            tmp / "features.npy": "the features (data.x)",
            tmp / "labels.npy": "the labels (data.y)",
            tmp / "weights.npy": "edge_weight",
            tmp / "targets.npy": "the targets",
            tmp / "val_edges.npy": "the validation edges",
            tmp / "test_edges.npy": "the test edges",
            **{path: key for key, path in mask_paths.items()},
        }
        try:
            return ingest(
                IngestOptions(out=Path(out), edges=[tmp / "edges.npy"], nodes=node_opts, **options)
            )
        except (
            DatasetError
        ) as exc:  # name the caller's argument, never the temporary file written from it
            raise DatasetError(_named(str(exc), names)) from None


def _named(message: str, names: Dict[Path, str]) -> str:
    """``message`` with every temporary array file (and the CLI option naming it) replaced by the
    argument it was written from."""
    for path, name in names.items():
        for option in (
            "--edges",
            "--features",
            "--labels",
            "--masks",
            "--train-mask",
            "--val-mask",
            "--test-mask",
            "--weights",
            "--targets",
            "--val-edges",
            "--test-edges",
        ):
            message = message.replace(f"{option} {path}", name)
        message = message.replace(str(path), name)
    return message


def _save_rows(path: Path, array: np.ndarray, block_bytes: int = 64 * 2**20) -> None:
    """``array`` as a row-major .npy, written a block of rows at a time: a Fortran-ordered or
    strided array (pandas' ``to_numpy()``, a transposed tensor) becomes a plain one without a second
    copy in memory."""
    if array.flags.c_contiguous or array.ndim < 2:
        np.save(path, np.ascontiguousarray(array))
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=array.dtype, shape=array.shape)
    rows = max(1, block_bytes // max(1, array.dtype.itemsize * int(np.prod(array.shape[1:]))))
    for lo in range(0, array.shape[0], rows):
        out[lo : lo + rows] = array[lo : lo + rows]
    out.flush()
    del out
