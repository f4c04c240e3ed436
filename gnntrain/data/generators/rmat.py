"""R-MAT power-law graphs (Chakrabarti et al., R-MAT: A Recursive Model for Graph Mining, 2004)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List

import numpy as np
import scipy.sparse as sp

from gnntrain.config.schema import DatasetConfig
from gnntrain.data.checks import TOLERANCE, _number
from gnntrain.data.generators import (
    EDGE_BLOCK,
    ROW_BLOCK,
    FeatureRows,
    Generator,
    GraphBlocks,
    block_rng,
    content_hash,
    fractions,
    materialize,
    register_generator,
    row_blocks,
)
from gnntrain.data.graph import GraphData
from gnntrain.errors import PlanError

EDGES, FEATURES, HIDDEN, SCRAMBLE = range(4)  # the random streams (block_rng)


def _quadrants(count: int, scale: int, abcd, rng: np.random.Generator):
    """``count`` recursive-matrix cells of a 2^scale square (Chakrabarti et al. 2004), one quadrant
    draw per level."""
    a, b, c, d = (float(x) for x in abcd)
    total = a + b + c + d
    a, b, c = a / total, b / total, c / total
    src = np.zeros(count, dtype=np.int64)
    dst = np.zeros(count, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(count, dtype=np.float32)
        src <<= 1
        dst <<= 1
        src += r >= a + b  # quadrants c, d: lower half
        dst += ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b, d: right half
    return src, dst


def _scale(num_nodes: int) -> int:
    return max(1, math.ceil(math.log2(max(num_nodes, 2))))


def rmat_edges(num_nodes: int, num_edges: int, abcd, rng: np.random.Generator):
    """Recursive-matrix edges in one draw, ids scrambled so hubs are not all low ids, folded into
    [0, n)."""
    scale = _scale(num_nodes)
    src, dst = _quadrants(num_edges, scale, abcd, rng)
    perm = rng.permutation(1 << scale)
    return perm[src] % num_nodes, perm[dst] % num_nodes


def rmat_blocks(cfg) -> GraphBlocks:
    """R-MAT power-law graph with learnable labels.

    Features are standard normal; labels are the argmax of a hidden linear
    map of own features plus (twice as strongly) the variance-normalised sum
    of in-neighbour features, so they depend on the graph and a GNN beats an
    MLP. The labels read the assembled graph, a block of rows at a time.
    """
    n, f, c = int(cfg.num_nodes), int(cfg.feat_dim), int(cfg.num_classes)
    seed, total, abcd = int(cfg.seed), int(cfg.num_edges), [float(x) for x in cfg.rmat_abcd]
    scale = _scale(n)

    def edge_blocks():
        perm = block_rng(seed, SCRAMBLE, 0).permutation(1 << scale)  # hubs spread over the ids
        for block, lo in enumerate(range(0, total, EDGE_BLOCK)):
            s, t = _quadrants(
                min(EDGE_BLOCK, total - lo), scale, abcd, block_rng(seed, EDGES, block)
            )
            yield perm[s] % n, perm[t] % n

    def feature_rows(lo: int, hi: int) -> np.ndarray:
        return block_rng(seed, FEATURES, lo // ROW_BLOCK).standard_normal(
            (hi - lo, f), dtype=np.float32
        )

    def labels(indptr: np.ndarray, indices: np.ndarray, features: FeatureRows) -> np.ndarray:
        hidden = block_rng(seed, HIDDEN, 0).standard_normal((f, c)).astype(np.float32)
        proj = np.empty((n, c), dtype=np.float32)
        for lo, hi in row_blocks(n):
            proj[lo:hi] = features(lo, hi) @ hidden
        out = np.empty(n, dtype=np.int64)
        # neighbour sum scaled to unit variance per node: the graph term dominates
        for lo, hi in row_blocks(n):
            e_lo, e_hi = int(indptr[lo]), int(indptr[hi])
            adj = sp.csr_matrix(
                (
                    np.ones(e_hi - e_lo, dtype=np.float32),
                    np.asarray(indices[e_lo:e_hi]),
                    np.asarray(indptr[lo : hi + 1]) - e_lo,
                ),
                shape=(hi - lo, n),
            )
            deg = np.maximum(np.diff(indptr[lo : hi + 1]), 1).astype(np.float32)
            logits = proj[lo:hi] + 2.0 * (adj @ proj) / np.sqrt(deg)[:, None]
            out[lo:hi] = np.argmax(logits, axis=1)
        return out

    return GraphBlocks(
        name="rmat",
        num_nodes=n,
        feat_dim=f,
        num_classes=c,
        symmetrize=bool(cfg.symmetrize),
        seed=seed,
        fractions=fractions(cfg),
        content_hash=content_hash("rmat", cfg),
        origin="generated (R-MAT)",
        edge_blocks=edge_blocks,
        feature_rows=feature_rows,
        labels=labels,
    )


def make_rmat(cfg) -> GraphData:
    return materialize(rmat_blocks(cfg))


def check(ds) -> None:
    n = int(_number(ds, "num_nodes"))
    if _number(ds, "num_edges") > n * (n - 1):
        raise PlanError(
            "dataset.num_edges",
            f"{ds.num_edges} is more than a simple directed graph on "
            f"num_nodes={n} nodes holds (at most {n * (n - 1)}).",
            "lower dataset.num_edges or raise dataset.num_nodes",
        )
    abcd = ds.get("rmat_abcd")
    try:
        values = [float(x) for x in abcd]
    except (TypeError, ValueError):
        values = []
    if (
        len(values) != 4
        or not all(math.isfinite(v) and v >= 0 for v in values)
        or abs(sum(values) - 1.0) > TOLERANCE
    ):
        try:
            shown = "[" + ", ".join(str(x) for x in abcd) + "]"
        except TypeError:
            shown = str(abcd)
        raise PlanError(
            "dataset.rmat_abcd",
            f"must be 4 non-negative quadrant probabilities summing to 1 (got {shown}).",
            "use e.g. dataset.rmat_abcd=[0.57,0.19,0.19,0.05]",
        )


@dataclass
class RmatConfig(DatasetConfig):
    """R-MAT's parameters beyond every dataset's (``dataset.<name>``)."""

    # quadrant probabilities
    rmat_abcd: List[float] = field(default_factory=lambda: [0.57, 0.19, 0.19, 0.05])


register_generator(
    Generator(
        name="rmat",
        config=RmatConfig,
        blocks=rmat_blocks,
        directed_edges=lambda ds: int(ds.num_edges) * (2 if ds.symmetrize else 1),
        check=check,
        description="R-MAT power law, labels from a hidden linear map of own and neighbour "
        "features",
    )
)
