"""``gnntrain ingest``: a user's own graph into the on-disk format (:mod:`gnntrain.data.ondisk`).

Edges come from CSV/TSV (optionally gzipped), Parquet, NumPy (one 2xE/Ex2 array or two 1-D
arrays), a scipy sparse ``.npz``, a saved PyG ``Data`` or a DGL graph; node features, labels and
masks from ``.npy`` (node order) or a Parquet/CSV table keyed by node ID. IDs may be any
integers or strings: they are mapped to 0..N-1 and kept in ``node_ids.parquet``. Everything is
read a block at a time (:mod:`.tables`) and the CSR is built by a counting sort through files
(:mod:`.csr`), so memory stays near the size of the CSR written.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from gnntrain.data import ondisk
from gnntrain.data.ingest.csr import CsrBuilder, degree_summary
from gnntrain.data.ingest.nodes import (
    NodeIds,
    NodeOptions,
    NodeResult,
    open_npy,
    read_labels,
    read_mask,
    read_node_table,
    require_features,
    write_features,
)
from gnntrain.data.ingest.tables import (
    CsvOptions,
    id_type_of,
    open_table,
    require_file,
    table_format,
)
from gnntrain.errors import DatasetError

__all__ = ["CsvOptions", "IngestOptions", "NodeOptions", "graph_arrays", "ingest", "ingest_arrays"]

EDGE_BATCH = 1 << 22  # edges per step from in-memory or .npy sources


@dataclass
class IngestOptions:
    out: Path
    # one file, or two 1-D .npy files (sources, destinations)
    edges: List[Path] = field(default_factory=list)
    edges_format: str = "auto"
    src_column: Optional[str] = None  # default: "src" when present, else the first column
    dst_column: Optional[str] = None  # default: "dst" when present, else the second column
    # header, delimiter, comment of a CSV/TSV edge list
    edges_csv: CsvOptions = field(default_factory=CsvOptions)
    graph: Optional[Path] = (
        None  # a saved PyG Data (.pt) or DGL graph (.bin): edges, and nodes unless given
    )
    nodes: NodeOptions = field(default_factory=NodeOptions)
    symmetrize: bool = True
    self_loops: str = "drop"  # drop | error
    duplicates: str = "drop"  # drop | error
    # when no masks are given: fractions of labeled nodes
    split: Tuple[float, float, float] = (
        0.6,
        0.2,
        0.2,
    )
    seed: int = 0
    name: str = ""
    overwrite: bool = False


def _nothing(stage: str, done: int, total: int) -> None:
    return None


def _release_heap() -> None:
    """Give the C heap's free memory back to the system between stages (glibc keeps it otherwise:
    after large
    blocks are freed its mmap threshold rises, and the next stage's arrays land on a heap that never
    shrinks)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


# ------------------------------------------------------------ whole graphs
def graph_arrays(graph) -> Dict[str, Any]:
    """edge_index (2xE), num_nodes, x, y and the three masks of a PyG ``Data`` or a DGL graph, as
    numpy (None
    where the graph has none); TypeError for anything else."""

    def arr(t):
        return (
            None
            if t is None
            else (t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t))
        )

    if hasattr(graph, "edge_index"):  # PyG Data
        get = lambda key: arr(getattr(graph, key, None))
        out = {
            "edge_index": arr(graph.edge_index),
            "num_nodes": int(graph.num_nodes),
            "x": get("x"),
            "y": get("y"),
        }
        out.update({m: get(m) for m in ("train_mask", "val_mask", "test_mask")})
        return out
    if hasattr(graph, "ndata") and hasattr(graph, "edges"):  # DGL graph
        src, dst = graph.edges()
        nd = graph.ndata
        pick = lambda *keys: next((arr(nd[k]) for k in keys if k in nd), None)
        out = {
            "edge_index": np.stack([arr(src), arr(dst)]),
            "num_nodes": int(graph.num_nodes()),
            "x": pick("feat", "x", "features"),
            "y": pick("label", "y", "labels"),
        }
        out.update({m: pick(m) for m in ("train_mask", "val_mask", "test_mask")})
        return out
    raise TypeError(f"{type(graph).__name__} is neither a PyG Data nor a DGL graph")


