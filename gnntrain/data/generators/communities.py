"""``dataset=communities``: a graph with the locality of real graphs, for partition-parallel modes.

csbm's edges pick a uniform partner of a class that spans a seventh of the graph, so at p = 4 every
partitioner leaves a halo of about N rows per layer; real graphs (ogbn-products, social and
co-purchase networks) are power-law and clustered at several scales, which is what lets METIS and
KaMinPar cut few edges. This generator is a degree-corrected hierarchical stochastic block model
(Karrer and Newman, *Stochastic blockmodels and community structure in networks*, Phys. Rev. E 83,
2011, §II for the degree correction; Chung and Lu, *Connected components in random graphs with
given expected degree sequences*, 2002, for the endpoint draws; Lancichinetti, Fortunato and
Radicchi's LFR benchmark, Phys. Rev. E 78, 2008, for power-law degrees inside communities):

- every node draws a weight θ from a Pareto law with tail exponent ``degree_exponent`` (its expected
  degree is proportional to θ), capped at ``max_degree_ratio`` times the mean;
- nodes sit in leaf communities of lognormal sizes around ``leaf_size``; ``branching`` consecutive
  communities of one level form a community of the next, for ``levels`` levels;
- each undirected edge draws one endpoint ∝ θ over the graph, then a level with the probabilities
  ``locality`` (leaf first; what is left is the whole graph), and its partner ∝ θ inside the first
  endpoint's community of that level;
- each top-level community has a class; a node keeps it with probability ``label_purity`` and takes
  a uniform class otherwise, so edge homophily is about Σ locality · purity² (0.82 measured on a
  1M-node graph with the defaults);
- features are N(μ_y, I), class means of norm ``feature_snr`` (as csbm);
- node IDs are shuffled (``shuffle``), so ID order carries no locality that range partitioning
  could exploit.

The defaults are calibrated to ogbn-products' published statistics (Hu et al., *Open Graph
Benchmark*, 2020, Table 1: 2,449,029 nodes, 61,859,140 undirected edges, 47 classes, 100 features;
edge homophily 0.81). Measured at 1M nodes: 49.8 directed edges per node after repeats are merged,
median degree 33, maximum 4,172, edge homophily 0.82. The edges, features and labels come in blocks
like csbm's, so ``gnntrain generate`` writes any size in bounded memory (a few arrays of N).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

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
    register_generator,
)
from gnntrain.errors import PlanError
from gnntrain.idsets import unique_ids

WEIGHTS, SIZES, CLASSES, LABELS, EDGES, FEATURES, MEANS, SHUFFLE = range(8)  # random streams


def _leaf_starts(n: int, leaf_size: float, seed: int) -> np.ndarray:
    """Start of each leaf community in the internal order, and n at the end: lognormal sizes
    (σ = 0.5) around ``leaf_size``, at least one node each."""
    rng = block_rng(seed, SIZES, 0)
    count = max(1, int(np.ceil(n / leaf_size)))
    sizes = rng.lognormal(0.0, 0.5, size=count)
    bounds = np.floor(np.cumsum(sizes) / sizes.sum() * n).astype(np.int64)
    starts = unique_ids(np.concatenate([[0], bounds[:-1], [n]]))
    return starts


def communities_blocks(cfg) -> GraphBlocks:
    n, c, f = int(cfg.num_nodes), int(cfg.num_classes), int(cfg.feat_dim)
    seed, branching, levels = int(cfg.seed), int(cfg.branching), int(cfg.levels)
    locality = np.asarray(list(cfg.locality), dtype=np.float64)

    # expected-degree weights in the internal order, and their running sum for the draws ∝ θ
    exponent = float(cfg.degree_exponent) - 1.0
    theta = block_rng(seed, WEIGHTS, 0).pareto(exponent, size=n) + 1.0
    np.minimum(theta, float(cfg.max_degree_ratio) * theta.mean(), out=theta)
    cum = np.concatenate([[0.0], np.cumsum(theta)])
    del theta
    starts = _leaf_starts(n, float(cfg.leaf_size), seed)
    leaves = starts.size - 1
    top = max(1, branching ** (levels - 1))
    top_class = block_rng(seed, CLASSES, 0).integers(0, c, size=(leaves + top - 1) // top)
    leaf_of = np.repeat(np.arange(leaves), np.diff(starts))
    rng = block_rng(seed, LABELS, 0)
    internal_labels = np.where(
        rng.random(n) < float(cfg.label_purity), top_class[leaf_of // top], rng.integers(0, c, n)
    )
    del leaf_of
    ids = (
        block_rng(seed, SHUFFLE, 0).permutation(n) if cfg.shuffle else np.arange(n, dtype=np.int64)
    )
    labels = np.empty(n, dtype=np.int64)
    labels[ids] = internal_labels
    del internal_labels
    pairs = int(round(n * float(cfg.avg_degree) / 2))
    feature_rows = class_feature_rows(seed, labels, c, f, float(cfg.feature_snr), MEANS, FEATURES)
    level_cdf = np.cumsum(locality)

    def draw(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Internal positions drawn ∝ θ inside [lo, hi) (one range per draw)."""
        target = cum[lo] + rng.random(lo.size) * (cum[hi] - cum[lo])
        return np.clip(np.searchsorted(cum, target, side="right") - 1, lo, hi - 1)

    def edge_blocks():
        everyone = np.int64(n)
        for block, first in enumerate(range(0, pairs, EDGE_BLOCK)):
            m = min(EDGE_BLOCK, pairs - first)
            rng = block_rng(seed, EDGES, block)
            u = draw(np.zeros(m, dtype=np.int64), np.full(m, everyone), rng)
            level = np.searchsorted(level_cdf, rng.random(m), side="right")  # == levels: global
            leaf = np.searchsorted(starts, u, side="right") - 1
            span = branching ** np.minimum(level, levels - 1)
            first_leaf = (leaf // span) * span
            lo = np.where(level < levels, starts[first_leaf], 0)
            hi = np.where(level < levels, starts[np.minimum(first_leaf + span, leaves)], everyone)
            v = draw(lo, hi, rng)
            yield ids[u], ids[v]

    return GraphBlocks(
        name="communities",
        num_nodes=n,
        feat_dim=f,
        num_classes=c,
        symmetrize=True,
        seed=seed,
        fractions=fractions(cfg),
        content_hash=content_hash("communities", cfg),
        origin="generated (communities)",
        edge_blocks=edge_blocks,
        feature_rows=feature_rows,
        labels=lambda indptr, indices, features: labels,
    )


def check(ds) -> None:
    n = int(_number(ds, "num_nodes"))
    if not 0 < _number(ds, "avg_degree") <= n - 1:
        raise PlanError(
            "dataset.avg_degree",
            f"must lie in (0, num_nodes - 1] = (0, {n - 1}] (got {ds.avg_degree}).",
            "set dataset.avg_degree to a positive value below num_nodes, e.g. 50",
        )
    if not _number(ds, "degree_exponent") > 2:
        raise PlanError(
            "dataset.degree_exponent",
            f"must be > 2 for a finite mean degree (got {ds.degree_exponent}).",
            "set dataset.degree_exponent between 2.1 and 3 (real graphs)",
        )
    for key, low in (("leaf_size", 1), ("branching", 1), ("levels", 1), ("max_degree_ratio", 1)):
        if _number(ds, key) < low:
            raise PlanError(
                f"dataset.{key}", f"must be >= {low} (got {ds.get(key)}).", f"raise dataset.{key}"
            )
    locality = list(ds.locality)
    if len(locality) != int(ds.levels) or any(not 0 <= float(p) <= 1 for p in locality):
        raise PlanError(
            "dataset.locality",
            f"needs one probability in [0, 1] per level ({int(ds.levels)}), got {locality}.",
            "give the share of edges inside the leaf, its parent, ... community, "
            "e.g. [0.6, 0.25, 0.12]",
        )
    if sum(float(p) for p in locality) > 1 + 1e-9:
        raise PlanError(
            "dataset.locality",
            f"its shares add up to {sum(float(p) for p in locality):g}, over 1.",
            "lower them: what they leave below 1 is the share of edges across the whole graph",
        )
    _in_unit_interval(ds, "label_purity", "the share of nodes that keep their community's class")


@dataclass
class CommunitiesConfig(DatasetConfig):
    """communities' parameters beyond every dataset's (``dataset.<name>``)."""

    # directed edges drawn per node; repeats are merged, which leaves about 0.76 of them with the
    # defaults: 66 gives ogbn-products' 50.5 (2 x 61,859,140 / 2,449,029)
    avg_degree: float = 66.0
    degree_exponent: float = 2.5  # P(degree = k) ~ k^-exponent
    max_degree_ratio: float = 300.0  # the largest expected degree, in multiples of the mean
    leaf_size: float = 250.0  # mean nodes per leaf community
    branching: int = 8  # communities of one level per community of the next
    levels: int = 3
    # share of edges inside the leaf, its parent, ... community; the rest cross the whole graph
    locality: List[float] = field(default_factory=lambda: [0.6, 0.25, 0.12])
    label_purity: float = 0.92  # share of nodes that keep their top-level community's class
    feature_snr: float = 1.0
    shuffle: bool = True


register_generator(
    Generator(
        name="communities",
        config=CommunitiesConfig,
        blocks=communities_blocks,
        directed_edges=lambda ds: int(round(int(ds.num_nodes) * float(ds.avg_degree))),
        check=check,
        description="power-law degrees, nested communities, tunable homophily (ogbn-products-like)",
    )
)
