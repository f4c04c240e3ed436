"""mode=single reproduces DGL's GCN example on Cora, and the distributed
layout keeps its accuracy."""
from __future__ import annotations

from conftest import CORA, requires_shared

DGL_EXAMPLE = ["model=gcn", "model.layers=2", "model.hidden=16", "model.dropout=0.5", "train.lr=0.01",
               "train.weight_decay=5e-4", "train.epochs=200"]


@requires_shared
def test_single_matches_dgl_gcn_example_on_cora(train):
    """dmlc/dgl examples/pytorch/gcn/train.py reports ~0.81 test accuracy."""
    s = train(CORA + DGL_EXAMPLE + ["mode=single", "train.eval_every=200"])
    assert s["accuracy"]["test"] >= 0.80, s["accuracy"]
    assert s["losses"][-1] < s["losses"][0]


@requires_shared
def test_single_short_run_passes_078(train):
    s = train(CORA + ["mode=single", "train.epochs=100", "train.eval_every=100"])
    assert s["accuracy"]["test"] > 0.78, s["accuracy"]


@requires_shared
def test_two_rank_accuracy_matches_single(train):
    """float32, same seed: 2-rank partition mode lands within 0.5 pp of single."""
    single = train(CORA + DGL_EXAMPLE + ["mode=single", "train.eval_every=200"])
    dist = train(CORA + DGL_EXAMPLE + ["mode=partition", "hardware.ranks_per_node=2", "train.eval_every=200"])
    assert abs(single["accuracy"]["test"] - dist["accuracy"]["test"]) <= 0.005, (single["accuracy"],
                                                                               dist["accuracy"])
