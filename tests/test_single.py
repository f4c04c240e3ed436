"""mode=single reproduces DGL's GCN example on Cora, and the distributed
layout keeps its accuracy."""

from __future__ import annotations

from conftest import CORA, requires_shared

DGL_EXAMPLE = [
    "model=gcn",
    "model.layers=2",
    "model.hidden=16",
    "model.dropout=0.5",
    "train.lr=0.01",
    "train.weight_decay=5e-4",
    "train.epochs=200",
]


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
    dist = train(
        CORA + DGL_EXAMPLE + ["mode=partition", "hardware.ranks_per_node=2", "train.eval_every=200"]
    )
    assert abs(single["accuracy"]["test"] - dist["accuracy"]["test"]) <= 0.005, (
        single["accuracy"],
        dist["accuracy"],
    )


def test_the_inputs_are_aggregated_once_per_run_and_the_model_is_unchanged(train, monkeypatch):
    """Dropout never touches the inputs, so single computes A·x of the first layer once
    (InputAggregate); every hidden layer still aggregates each epoch, and the trained model equals
    the one that recomputes it."""
    from gnntrain.models import kernels
    from gnntrain.modes.fullgraph import InputAggregate

    widths = []
    spmm = kernels.SparseAdjacency.spmm

    def counted(self, h):
        widths.append((h.shape[1], h.requires_grad))
        return spmm(self, h)

    monkeypatch.setattr(kernels.SparseAdjacency, "spmm", counted)
    run = [
        "dataset=csbm",
        "dataset.num_nodes=400",
        "dataset.feat_dim=8",
        "model=sage",
        "model.hidden=16",
        "model.layers=3",
        "train.epochs=3",
        "train.eval_every=3",
        "mode=single",
        "train.dtype=float64",
        "kernel=native",
    ]
    cached = train(run)
    inputs = [w for w in widths if w == (8, False)]
    # layer 2, per epoch
    assert len(inputs) == 1 and len([w for w in widths if w == (16, True)]) == 3, widths
    widths.clear()
    # like for like with the plain loops
    switched_off = train(run + ["train.cache_input_aggregation=false"])
    assert len([w for w in widths if w == (8, False)]) == 3 + 1  # every epoch and the evaluation
    assert cached["losses"] == switched_off["losses"]
    monkeypatch.setattr(InputAggregate, "__call__", lambda self, h: self.adjacency.spmm(h))
    widths.clear()
    recomputed = train(run)
    assert len([w for w in widths if w == (8, False)]) == 3 + 1  # every epoch and the evaluation
    assert cached["losses"] == recomputed["losses"]  # bit for bit: the same product, computed once