def _read_graph_object(path: Path, kind: str) -> Dict[str, Any]:
    """:func:`graph_arrays` of a saved PyG Data (torch.save) or DGL graph (dgl.save_graphs)."""
    if kind == "pyg":
        import torch

        try:
            import torch_geometric  # noqa: F401  (unpickling a Data needs its classes)
        except ImportError:
            raise DatasetError(
                "ingest: reading a PyG Data needs torch_geometric: pip install torch_geometric"
            ) from None
        try:
            data = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            raise DatasetError(
                f"ingest: --graph {path}: torch.load could not read it ({type(exc).__name__}: "
                f"{exc})."
            ) from None
        if isinstance(data, (tuple, list)) and data and hasattr(data[0], "edge_index"):
            data = data[0]
        if getattr(data, "edge_index", None) is None:
            raise DatasetError(
                f"ingest: --graph {path} holds a {type(data).__name__}, not a PyG Data with "
                f"edge_index."
            )
        return graph_arrays(data)
    from gnntrain.backends import dgl_problem

    problem = dgl_problem()
    if problem is not None:
        raise DatasetError(
            f"ingest: --graph {path} is a DGL graph, but DGL does not import here ({problem}). "
            f"Install the extra gnntrain[dgl], or save the graph as a PyG Data or as arrays."
        )
    import dgl

    try:
        graphs, _ = dgl.load_graphs(str(path))
    except Exception as exc:
        raise DatasetError(
            f"ingest: --graph {path}: dgl.load_graphs could not read it ({type(exc).__name__}: "
            f"{exc})."
        ) from None
    return graph_arrays(graphs[0])


# ------------------------------------------------------------------ edges
# over the function budget: one branch per input format (CSV/TSV, Parquet, NumPy, npz, PyG, DGL)
def _edge_batches(  # noqa: C901, PLR0912
    opts: IngestOptions, ids: NodeIds, graph: Optional[Dict[str, Any]]
) -> Iterator[Tuple[np.ndarray, np.ndarray, Any, int, int]]:
    """(src index, dst index, locate(i) -> text, done bytes, total bytes) per batch; unknown IDs
    refused."""
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
        arrays = [open_npy(f, "--edges") for f in files]
        if len(files) == 2:
            src, dst = arrays
            if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
                raise DatasetError(
                    f"ingest: --edges {files[0]} {files[1]}: two edge files must be 1-D and of "
                    "equal "
                    f"length (got {src.shape} and {dst.shape})."
                )
            total, read = len(src), lambda lo, hi: (src.rows(lo, hi), dst.rows(lo, hi))
        else:
            (array,) = arrays
            if array.ndim != 2 or 2 not in array.shape:
                raise DatasetError(
                    f"ingest: --edges {files[0]} has shape {array.shape}; an edge array must be "
                    "2xE "
                    f"or Ex2 (or give two 1-D files)."
                )
            if array.shape[0] == 2:
                total = array.shape[1]
                read = lambda lo, hi: (array.items(lo, hi - lo), array.items(total + lo, hi - lo))
            else:
                total = array.shape[0]
                read = lambda lo, hi: tuple(array.rows(lo, hi).T)
        if arrays[0].dtype.kind not in "iu":
            raise DatasetError(
                f"ingest: --edges {files[0]}: node IDs in a .npy must be integers "
                f"(got {arrays[0].dtype})."
            )
        yield from _array_batches(total, read, ids, f"--edges {files[0]}", _node_source(opts, ids))
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
    table = open_table(files[0], kind, opts.edges_csv)
    src_col = table.column(
        opts.src_column or ("src" if "src" in table.names else None), 0, "--src-column"
    )
    dst_col = table.column(
        opts.dst_column or ("dst" if "dst" in table.names else None), 1, "--dst-column"
    )
    if src_col == dst_col:
        raise DatasetError(
            f"ingest: {files[0]}: --src-column and --dst-column name the same column {src_col!r}."
        )
    import pyarrow as pa

    id_type = ids.type
    if not ids.identity and opts.nodes.id_type == "auto":
        edge_type = id_type_of(table, src_col, "auto")
        if edge_type != id_type and id_type.equals(pa.int64()):
            raise DatasetError(
                f"ingest: {files[0]}: the edges name nodes by strings but the node table's IDs are "
                f"integers; the IDs must be the same kind (--id-type string reads both as text)."
            )
    for batch in table.batches([src_col, dst_col], {src_col: id_type, dst_col: id_type}):
        cols = [batch.table.column(c).combine_chunks() for c in (src_col, dst_col)]
        coded = [ids.encode(c) for c in cols]
        for col_name, col, code in zip((src_col, dst_col), cols, coded):
            if (code < 0).any():
                i = int(np.flatnonzero(code < 0)[0])
                raise DatasetError(
                    f"ingest: {files[0]} {batch.locate(i)}, column {col_name!r}: node "
                    f"{col[i].as_py()!r} is not a node of the graph ({_node_source(opts, ids)})."
                )
        yield coded[0], coded[1], batch.locate, batch.done_bytes, table.size


