"""partitioner=kaminpar (gnntrain/partition/kaminpar.py) and partitioner=auto
(gnntrain/partition/choice.py): the ParHiP file written block by block is the graph's symmetric
adjacency, KaMinPar's parts keep their balance and cut like METIS, an ingested graph is partitioned
without its edge lists, its cut is refined for the total volume unless ``refine=none``, training
on its parts is exact, and the plan picks METIS or KaMinPar by the host's memory."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import EXACT, assert_exact, compose, forbid_edge_lists, single_losses
from omegaconf import OmegaConf

from gnntrain.errors import PlanError
from gnntrain.partition import compute_metrics, partition_graph, partitioner_options
from gnntrain.partition import kaminpar as kp
from gnntrain.partition.choice import partitioner_peak_bytes
from gnntrain.partition.partitioners import random_parts, symmetric_csr
from gnntrain.sizing import format_bytes

kaminpar = pytest.importorskip("kaminpar")
CSBM = ["dataset=csbm", "dataset.num_nodes=3000", "dataset.avg_degree=10"]


def _kcfg(**overrides):
    values = dict(
        name="kaminpar",
        seed=0,
        reorder=None,
        vertex_weights="nnz",
        row_weight=0.0,
        imbalance_eps=0.03,
        preset="default",
        threads=1,
        compress=True,
    )
    return OmegaConf.create({**values, **overrides})


def _sorted_csr(src, dst, n):
    order = np.lexsort((src, dst))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, src[order].astype(np.int32)


def _loaded_adjacency(path, n):
    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP, compress=True)
    return graph, [sorted(u for u, _ in graph.neighbors(v)) for v in range(n)]


def test_parhip_file_of_a_directed_graph_is_its_symmetric_adjacency(tmp_path, monkeypatch):
    monkeypatch.setattr(kp, "ROWS_PER_BLOCK", 7)  # many blocks, rows split across none
    rng = np.random.default_rng(0)
    n = 60
    # duplicates, self-loops and one-way edges: the file holds each undirected edge both ways, once
    src, dst = rng.integers(0, n, 400), rng.integers(0, n, 400)
    indptr, indices = _sorted_csr(src, dst, n)
    weights = kp.vertex_weights_of(indptr, "nnz", 2.0)
    path = tmp_path / "g.parhip"
    written_n, written_m = kp.write_parhip(path, indptr, indices, False, weights)
    expected = symmetric_csr(src, dst, n)
    assert (written_n, written_m) == (n, expected.nnz)
    raw = path.read_bytes()
    version, header_n, header_m = struct.unpack("<QQQ", raw[:24])
    assert (version, header_n, header_m) == (kp.NO_EDGE_WEIGHTS | kp.VID_32BIT, n, expected.nnz)
    offsets = np.frombuffer(raw[24 : 24 + 8 * (n + 1)], dtype="<u8")
    # byte addresses of each node's first neighbour (32-bit IDs)
    assert np.array_equal(offsets, 24 + 8 * (n + 1) + 4 * expected.indptr)
    graph, adjacency = _loaded_adjacency(path, n)
    assert adjacency == [
        list(expected.indices[expected.indptr[v] : expected.indptr[v + 1]]) for v in range(n)
    ]
    assert [graph.node_weight(v) for v in range(n)] == list(np.diff(indptr) + 3)
    # no scratch file is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.parhip"]


def test_parhip_file_of_a_symmetric_csr_is_copied_row_by_row(tmp_path, monkeypatch):
    monkeypatch.setattr(kp, "ROWS_PER_BLOCK", 5)
    rng = np.random.default_rng(1)
    n = 40
    a = symmetric_csr(rng.integers(0, n, 150), rng.integers(0, n, 150), n)
    a.sort_indices()
    kp.write_parhip(tmp_path / "g.parhip", a.indptr, a.indices, True)
    graph, adjacency = _loaded_adjacency(tmp_path / "g.parhip", n)
    assert not graph.is_node_weighted()
    assert adjacency == [list(a.indices[a.indptr[v] : a.indptr[v + 1]]) for v in range(n)]


def test_unsorted_rows_are_refused_with_the_fix(tmp_path):
    indptr = np.array([0, 2, 2], dtype=np.int64)
    with pytest.raises(PlanError, match="not sorted.*gnntrain ingest"):
        kp.write_parhip(tmp_path / "g.parhip", indptr, np.array([1, 0]), False)


def _csbm():
    from gnntrain.data import load_dataset

    data = load_dataset(compose(CSBM))
    return data.src.numpy(), data.dst.numpy(), data.num_nodes


@pytest.mark.parametrize("k", [2, 4])
def test_kaminpar_balances_nnz_and_cuts_like_metis(k, tmp_path):
    src, dst, n = _csbm()
    part, hit = partition_graph(src, dst, n, k, _kcfg(), "csbm", tmp_path)
    assert not hit and part.num_parts == k
    load = np.bincount(part.parts, weights=np.bincount(dst, minlength=n) + 1, minlength=k)
    heaviest = float(np.bincount(dst, minlength=n).max() + 1)
    assert load.max() <= 1.03 * load.sum() / k + heaviest, load
    metis = compute_metrics(
        src, dst, partition_graph(src, dst, n, k, _pcfg_metis(), "csbm")[0].parts, k
    )
    hashed = compute_metrics(src, dst, random_parts(n, k, seed=0), k)
    assert part.metrics.total_volume <= 1.25 * metis.total_volume, (part.metrics, metis)
    assert part.metrics.edge_cut < 0.8 * hashed.edge_cut
    # the scratch folder holds nothing once the parts are out
    assert not any((tmp_path / "scratch").iterdir())


def test_kaminpar_refines_its_cut_for_the_volume_unless_told_not_to(tmp_path):
    src, dst, n = _csbm()
    k = 4
    refined, _ = partition_graph(src, dst, n, k, _kcfg(), "csbm", tmp_path)
    plain, hit = partition_graph(src, dst, n, k, _kcfg(refine="none"), "csbm", tmp_path)
    assert not hit  # its own cache key: a refined partition is never served for a plain one
    assert partitioner_options(_kcfg())["refine"] == "volume"
    assert refined.metrics.total_volume < 0.97 * plain.metrics.total_volume, (refined, plain)
    load = np.bincount(refined.parts, weights=np.bincount(dst, minlength=n) + 1, minlength=k)
    plain_load = np.bincount(plain.parts, weights=np.bincount(dst, minlength=n) + 1, minlength=k)
    assert load.max() <= max(plain_load.max(), 1.03 * load.sum() / k)


def test_an_unknown_refinement_is_refused_naming_the_choices(tmp_path):
    src, dst = np.array([0, 1, 2]), np.array([1, 2, 0])
    with pytest.raises(PlanError, match="partitioner.refine.*use volume .* or none"):
        partition_graph(src, dst, 3, 2, _kcfg(refine="fm"), "g", tmp_path)


def _pcfg_metis():
    return OmegaConf.create(
        dict(
            name="metis",
            seed=0,
            reorder=None,
            vertex_weights="nnz",
            row_weight=0.0,
            objective="cut",
        )
    )


def test_kaminpar_partitions_an_ingested_graph_from_its_csr(tmp_path, cache_dir, monkeypatch):
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
            "partitioner=kaminpar",
            "partitioner.threads=1",
            "hardware.ranks_per_node=4",
        ]
    )
    plan = build_plan(cfg)
    data = load_dataset(plan.config_obj)
    assert data.symmetric  # csbm's folder is symmetrised: its CSR is written as it lies

    forbid_edge_lists(monkeypatch, "partitioner=kaminpar")
    part, _ = plan_mode(plan).partition(data, plan)
    assert part.num_parts == 4 and np.array_equal(np.sort(part.perm), np.arange(data.num_nodes))
    assert np.bincount(part.parts, minlength=4).min() > 0


def test_partition_mode_with_kaminpar_equals_single(train):
    graph = ["dataset=csbm", "dataset.num_nodes=400"]
    summary = train(
        graph
        + EXACT
        + [
            "mode=partition",
            "partitioner=kaminpar",
            "partitioner.threads=1",
            "hardware.ranks_per_node=2",
        ]
    )
    assert summary["partition"]["partitioner"] == "kaminpar"
    assert_exact(summary["losses"], single_losses(train, graph + EXACT))


BIG = ["dataset=csbm", "dataset.num_nodes=2000000", "dataset.avg_degree=20", "dataset.feat_dim=8"]


def test_auto_is_metis_where_it_fits_and_kaminpar_where_it_does_not():
    from gnntrain.plan import build_plan

    roomy = build_plan(
        compose(BIG + ["mode=partition", "hardware.ranks_per_node=2", "hardware.host_memory_gb=64"])
    )
    assert roomy.partitioner == "metis" and roomy.config["partitioner"]["name"] == "metis"
    tight = build_plan(
        compose(BIG + ["mode=partition", "hardware.ranks_per_node=2", "hardware.host_memory_gb=8"])
    )
    assert tight.partitioner == "kaminpar" and tight.config["partitioner"]["name"] == "kaminpar"
    metis = format_bytes(partitioner_peak_bytes("metis", 2_000_000, 40_000_000))
    assert f"METIS would need about {metis}" in tight.partitioner_note
    # a plan that names METIS where it cannot fit is refused, with the partitioner that does
    with pytest.raises(
        PlanError, match=rf"partitioner=metis needs about {metis}.*use partitioner=kaminpar"
    ):
        build_plan(
            compose(
                BIG
                + [
                    "mode=partition",
                    "partitioner=metis",
                    "hardware.ranks_per_node=2",
                    "hardware.host_memory_gb=6",
                ]
            )
        )


@pytest.mark.parametrize("mode", [["mode=partition"], ["mode=supergcn", "mode.aggregation=post"]])
def test_the_plan_reprices_memory_with_the_partitions_halo(tmp_path, mode):
    """Before the partition is known a rank is assumed to receive every remote in-neighbour; on a
    graph with locality the partition's own receive volume is far below, and the figure follows."""
    from gnntrain.launch.shards import load_and_partition
    from gnntrain.plan import build_plan
    from gnntrain.sizing import with_measured_halo

    graph = ["dataset=communities", "dataset.num_nodes=6000", "dataset.leaf_size=40"]
    plan = build_plan(  # a cache of its own: no partitioning of this graph is known yet
        compose(graph + mode + [f"cache_dir={tmp_path}", "hardware.ranks_per_node=4"])
    )
    data, planner, part, _ = load_and_partition(plan, printing=True)
    report = planner.graph_report(data, part, plan)
    repriced = report["memory per rank with this partition's halo bytes"]
    assert repriced < plan.memory_per_rank.total_bytes
    # the repricing is exactly the halo share: as many rows as guessed leave the estimate as it is
    # (a dense graph: every row but its own 1,500 is a halo row)
    same = with_measured_halo(plan.memory_per_rank, 6000, 10**9, 4, 4500, [16], 4)
    assert same == plan.memory_per_rank


