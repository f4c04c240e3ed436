"""Generated graphs: a contextual SBM (the default dataset) and R-MAT.

Both are deterministic for a seed and use memory proportional to the graph
(edges are drawn as index arrays, never a dense N×N matrix).
"""
from __future__ import annotations

import json
import math

import numpy as np
import scipy.sparse as sp
import torch

from gnntrain.data.graph import GraphData, clean_edges, split_masks


def _params_hash(kind: str, cfg) -> str:
    import hashlib

    keys = ["num_nodes", "num_edges", "feat_dim", "num_classes", "seed", "avg_degree", "intra_ratio",
            "feature_snr", "rmat_abcd", "symmetrize", "train_fraction", "val_fraction", "test_fraction"]
    payload = {k: (list(cfg[k]) if k == "rmat_abcd" else cfg[k]) for k in keys}
    return hashlib.sha1(json.dumps([kind, 1, payload], sort_keys=True).encode()).hexdigest()[:16]


def _fractions(cfg):
    return (cfg.train_fraction, cfg.val_fraction, cfg.test_fraction)


def make_csbm(cfg) -> GraphData:
    """Contextual stochastic block model (Deshpande et al. 2018).

    ``num_classes`` balanced classes; each undirected edge picks a uniform
    endpoint u and, with probability ``intra_ratio``, a partner of u's class,
    otherwise of another class. Features are N(μ_y, I) with class means of
    norm ``feature_snr``, so one node's features are a weak signal and
    averaging over same-class neighbours (what a GCN does) sharpens it.
    """
    n, c, f = int(cfg.num_nodes), int(cfg.num_classes), int(cfg.feat_dim)
    rng = np.random.default_rng(int(cfg.seed))
    labels = rng.integers(0, c, size=n)
    order = np.argsort(labels, kind="stable")
    class_size = np.bincount(labels, minlength=c)
    class_start = np.concatenate([[0], np.cumsum(class_size)[:-1]])

    m = int(round(n * cfg.avg_degree / 2))
    u = rng.integers(0, n, size=m)
    same = rng.random(m) < cfg.intra_ratio
    target_class = np.where(same, labels[u], (labels[u] + rng.integers(1, max(c, 2), size=m)) % c)
    size = np.maximum(class_size[target_class], 1)
    v = order[class_start[target_class] + (rng.random(m) * size).astype(np.int64)]

    means = rng.standard_normal((c, f))
    means *= cfg.feature_snr / np.linalg.norm(means, axis=1, keepdims=True)
    features = (means[labels] + rng.standard_normal((n, f))).astype(np.float32)

    src, dst = clean_edges(torch.from_numpy(u), torch.from_numpy(v), n, symmetrize=True)
    train, val, test = split_masks(n, _fractions(cfg), int(cfg.seed))
    return GraphData(
        name="csbm", num_nodes=n, src=src, dst=dst, features=torch.from_numpy(features),
        labels=torch.from_numpy(labels.astype(np.int64)), train_mask=train, val_mask=val, test_mask=test,
        num_classes=c, content_hash="csbm-" + _params_hash("csbm", cfg), origin="generated (csbm)",
    )


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

    train, val, test = split_masks(n, _fractions(cfg), int(cfg.seed))
    return GraphData(
        name="rmat", num_nodes=n, src=src, dst=dst, features=torch.from_numpy(features),
        labels=torch.from_numpy(labels), train_mask=train, val_mask=val, test_mask=test,
        num_classes=c, content_hash="rmat-" + _params_hash("rmat", cfg), origin="generated (R-MAT)",
    )