def _node_source(opts: IngestOptions, ids: NodeIds) -> str:
    if ids.identity:
        return f"nodes are 0..{ids.num_nodes - 1}"
    return f"nodes are the IDs of {opts.nodes.features}"


def _array_batches(total: int, read, ids: NodeIds, where: str, known: str):
    """Edges from arrays: ``read(lo, hi)`` -> (sources, destinations) of edges lo..hi-1; ``known``
    says which
    nodes exist, for the error on one that does not."""
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
        yield s, d, (lambda i, lo=lo: f"edge {lo + i}"), lo + s.shape[0], total


# ------------------------------------------------------------------ nodes
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


def _split(
    labels: np.ndarray, fractions: Tuple[float, float, float], seed: int
) -> Dict[str, np.ndarray]:
    """Masks drawn among the labeled nodes (a seeded permutation, numpy only)."""
    n = labels.shape[0]
    labeled = np.flatnonzero(labels >= 0)
    order = labeled[np.random.default_rng(seed + 7919).permutation(labeled.shape[0])]
    masks, start = {}, 0
    for name, fraction in zip(("train_mask", "val_mask", "test_mask"), fractions):
        size = int(round(fraction * labeled.shape[0]))
        mask = np.zeros(n, dtype=bool)
        mask[order[start : start + size]] = True
        masks[name] = mask
        start += size
    return masks


# over the function budget: labels and masks from a column, a file, the graph or a drawn split
def _labels_and_masks(opts: IngestOptions, nodes: NodeResult, graph, notes: List[str]):  # noqa: C901, PLR0912
    n = nodes.ids.num_nodes
    labels = nodes.labels
    if opts.nodes.labels is not None:
        labels = read_labels(require_file(opts.nodes.labels, "--labels"), opts.nodes, nodes.ids)
    elif labels is None and graph is not None and graph.get("y") is not None:
        y = np.asarray(graph["y"])
        labels = (y.reshape(y.shape[0], -1)[:, 0]).astype(np.int64)
    if labels is None:
        raise DatasetError(
            "ingest: no labels given. Pass --labels FILE (.npy in node order, or a table keyed by "
            "node "
            "ID) or put a 'label' column in the node table (--label-column NAME)."
        )
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
        masks = _split(labels, opts.split, opts.seed)
        notes.append(
            f"split {opts.split[0]:g}/{opts.split[1]:g}/{opts.split[2]:g} of the labeled nodes "
            f"(seed {opts.seed})"
        )
    for name, mask in masks.items():
        bad = mask & (labels < 0)
        if bad.any():
            raise DatasetError(
                f"ingest: node {nodes.ids.name(int(np.flatnonzero(bad)[0]))} is in the {name} but "
                "has "
                f"no label."
            )
    if not masks["train_mask"].any():
        raise DatasetError(
            "ingest: the train mask is empty; training needs labeled training nodes. Give a "
            "non-empty --train-mask, or let --split draw one."
        )
    return labels, classes, masks


