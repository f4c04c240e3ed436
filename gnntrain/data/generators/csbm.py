"""The contextual stochastic block model (Deshpande et al., Contextual Stochastic Block Models, 2018):
the default dataset."""
from __future__ import annotations

import numpy as np
import torch

from gnntrain.data.checks import _in_unit_interval, _number
from gnntrain.data.generators import Generator, fractions, params_hash, register_generator
from gnntrain.data.graph import GraphData, clean_edges, split_masks
from gnntrain.errors import PlanError


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
    train, val, test = split_masks(n, fractions(cfg), int(cfg.seed))
    return GraphData(
        name="csbm", num_nodes=n, src=src, dst=dst, features=torch.from_numpy(features),
        labels=torch.from_numpy(labels.astype(np.int64)), train_mask=train, val_mask=val, test_mask=test,
        num_classes=c, content_hash="csbm-" + params_hash("csbm", cfg), origin="generated (csbm)",
    )



def check(ds) -> None:
    n = int(_number(ds, "num_nodes"))
    if not _number(ds, "avg_degree") > 0:
        raise PlanError("dataset.avg_degree", f"must be > 0 (got {ds.avg_degree}).",
                        "set dataset.avg_degree to a positive value, e.g. 4")
    if _number(ds, "avg_degree") > n - 1:
        raise PlanError("dataset.avg_degree", f"{ds.avg_degree} is more than a simple graph on num_nodes={n} "
                        f"nodes allows (at most {n - 1}: each node links to every other once).",
                        "lower dataset.avg_degree or raise dataset.num_nodes")
    _in_unit_interval(ds, "intra_ratio", "the fraction of edges inside a class")
    if not _number(ds, "feature_snr") >= 0:
        raise PlanError("dataset.feature_snr", f"must be >= 0 (got {ds.feature_snr}).",
                        "set dataset.feature_snr to 0 or more")


register_generator(Generator(
    name="csbm", generate=make_csbm, directed_edges=lambda ds: int(round(int(ds.num_nodes) * float(ds.avg_degree))),
    check=check, description="contextual SBM: classes, intra-class edge ratio, Gaussian features"))
