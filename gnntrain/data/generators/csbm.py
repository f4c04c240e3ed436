"""The contextual stochastic block model (Deshpande et al., Contextual Stochastic Block Models,
2018): the default dataset."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnntrain.config.schema import DatasetConfig
from gnntrain.data.checks import _in_unit_interval, _number
from gnntrain.data.generators import (
    EDGE_BLOCK,
    Generator,
    GraphBlocks,
    block_rng,
    class_feature_rows,
    content_hash,
    fractions,
    materialize,
    register_generator,
)
from gnntrain.data.graph import GraphData
from gnntrain.errors import PlanError

LABELS, EDGES, FEATURES, MEANS = range(4)  # the random streams (block_rng)


def csbm_blocks(cfg) -> GraphBlocks:
    """Contextual stochastic block model (Deshpande et al. 2018).

    ``num_classes`` balanced classes; each undirected edge picks a uniform
    endpoint u and, with probability ``intra_ratio``, a partner of u's class,
    otherwise of another class. Features are N(μ_y, I) with class means of
    norm ``feature_snr``, so one node's features are a weak signal and
    averaging over same-class neighbours (what a GCN does) sharpens it.
    Labels and the class index are drawn whole (N integers); edges and
    features in blocks.
    """
    n, c, f = int(cfg.num_nodes), int(cfg.num_classes), int(cfg.feat_dim)
    seed, intra = int(cfg.seed), float(cfg.intra_ratio)
    labels = block_rng(seed, LABELS, 0).integers(0, c, size=n)
    order = np.argsort(labels, kind="stable")
    class_size = np.bincount(labels, minlength=c)
    class_start = np.concatenate([[0], np.cumsum(class_size)[:-1]])
    pairs = int(round(n * cfg.avg_degree / 2))
    feature_rows = class_feature_rows(seed, labels, c, f, float(cfg.feature_snr), MEANS, FEATURES)

    def edge_blocks():
        for block, lo in enumerate(range(0, pairs, EDGE_BLOCK)):
            m = min(EDGE_BLOCK, pairs - lo)
            rng = block_rng(seed, EDGES, block)
            u = rng.integers(0, n, size=m)
            same = rng.random(m) < intra
            target_class = np.where(
                same, labels[u], (labels[u] + rng.integers(1, max(c, 2), size=m)) % c
            )
            size = np.maximum(class_size[target_class], 1)
            yield u, order[class_start[target_class] + (rng.random(m) * size).astype(np.int64)]

    return GraphBlocks(
        name="csbm",
        num_nodes=n,
        feat_dim=f,
        num_classes=c,
        symmetrize=True,
        seed=seed,
        fractions=fractions(cfg),
        content_hash=content_hash("csbm", cfg),
        origin="generated (csbm)",
        edge_blocks=edge_blocks,
        feature_rows=feature_rows,
        labels=lambda indptr, indices, features: labels,
        edge_weights=bool(cfg.get("edge_weights", False)),
    )


def make_csbm(cfg) -> GraphData:
    return materialize(csbm_blocks(cfg))


def check(ds) -> None:
    n = int(_number(ds, "num_nodes"))
    if not _number(ds, "avg_degree") > 0:
        raise PlanError(
            "dataset.avg_degree",
            f"must be > 0 (got {ds.avg_degree}).",
            "set dataset.avg_degree to a positive value, e.g. 4",
        )
    if _number(ds, "avg_degree") > n - 1:
        raise PlanError(
            "dataset.avg_degree",
            f"{ds.avg_degree} is more than a simple graph on num_nodes={n} "
            f"nodes allows (at most {n - 1}: each node links to every other once).",
            "lower dataset.avg_degree or raise dataset.num_nodes",
        )
    _in_unit_interval(ds, "intra_ratio", "the fraction of edges inside a class")
    if not _number(ds, "feature_snr") >= 0:
        raise PlanError(
            "dataset.feature_snr",
            f"must be >= 0 (got {ds.feature_snr}).",
            "set dataset.feature_snr to 0 or more",
        )


@dataclass
class CsbmConfig(DatasetConfig):
    """csbm's parameters beyond every dataset's (``dataset.<name>``)."""

    avg_degree: float = 4.0  # directed edges per node (each undirected edge counted both ways)
    intra_ratio: float = 0.9  # fraction of edges that stay inside a class
    feature_snr: float = 1.0  # distance of class means in units of the noise std
    # each edge weighs a seeded hash of its pair in [0.5, 2) (model.edge_weight=true trains on it)
    edge_weights: bool = False


register_generator(
    Generator(
        name="csbm",
        config=CsbmConfig,
        blocks=csbm_blocks,
        directed_edges=lambda ds: int(round(int(ds.num_nodes) * float(ds.avg_degree))),
        check=check,
        description="contextual SBM: classes, intra-class edge ratio, Gaussian features",
    )
)
