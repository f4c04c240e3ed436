"""partitioner=ldg (gnntrain/partition/streaming.py): one streaming pass over the CSR in O(N)
memory, for graphs METIS cannot load. Its metrics equal the edge-list metrics, it keeps its balance
bound, cuts far fewer edges than hashing on a clustered graph, trains exactly, and partitions an
ingested graph without ever building its edge lists."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import EXACT, assert_exact, compose, forbid_edge_lists, single_losses

from gnntrain.partition import compute_metrics
from gnntrain.partition.partitioners import random_parts
from gnntrain.partition.streaming import csr_from_edges, csr_metrics, ldg_parts

CSBM = ["dataset=csbm", "dataset.num_nodes=3000", "dataset.avg_degree=10"]


def _csbm_edges():
    from gnntrain.data import load_dataset

    data = load_dataset(compose(CSBM))
    return data.src.numpy(), data.dst.numpy(), data.num_nodes


@pytest.mark.parametrize("k", [2, 3, 4])
def test_csr_metrics_equal_the_edge_list_metrics(k):
    src, dst, n = _csbm_edges()
    parts = random_parts(n, k, seed=1)
    assert csr_metrics(*csr_from_edges(src, dst, n), parts, k) == compute_metrics(
        src, dst, parts, k
    )


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("weights", ["nnz", "uniform"])
def test_ldg_keeps_its_balance_and_cuts_less_than_hashing(k, weights):
    src, dst, n = _csbm_edges()
    indptr, indices = csr_from_edges(src, dst, n)
    eps = 0.05
    parts = ldg_parts(indptr, indices, k, weights, eps)
    load = np.bincount(
        parts, weights=np.diff(indptr) + 1 if weights == "nnz" else None, minlength=k
    )
    heaviest_node = float(np.diff(indptr).max() + 1) if weights == "nnz" else 1.0
    assert load.max() <= (1 + eps) * load.sum() / k + heaviest_node, load
    cut = compute_metrics(src, dst, parts, k).edge_cut
    hashed = compute_metrics(src, dst, random_parts(n, k, seed=0), k).edge_cut
    assert cut < 0.8 * hashed, (cut, hashed)


def test_partition_mode_with_ldg_equals_single(train):
    graph = ["dataset=csbm", "dataset.num_nodes=400"]
    summary = train(
        graph + EXACT + ["mode=partition", "partitioner=ldg", "hardware.ranks_per_node=2"]
    )
    assert summary["partition"]["partitioner"] == "ldg"
    assert_exact(summary["losses"], single_losses(train, graph + EXACT))


def test_ldg_partitions_an_ingested_graph_from_its_csr(tmp_path, cache_dir, monkeypatch):
    from gnntrain.data import load_dataset
    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.plan import build_plan, plan_mode

    folder = tmp_path / "graph"
    write_generated(compose(CSBM).dataset, folder)
    cfg = compose(
        [
            "dataset=files",
            f"dataset.path={folder}",
            f"cache_dir={cache_dir}",
            "mode=partition",
            "partitioner=ldg",
            "hardware.ranks_per_node=4",
        ]
    )
    plan = build_plan(cfg)
    data = load_dataset(plan.config_obj)

    forbid_edge_lists(monkeypatch, "the streaming partitioner")
    part, _ = plan_mode(plan).partition(data, plan)
    indptr, indices = data.csr
    expected = ldg_parts(indptr, indices, 4, "nnz", 0.05)
    assert np.array_equal(part.parts, expected) and part.metrics == csr_metrics(
        indptr, indices, expected, 4
    )
    assert np.array_equal(np.sort(part.perm), np.arange(data.num_nodes))
