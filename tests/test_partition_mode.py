"""Partition mode's measured bytes equal the closed forms of
docs/design.md#partition, computed independently from the partition here."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compose

from gnntrain.data import load_dataset
from gnntrain.partition import partition_graph


def _nnz_cols_total(src, dst, parts, k):
    """Σ_i Σ_{j≠i} |NnzCols(A_ij)| by brute force over block pairs."""
    total = 0
    for i in range(k):
        for j in range(k):
            if i != j:
                total += len(set(src[(parts[dst] == i) & (parts[src] == j)].tolist()))
    return total


@pytest.mark.parametrize("model,p", [("gcn", 2), ("sage", 3), ("gcn", 4)])
def test_halo_bytes_equal_closed_form(train, cache_dir, model, p):
    overrides = [
        "train.dtype=float64",
        "model.dropout=0",
        "train.epochs=2",
        f"model={model}",
        f"hardware.ranks_per_node={p}",
        "mode.comm=sparse",
    ]
    summary = train(overrides)
    cfg = compose([f"cache_dir={cache_dir}"] + overrides)
    data = load_dataset(cfg)
    part, hit = partition_graph(
        data.src.numpy(),
        data.dst.numpy(),
        data.num_nodes,
        p,
        cfg.partitioner,
        data.content_hash,
        cache_dir,
    )
    assert hit, "the run should have cached this partitioning"
    halo_rows = _nnz_cols_total(data.src.numpy(), data.dst.numpy(), part.parts, p)
    assert halo_rows == part.metrics.total_volume
    dims = [data.feat_dim, cfg.model.hidden, data.num_classes]
    # GCN and SAGE aggregate first unless the layer narrows (then H.W, a gradient path, is
    # aggregated);
    # aggregating the input features themselves needs no gradient
    first = [d_in <= d_out for d_in, d_out in zip(dims[:-1], dims[1:])]
    widths = [d_in if f else d_out for f, d_in, d_out in zip(first, dims[:-1], dims[1:])]
    needs_grad = [layer > 0 or not f for layer, f in enumerate(first)]
    assert widths == [cfg.model.hidden, data.num_classes] and needs_grad == [True, True]
    fwd = sum(widths) * halo_rows * 8
    bwd = sum(w for w, g in zip(widths, needs_grad) if g) * halo_rows * 8
    kinds = summary["comm_bytes"]["by_kind"]
    assert kinds["halo_fwd"] == fwd
    assert kinds.get("halo_bwd", 0) == bwd
    params = sum(np.prod(s) for s in _param_shapes(model, dims))
    assert kinds["allreduce"] == p * params * 8
    assert summary["partition"]["total_volume"] == halo_rows


def _param_shapes(model, dims):
    shapes = []
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        if model == "gcn":
            shapes += [(d_in, d_out), (d_out,)]
        else:
            shapes += [(d_out, d_in), (d_out, d_in), (d_out,)]
    return shapes


def test_oblivious_bytes_equal_allgather_form(train):
    summary = train(
        [
            "train.dtype=float64",
            "model.dropout=0",
            "train.epochs=2",
            "hardware.ranks_per_node=3",
            "mode.comm=oblivious",
        ]
    )
    n, widths = 2708, [16, 7]  # csbm default: 128 -> 16 -> 7, GCN transforms first on both layers
    assert summary["comm_bytes"]["by_kind"]["allgather"] == (3 - 1) * n * sum(widths) * 8
    assert summary["comm_bytes"]["per_epoch"] == sum(summary["comm_bytes"]["by_kind"].values())


def test_sparse_sends_less_than_oblivious(train):
    common = ["train.epochs=2", "hardware.ranks_per_node=4"]
    sparse = train(common + ["mode.comm=sparse"])["comm_bytes"]["by_kind"]
    oblivious = train(common + ["mode.comm=oblivious"])["comm_bytes"]["by_kind"]
    assert sparse["halo_fwd"] < oblivious["allgather"]


def test_sub_groups_get_the_run_comm_timeout(monkeypatch):
    """1.5D row groups carry ``comm_timeout_s``; torch's default for a new group is 30 minutes,
    so without it a stalled peer would hang a row all-reduce that long."""
    from datetime import timedelta

    import torch.distributed as dist

    from gnntrain.comm import Communicator

    seen = {}
    monkeypatch.setattr(
        dist, "new_group", lambda ranks, timeout=None: seen.update(ranks=ranks, timeout=timeout)
    )
    Communicator(0, 4, timeout_s=5.0).new_group([0, 1])
    assert seen == {"ranks": [0, 1], "timeout": timedelta(seconds=5.0)}