# ------------------------------------------------------------------- main
def ingest(opts: IngestOptions, progress=_nothing) -> Dict[str, Any]:
    """Write the graph folder ``opts.out``; returns the summary (also stored in its meta.json)."""
    import pyarrow as pa

    # Arrow's buffers from the system allocator while ingesting: jemalloc kept ~300 MB of freed CSV
    # blocks
    # mapped through the CSR stages (measured on 50M edges), the system heap gives them back
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
            raise DatasetError("ingest: the graph has no nodes.")
        labels, classes, masks = _labels_and_masks(opts, nodes, graph, notes)
        _release_heap()
        builder = CsrBuilder(
            work, n, opts.symmetrize, opts.self_loops, opts.duplicates, nodes.ids.name
        )
        for s, d, locate, done, total in _edge_batches(opts, nodes.ids, graph):
            builder.add(s, d, locate)
            progress("reading edges", done, total)
        _release_heap()
        stats = builder.finish(progress)
        np.save(work / "labels.npy", labels)
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
        )
        summary = {
            "name": opts.name or out.name,
            "num_nodes": n,
            "num_edges": stats.num_edges,
            "feat_dim": nodes.feat_dim,
            "num_classes": classes,
            "digest": digest,
            "index_dtype": str(np.dtype(builder.dtype)),
            "id_type": "int"
            if nodes.ids.identity or pa.types.is_integer(nodes.ids.type)
            else "string",
            "symmetrized": opts.symmetrize,
            "edges_read": stats.num_entries_read,
            "self_loops_dropped": stats.self_loops,
            "duplicates_dropped": stats.duplicates,
            "degree": degree_summary(indptr),
            "unlabeled": int((labels < 0).sum()),
            "split": {m: int(v.sum()) for m, v in masks.items()},
            "sources": {
                "edges": [str(p) for p in opts.edges],
                "graph": str(opts.graph) if opts.graph else None,
                "features": str(opts.nodes.features) if opts.nodes.features else None,
                "labels": str(opts.nodes.labels) if opts.nodes.labels else None,
            },
            "notes": notes,
            "ingest_seconds": round(time.perf_counter() - started, 3),
        }
        ondisk.finish(work, out, summary, opts.overwrite)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return summary


def ingest_arrays(
    out: Path,
    edge_index,
    features,
    labels,
    masks: Optional[Dict[str, Any]] = None,
    num_nodes: Optional[int] = None,
    **options,
) -> Dict[str, Any]:
    """Ingest in-memory arrays (numpy or torch): ``edge_index`` 2xE of node indices 0..N-1."""
    import tempfile

    to_np = lambda t: t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
    with tempfile.TemporaryDirectory(
        prefix="gnntrain-arrays-", dir=Path(out).expanduser().parent
    ) as tmp:
        tmp = Path(tmp)
        _save_rows(tmp / "edges.npy", to_np(edge_index))
        _save_rows(tmp / "features.npy", to_np(features))
        np.save(tmp / "labels.npy", to_np(labels))
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
            labels=tmp / "labels.npy",
            masks=mask_paths,
            negative_labels_unlabeled=True,
        )
        names = {
            tmp / "edges.npy": "edge_index",
            tmp / "features.npy": "the features (data.x)",
            tmp / "labels.npy": "the labels (data.y)",
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
    argument
    it was written from."""
    for path, name in names.items():
        for option in (
            "--edges",
            "--features",
            "--labels",
            "--masks",
            "--train-mask",
            "--val-mask",
            "--test-mask",
        ):
            message = message.replace(f"{option} {path}", name)
        message = message.replace(str(path), name)
    return message


def _save_rows(path: Path, array: np.ndarray, block_bytes: int = 64 * 2**20) -> None:
    """``array`` as a row-major .npy, written a block of rows at a time: a Fortran-ordered or
    strided array
    (pandas' ``to_numpy()``, a transposed tensor) becomes a plain one without a second copy in
    memory."""
    if array.flags.c_contiguous or array.ndim < 2:
        np.save(path, np.ascontiguousarray(array))
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=array.dtype, shape=array.shape)
    rows = max(1, block_bytes // max(1, array.dtype.itemsize * int(np.prod(array.shape[1:]))))
    for lo in range(0, array.shape[0], rows):
        out[lo : lo + rows] = array[lo : lo + rows]
    out.flush()
    del out