def test_a_plan_takes_the_halo_of_a_cached_partition(tmp_path, cache_dir):
    """Once a run (or gnntrain partition) left the plan's partitioning in the cache, the next plan
    sizes a rank's halo from its receive volume instead of the bound, read without loading the
    graph; the printed repricing then changes nothing."""
    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.launch.shards import load_and_partition
    from gnntrain.plan import build_plan
    from gnntrain.plan_types import KNOWN_HALO

    folder = tmp_path / "graph"
    graph = ["dataset=communities", "dataset.num_nodes=6000", "dataset.leaf_size=40"]
    write_generated(compose(graph).dataset, folder)
    overrides = ["dataset=files", f"dataset.path={folder}", f"cache_dir={cache_dir}"]
    overrides += ["mode=partition", "partitioner=metis", "hardware.ranks_per_node=4"]
    before = build_plan(compose(overrides))
    assert KNOWN_HALO not in before.mode_details
    data, planner, part, _ = load_and_partition(before)  # partitions and caches, as a run does
    after = build_plan(compose(overrides))
    assert after.mode_details[KNOWN_HALO] == part.metrics.max_recv_volume
    # training's peak (the halo's; the part's build before it does not hold a halo)
    assert after.memory_per_rank.training_bytes < before.memory_per_rank.training_bytes
    report = planner.graph_report(data, part, before)
    assert (
        after.memory_per_rank.total_bytes
        == report["memory per rank with this partition's halo bytes"]
    )
    again = planner.graph_report(data, part, after)
    assert again["memory per rank with this partition's halo bytes"] == (
        after.memory_per_rank.total_bytes
    )


