"""R-MAT power-law graphs (Chakrabarti et al., R-MAT: A Recursive Model for Graph Mining, 2004)."""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch

from gnntrain.data.checks import TOLERANCE, _number
from gnntrain.data.generators import Generator, fractions, params_hash, register_generator
from gnntrain.data.graph import GraphData, clean_edges, split_masks
from gnntrain.errors import PlanError


def rmat_edges(num_nodes: int, num_edges: int, abcd, rng: np.random.Generator):
    """Recursive-matrix edges (Chakrabarti et al. 2004), one quadrant draw per level."""
    a, b, c, d = (float(x) for x in abcd)
    total = a + b + c + d
    a, b, c = a / total, b / total, c / total
    scale = max(1, math.ceil(math.log2(max(num_nodes, 2))))
    src = np.zeros(num_edges, dtype=np.int64)
    dst = np.zeros(num_edges, dtype=np.int64)
    for _ in range(scale):
        r = rng.random(num_edges, dtype=np.float32)
        src <<= 1
        dst <<= 1
        src += r >= a + b  # quadrants c, d: lower half
        dst += ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b, d: right half
    # Scramble ids so hubs are not all low ids, then fold into [0, n).
    perm = rng.permutation(1 << scale)
    return perm[src] % num_nodes, perm[dst] % num_nodes


def make_rmat(cfg) -> GraphData:
    """R-MAT power-law graph with learnable labels.

    Features are standard normal; labels are the argmax of a hidden linear
    map of own features plus (twice as strongly) the variance-normalised sum
    of in-neighbour features, so they depend on the graph and a GNN beats an
    MLP.
    """
    n, f, c = int(cfg.num_nodes), int(cfg.feat_dim), int(cfg.num_classes)
    rng = np.random.default_rng(int(cfg.seed))
    s, t = rmat_edges(n, int(cfg.num_edges), cfg.rmat_abcd, rng)
    src, dst = clean_edges(torch.from_numpy(s), torch.from_numpy(t), n, symmetrize=bool(cfg.symmetrize))

    features = rng.standard_normal((n, f), dtype=np.float32)
    hidden = rng.standard_normal((f, c)).astype(np.float32)
    proj = features @ hidden
    adj = sp.csr_matrix((np.ones(src.numel(), dtype=np.float32), (dst.numpy(), src.numpy())), shape=(n, n))
    deg = np.maximum(np.asarray(adj.sum(axis=1)).ravel(), 1.0)
    # neighbour sum scaled to unit variance per node, so the graph term dominates
    logits = proj + 2.0 * (adj @ proj) / np.sqrt(deg)[:, None]
    labels = np.argmax(logits, axis=1).astype(np.int64)

    train, val, test = split_masks(n, fractions(cfg), int(cfg.seed))
    return GraphData(
        name="rmat", num_nodes=n, src=src, dst=dst, features=torch.from_numpy(features),
        labels=torch.from_numpy(labels), train_mask=train, val_mask=val, test_mask=test,
        num_classes=c, content_hash="rmat-" + params_hash("rmat", cfg), origin="generated (R-MAT)",
    )


def check(ds) -> None:
    n = int(_number(ds, "num_nodes"))
    if _number(ds, "num_edges") > n * (n - 1):
        raise PlanError("dataset.num_edges", f"{ds.num_edges} is more than a simple directed graph on "
                        f"num_nodes={n} nodes holds (at most {n * (n - 1)}).",
                        "lower dataset.num_edges or raise dataset.num_nodes")
    abcd = ds.get("rmat_abcd")
    try:
        values = [float(x) for x in abcd]
    except (TypeError, ValueError):
        values = []
    if len(values) != 4 or not all(math.isfinite(v) and v >= 0 for v in values) \
            or abs(sum(values) - 1.0) > TOLERANCE:
        try:
            shown = "[" + ", ".join(str(x) for x in abcd) + "]"
        except TypeError:
            shown = str(abcd)
        raise PlanError("dataset.rmat_abcd", f"must be 4 non-negative quadrant probabilities summing to 1 "
                        f"(got {shown}).", "use e.g. dataset.rmat_abcd=[0.57,0.19,0.19,0.05]")


register_generator(Generator(
    name="rmat", generate=make_rmat,
    directed_edges=lambda ds: int(ds.num_edges) * (2 if ds.symmetrize else 1),
    check=check, description="R-MAT power law, labels from a hidden linear map of own and neighbour features"))
