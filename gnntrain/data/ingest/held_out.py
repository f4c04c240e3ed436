"""Link prediction's held-out edges, given at ingest (``--val-edges FILE``, ``--test-edges FILE``):
read as ``--edges`` is (the same formats, columns and node IDs), self-loops and repeats dropped,
an undirected pair kept once as (smaller, larger) where the graph is symmetrised, and taken out of
the graph itself, so that the message-passing graph never holds an edge it is scored on."""

from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np

from gnntrain.data.ingest.edges import edge_batches
from gnntrain.data.ingest.nodes import NodeIds
from gnntrain.data.ingest.options import IngestOptions
from gnntrain.data.ingest.tables import require_file
from gnntrain.errors import DatasetError

SPLITS = ("val", "test")


def read_held_out(opts: IngestOptions, ids: NodeIds, notes: List[str]) -> Dict[str, np.ndarray]:
    """{split: int64 (2, m) node indices} of the given held-out edges (none given: {})."""
    found: Dict[str, np.ndarray] = {}
    n = ids.num_nodes
    for split in SPLITS:
        path = opts.held_out.get(split)
        if path is None:
            continue
        option = f"--{split}-edges"
        one = dataclasses.replace(
            opts, edges=[require_file(path, option)], weights=None, weight_column=None, graph=None
        )
        pairs = [(s, d) for s, d, *_ in edge_batches(one, ids, None)]
        src = np.concatenate([p[0] for p in pairs]).astype(np.int64) if pairs else np.zeros(0)
        dst = np.concatenate([p[1] for p in pairs]).astype(np.int64) if pairs else np.zeros(0)
        keep = src != dst
        if opts.symmetrize:  # an undirected pair, once
            src, dst = np.minimum(src, dst), np.maximum(src, dst)
        key = np.unique(src[keep].astype(np.int64) * n + dst[keep])
        if key.size == 0:
            raise DatasetError(f"ingest: {option} {path} holds no edge between two nodes.")
        found[split] = np.stack([key // n, key % n])
        notes.append(f"{key.size:,} {split} edges held out for link prediction ({path})")
    if "val" in found and "test" in found:
        both = np.intersect1d(
            found["val"][0] * n + found["val"][1], found["test"][0] * n + found["test"][1]
        )
        if both.size:
            u, v = int(both[0] // n), int(both[0] % n)
            raise DatasetError(
                f"ingest: the edge {ids.name(u)} -> {ids.name(v)} is both a validation and a test "
                "edge; give each held-out edge to one split."
            )
    return found


def held_out_keys(held_out: Dict[str, np.ndarray], n: int, symmetric: bool) -> np.ndarray:
    """Sorted int64 keys (src * n + dst) of every held-out edge, both directions where the graph
    is symmetric: what the graph's own edges must not hold."""
    keys = []
    for edges in held_out.values():
        keys.append(edges[0] * n + edges[1])
        if symmetric:
            keys.append(edges[1] * n + edges[0])
    return np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