def test_partition_first_then_the_run_fits_where_the_bound_did_not(tmp_path, cache_dir):
    """Before any partition the plan bounds a rank's halo by every remote in-neighbour and refuses
    a host between the two estimates; `gnntrain partition`'s plan trains nothing and goes ahead;
    once its partitioning is cached, the run's plan takes the real halo and fits."""
    from gnntrain.data.ingest.generated import write_generated
    from gnntrain.launch.shards import load_and_partition
    from gnntrain.plan import build_plan

    folder = tmp_path / "graph"
    graph = ["dataset=communities", "dataset.num_nodes=40000", "dataset.feat_dim=256"]
    write_generated(compose(graph + ["dataset.leaf_size=40"]).dataset, folder)
    overrides = ["dataset=files", f"dataset.path={folder}", f"cache_dir={tmp_path / 'c'}"]
    overrides += ["mode=partition", "partitioner=metis", "hardware.ranks_per_node=4"]
    overrides += ["model.hidden=256", "mode.host_budget=64GiB"]  # no disk tier in the way
    from gnntrain.plan_fit import node_peak_bytes

    def node(plan) -> int:  # what the plan checks against the host: 4 ranks and their launcher
        return node_peak_bytes(plan.memory_per_rank, 4, 4)[0]

    bound = node(build_plan(compose(overrides)))
    scratch = build_plan(compose(overrides + [f"cache_dir={tmp_path / 'scratch'}"]))
    load_and_partition(scratch)  # what the measured halo would be, in another cache
    known = build_plan(
        compose(overrides[:2] + [f"cache_dir={tmp_path / 'scratch'}"] + overrides[3:])
    )
    fitted = node(known)
    assert fitted < bound
    host = [f"hardware.host_memory_gb={(bound + fitted) / 2 / 2**30}"]
    with pytest.raises(PlanError, match="does not fit"):
        build_plan(compose(overrides + host))
    plan = build_plan(compose(overrides + host), training=False)  # gnntrain partition's
    load_and_partition(plan)
    assert node(build_plan(compose(overrides + host))) == fitted
