"""Link prediction's held-out edges, given at ingest (``--val-edges FILE``, ``--test-edges FILE``):
read as ``--edges`` is (the same formats, columns and node IDs), self-loops and repeats dropped,
an undirected pair kept once as (smaller, larger) where the graph is symmetrised, and taken out of
the graph itself, so that the message-passing graph never holds an edge it is scored on."""

from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np

from gnntrain.data.edge_split import HELD_OUT
from gnntrain.data.ingest.edges import edge_batches
from gnntrain.data.ingest.nodes import NodeIds
from gnntrain.data.ingest.options import IngestOptions
from gnntrain.data.ingest.tables import require_file
from gnntrain.errors import DatasetError
from gnntrain.idsets import union_ids, unique_ids


def edge_keys(opts: IngestOptions, ids: NodeIds, graph) -> np.ndarray:
    """Sorted distinct int64 keys (src * N + dst) of the edges ``opts`` reads, self-loops left
    out, an undirected pair once as (smaller, larger) where the graph is symmetrised."""
    n = ids.num_nodes
    keys = [np.zeros(0, dtype=np.int64)]
    for s, d, *_ in edge_batches(opts, ids, graph):
        s, d = s.astype(np.int64), d.astype(np.int64)
        keep = s != d
        s, d = s[keep], d[keep]
        if opts.symmetrize:
            s, d = np.minimum(s, d), np.maximum(s, d)
        keys.append(unique_ids(s * n + d))
    return union_ids(*keys)


def read_held_out(opts: IngestOptions, ids: NodeIds, notes: List[str]) -> Dict[str, np.ndarray]:
    """{split: int64 (2, m) node indices} of the given held-out edges (none given: {})."""
    found: Dict[str, np.ndarray] = {}
    n = ids.num_nodes
    for split in HELD_OUT:
        path = opts.held_out.get(split)
        if path is None:
            continue
        option = f"--{split}-edges"
        one = dataclasses.replace(
            opts, edges=[require_file(path, option)], weights=None, weight_column=None, graph=None
        )
        key = edge_keys(one, ids, None)
        if key.size == 0:
            raise DatasetError(f"ingest: {option} {path} holds no edge between two nodes.")
        found[split] = np.stack([key // n, key % n])
        notes.append(f"{key.size:,} {split} edges held out for link prediction ({path})")
    if "val" in found and "test" in found:
        both = np.intersect1d(
            found["val"][0] * n + found["val"][1],
            found["test"][0] * n + found["test"][1],
            assume_unique=True,  # distinct keys (edge_keys)
        )
        if both.size:
            u, v = int(both[0] // n), int(both[0] % n)
            raise DatasetError(
                f"ingest: the edge {ids.name(u)} -> {ids.name(v)} is both a validation and a test "
                "edge; give each held-out edge to one split."
            )
    return found


def drawn_held_out(
    opts: IngestOptions, ids: NodeIds, graph, notes: List[str]
) -> Dict[str, np.ndarray]:
    """``--edge-split f_train,f_val,f_test``: the held-out edges drawn among the graph's edges (a
    first pass over them: 8 bytes an edge), in the canonical order and with the draw of
    ``task.edge_split`` (:func:`gnntrain.data.edge_split.draw_sides`), so ingesting with
    ``--edge-split F --seed S`` holds out the edges that ``task.edge_split=F task.split_seed=S``
    holds out of the whole graph at load."""
    from gnntrain.data.edge_split import draw_sides

    n = ids.num_nodes
    key = edge_keys(opts, ids, graph)
    what = "undirected edges" if opts.symmetrize else "directed edges"
    _, val, test = draw_sides(key.size, opts.edge_split, opts.seed, what)
    found = {}
    for split, side in (("val", val), ("test", test)):
        chosen = key[side.numpy()]
        found[split] = np.stack([chosen // n, chosen % n])
    fractions = "/".join(f"{f:g}" for f in opts.edge_split)
    notes.append(
        f"edge split {fractions} of the {key.size:,} {what} (seed {opts.seed}): "
        f"{found['val'].shape[1]:,} val and {found['test'].shape[1]:,} test edges held out"
    )
    return found


def held_out_edges(opts: IngestOptions, ids: NodeIds, graph, notes: List[str]):
    """{split: (2, m)} held-out edges: drawn (``--edge-split``) or read (``--val-edges``,
    ``--test-edges``), or none; both ways at once is one DatasetError."""
    if opts.edge_split is None:
        return read_held_out(opts, ids, notes)
    if any(opts.held_out.values()):
        raise DatasetError(
            "ingest: give held-out edges once: --edge-split draws them, --val-edges and "
            "--test-edges name them; not both."
        )
    return drawn_held_out(opts, ids, graph, notes)


def held_out_keys(held_out: Dict[str, np.ndarray], n: int, symmetric: bool) -> np.ndarray:
    """Sorted int64 keys (src * n + dst) of every held-out edge, both directions where the graph
    is symmetric: what the graph's own edges must not hold."""
    keys = []
    for edges in held_out.values():
        keys.append(edges[0] * n + edges[1])
        if symmetric:
            keys.append(edges[1] * n + edges[0])
    return union_ids(*keys)
