"""Partition layer: partitioners, relabelling + metrics, and the on-disk cache."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Optional

import numpy as np

from gnntrain.partition.cache import PartitionCache, cache_key
from gnntrain.partition.layout import (
    Partitioning,
    PartitionMetrics,
    compute_metrics,
    relabel,
    split_chunks,
)
from gnntrain.partition.partitioners import (
    PARTITIONERS,
    bandwidth,
    metis_parts,
    partition_nodes,
    rcm_order,
)

__all__ = [
    "CSR_PARTITIONERS",
    "reads_csr",
    "PARTITIONERS",
    "Partitioning",
    "PartitionMetrics",
    "compute_metrics",
    "known_metrics",
    "partition_graph",
    "partitioner_options",
    "relabel",
    "split_chunks",
]

log = logging.getLogger("gnntrain.partition")

# partitioners that read a destination-sorted CSR without the edge lists (METIS a symmetric one)
CSR_PARTITIONERS = ("ldg", "kaminpar", "metis")


def reads_csr(cfg, symmetric: bool) -> bool:
    """Whether partitioner ``cfg`` partitions a graph given as its CSR (with ``symmetric``: every
    edge's reverse is in it) without building the edge lists."""
    if cfg.reorder is not None or cfg.name not in CSR_PARTITIONERS:
        return False
    return symmetric or cfg.name != "metis"


def partitioner_options(cfg) -> dict:
    keys = ["name", "seed", "vertex_weights", "reorder"]
    if cfg.name == "volume":
        keys += ["imbalance_eps", "max_volume_growth", "refine_rounds"]
    if cfg.name == "ldg":
        keys += ["imbalance_eps"]
    if cfg.name == "kaminpar":  # threads change neither the key nor, by design, much of the result
        keys += ["imbalance_eps", "row_weight", "preset", "compress"]
    options = {key: getattr(cfg, key) for key in keys}
    if cfg.name == "kaminpar":  # refined for the volume unless told otherwise
        options["refine"] = str(getattr(cfg, "refine", "volume"))
    if cfg.name in ("metis", "volume") and getattr(cfg, "objective", "cut") != "cut":
        options["objective"] = cfg.objective  # keys of partitions cut by edge cut stay as they were
    if cfg.name in ("metis", "volume") and getattr(cfg, "row_weight", 0):
        # likewise: keys without row weights are unchanged
        options["row_weight"] = float(cfg.row_weight)
    return options


def known_metrics(
    cfg, dataset_hash: str, k: int, cache_root: Optional[Path]
) -> Optional[PartitionMetrics]:
    """The volumes of the partitioning ``cfg`` makes of the dataset ``dataset_hash`` into ``k``
    parts, where an earlier run left it in the cache at ``cache_root``; None otherwise (a plan then
    estimates without it)."""
    if cache_root is None or str(cfg.name) == "auto" or k < 2:
        return None
    stored = PartitionCache(cache_root).metrics(
        cache_key(dataset_hash, partitioner_options(cfg), k)
    )
    if stored is None:
        return None
    stored = dict(stored)
    for name in ("send_volume", "recv_volume"):
        stored[name] = tuple(stored.get(name) or ())
    try:
        return PartitionMetrics(**stored)
    except TypeError:  # written by another version
        return None


def partition_graph(
    src: Optional[np.ndarray],
    dst: Optional[np.ndarray],
    num_nodes: int,
    k: int,
    cfg,
    dataset_hash: str,
    cache_root: Optional[Path] = None,
    csr: Optional[tuple] = None,
    symmetric: bool = False,
) -> tuple:
    """Partition the directed edge list into k contiguous parts (cached).

    Returns ``(Partitioning, cache_hit)``. Metrics are computed on the edges
    as given (the caller decides about self-loops; they never cross parts).
    ``csr``: (indptr, indices) of the same edges, destination-sorted, instead of the lists, with
    ``symmetric`` saying whether every edge's reverse is in it: the streaming partitioner (``ldg``,
    :mod:`gnntrain.partition.streaming`) reads it in O(N) memory beside it, and ``kaminpar``
    (:mod:`gnntrain.partition.kaminpar`) writes its input file from it a block at a time.
    """
    from gnntrain.errors import PlanError
    from gnntrain.partition.choice import resolved
    from gnntrain.partition.streaming import csr_metrics, ldg_parts

    edges = int(csr[0][-1]) if csr is not None else int(np.asarray(src).shape[0])
    cfg = resolved(cfg, num_nodes, edges)

    if cfg.reorder not in (None, "rcm"):
        raise PlanError(
            "partitioner.reorder", f"unknown reordering '{cfg.reorder}'.", "use null or rcm"
        )
    if csr is None:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    elif not reads_csr(cfg, symmetric):
        raise PlanError(
            "partitioner",
            f"partitioner={cfg.name} (reorder {cfg.reorder}) needs the edge lists.",
            "use partitioner=kaminpar or ldg with partitioner.reorder=null for a graph given as a "
            "CSR",
        )
    elif k > num_nodes:
        raise PlanError(
            "world size",
            f"{k} parts requested for a graph of {num_nodes} nodes.",
            "use at most as many parts as nodes",
        )

    scratch = None if cache_root is None else Path(cache_root) / "scratch"

    def build():
        if csr is not None and cfg.name == "kaminpar":
            from gnntrain.partition.kaminpar import kaminpar_parts

            parts = kaminpar_parts(*csr, symmetric, k, cfg, scratch)
        elif csr is not None and cfg.name == "metis":
            parts = metis_parts(
                None,
                None,
                num_nodes,
                k,
                cfg.seed,
                cfg.vertex_weights,
                str(getattr(cfg, "objective", "cut")),
                float(getattr(cfg, "row_weight", 0)),
                adjacency=csr,
            )
        elif csr is not None:
            parts = ldg_parts(*csr, k, cfg.vertex_weights, cfg.imbalance_eps)
        else:
            parts = partition_nodes(src, dst, num_nodes, k, cfg, scratch)
        order = (
            (lambda nodes: rcm_order(src, dst, num_nodes, nodes)) if cfg.reorder == "rcm" else None
        )
        perm, inverse, offsets = relabel(parts, k, order)
        return {"parts": parts, "perm": perm, "inverse": inverse, "offsets": offsets}, {
            "dataset": dataset_hash,
            "k": k,
            "partitioner": partitioner_options(cfg),
        }

    if cache_root is None:
        arrays, meta = build()
        hit = False
    else:
        key = cache_key(dataset_hash, partitioner_options(cfg), k)
        arrays, meta, hit = PartitionCache(cache_root).get_or_build(key, build)
        if hit:
            log.info("partition cache hit: %s", PartitionCache(cache_root).path(key))
    if csr is not None:
        metrics = csr_metrics(*csr, arrays["parts"], k)
    else:
        metrics = compute_metrics(src, dst, arrays["parts"], k)
    if cache_root is not None:
        cache = PartitionCache(cache_root)
        if cache.metrics(key) is None:
            cache.store_metrics(key, dataclasses.asdict(metrics))
    bw = None
    if cfg.reorder == "rcm":
        inv = arrays["inverse"]
        bw = bandwidth(inv[src], inv[dst])
    return Partitioning(
        parts=arrays["parts"],
        perm=arrays["perm"],
        inverse=arrays["inverse"],
        offsets=arrays["offsets"],
        metrics=metrics,
        bandwidth=bw,
    ), hit
