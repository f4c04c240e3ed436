"""Partitioners, their volume metrics against brute force, the relabelling,
HongTu's chunks, and the partition cache (hit, miss, corruption)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import compose
from omegaconf import OmegaConf

from gnntrain.data import load_dataset
from gnntrain.partition import compute_metrics, partition_graph, split_chunks
from gnntrain.partition.cache import PartitionCache


def _pcfg(name="metis", **kw):
    base = {
        "name": name,
        "seed": 0,
        "vertex_weights": "nnz",
        "reorder": None,
        "imbalance_eps": 0.05,
        "max_volume_growth": 0.05,
        "refine_rounds": 50,
        "num_parts": 0,
        "row_weight": 0.0,
        "preset": "default",
        "threads": 1,
        "compress": True,
    }
    base.update(kw)
    return OmegaConf.create(base)


def _random_graph(n, e, seed):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    keep = src != dst
    return src[keep], dst[keep]


def _brute_force(src, dst, parts, k):
    recv = [set() for _ in range(k)]  # (u) rows part i needs
    send = [set() for _ in range(k)]  # (u, i) pairs part j sends
    cut = 0
    for u, v in zip(src.tolist(), dst.tolist()):
        if parts[u] != parts[v]:
            cut += 1
            recv[parts[v]].add(u)
            send[parts[u]].add((u, parts[v]))
    return cut, [len(r) for r in recv], [len(s) for s in send]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [2, 3, 5])
def test_metrics_equal_brute_force(seed, k):
    src, dst = _random_graph(40, 150, seed)
    parts = np.random.default_rng(seed + 100).integers(0, k, 40)
    parts[:k] = np.arange(k)
    m = compute_metrics(src, dst, parts, k)
    cut, recv, send = _brute_force(src, dst, parts, k)
    assert m.edge_cut == cut and list(m.recv_volume) == recv and list(m.send_volume) == send
    assert m.total_volume == sum(recv) == sum(send)
    assert m.max_send_volume == max(send) and m.max_recv_volume == max(recv)
    avg = sum(send) / k
    assert m.send_imbalance == pytest.approx((max(send) - avg) / avg)


PARTITIONERS_UNDER_TEST = ["metis", "kaminpar", "random", "range", "volume"]


@pytest.mark.parametrize("name", PARTITIONERS_UNDER_TEST)
def test_partitioners_relabel_into_contiguous_parts(name, tmp_path):
    src, dst = _random_graph(200, 1200, 1)
    # another partitioner's entry for the same graph and k is already cached: it must not serve this
    # one
    other = next(n for n in PARTITIONERS_UNDER_TEST if n != name)
    _, other_hit = partition_graph(src, dst, 200, 4, _pcfg(other), "g", tmp_path)
    part, hit = partition_graph(src, dst, 200, 4, _pcfg(name), "g", tmp_path)
    assert (other_hit, hit) == (False, False) and part.num_parts == 4
    # the same call again is served from the cache, unchanged
    again, hit_again = partition_graph(src, dst, 200, 4, _pcfg(name), "g", tmp_path)
    assert hit_again
    for field in ("parts", "perm", "inverse", "offsets"):
        assert np.array_equal(getattr(again, field), getattr(part, field)), field
    # the permutation round-trips and makes every part a contiguous block of new ids
    assert np.array_equal(part.perm[part.inverse], np.arange(200))
    assert np.array_equal(part.inverse[part.perm], np.arange(200))
    new_parts = part.parts[part.perm]
    assert np.all(np.diff(new_parts) >= 0)
    assert np.array_equal(np.searchsorted(new_parts, np.arange(5)), part.offsets)


def test_rcm_reorders_within_parts_and_lowers_bandwidth():
    src, dst = _random_graph(300, 900, 2)
    plain, _ = partition_graph(src, dst, 300, 1, _pcfg("range"), "g")
    rcm, _ = partition_graph(src, dst, 300, 1, _pcfg("range", reorder="rcm"), "g")
    assert rcm.bandwidth is not None
    inv = plain.inverse
    assert rcm.bandwidth <= int(np.abs(inv[src] - inv[dst]).max())


def test_volume_lowers_max_send_on_power_law_graph():
    data = load_dataset(
        compose(
            [
                "dataset=rmat",
                "dataset.num_nodes=20000",
                "dataset.num_edges=160000",
                "dataset.feat_dim=4",
            ]
        )
    )
    src, dst = data.src.numpy(), data.dst.numpy()
    metis, _ = partition_graph(src, dst, data.num_nodes, 8, _pcfg("metis"), data.content_hash)
    volume, _ = partition_graph(src, dst, data.num_nodes, 8, _pcfg("volume"), data.content_hash)
    assert volume.metrics.max_send_volume < metis.metrics.max_send_volume
    assert volume.metrics.total_volume <= metis.metrics.total_volume * 1.05
    # nnz balance stays within max(eps, METIS's own imbalance)
    assert volume.metrics.nnz_balance - 1 <= max(0.05, metis.metrics.nnz_balance - 1) + 1e-9


def test_chunks_are_contiguous_and_edge_balanced():
    src, dst = _random_graph(400, 4000, 3)
    part, _ = partition_graph(src, dst, 400, 2, _pcfg("metis"), "g")
    dst_new = part.inverse[dst]
    bounds = split_chunks(part.offsets, dst_new, 4)
    assert bounds.size == 2 * 4 + 1 and np.all(np.diff(bounds) > 0)
    assert set(part.offsets.tolist()) <= set(bounds.tolist())
    work = np.bincount(dst_new, minlength=400) + 1
    per_chunk = np.add.reduceat(work, bounds[:-1])
    assert per_chunk.max() / per_chunk.mean() < 1.3


def test_cache_hit_miss_and_corruption(tmp_path):
    src, dst = _random_graph(100, 500, 4)
    cfg = _pcfg("metis")
    first, hit1 = partition_graph(src, dst, 100, 2, cfg, "h1", tmp_path)
    second, hit2 = partition_graph(src, dst, 100, 2, cfg, "h1", tmp_path)
    assert (hit1, hit2) == (False, True) and np.array_equal(first.perm, second.perm)
    other, hit3 = partition_graph(src, dst, 100, 3, cfg, "h1", tmp_path)  # another k: another key
    assert not hit3 and other.num_parts == 3
    entries = sorted(PartitionCache(tmp_path).root.glob("*.npz"))
    assert len(entries) == 2 and not list(PartitionCache(tmp_path).root.glob("*.tmp"))
    # truncate one entry: detected, warned about, rebuilt
    target = PartitionCache(tmp_path).path(
        __import__("gnntrain.partition.cache", fromlist=["x"]).cache_key(
            "h1", {"name": "metis", "seed": 0, "vertex_weights": "nnz", "reorder": None}, 2
        )
    )
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="unreadable|checksum"):
        rebuilt, hit4 = partition_graph(src, dst, 100, 2, cfg, "h1", tmp_path)
    assert not hit4 and np.array_equal(rebuilt.perm, first.perm)
    # a foreign file under the right name fails the key/checksum test
    other_key = sorted(PartitionCache(tmp_path).root.glob("*.npz"))
    foreign = [p for p in other_key if p != target][0]
    target.write_bytes(foreign.read_bytes())
    with pytest.warns(UserWarning, match="checksum|another"):
        _, hit5 = partition_graph(src, dst, 100, 2, cfg, "h1", tmp_path)
    assert not hit5
    # and after the rebuild it is a hit again
    _, hit6 = partition_graph(src, dst, 100, 2, cfg, "h1", tmp_path)
    assert hit6


def test_cache_never_unpickles(tmp_path):
    """Entries are read with allow_pickle=False: an object array is refused, not executed."""
    cache = PartitionCache(tmp_path)
    np.savez(
        cache.path("k"),
        parts=np.array([object()], dtype=object),
        perm=np.zeros(1),
        inverse=np.zeros(1),
        offsets=np.zeros(2),
        meta=np.zeros(1, dtype=np.uint8),
    )
    with pytest.warns(UserWarning):
        assert cache.load("k") is None


def test_part_counts_stay_equal_to_dense_counts_through_moves():
    """The volume partitioner's sparse per-(node, part) counts against a dense matrix recomputed
    from scratch after every move (including pairs that a move creates)."""
    import scipy.sparse as sp

    from gnntrain.partition.partitioners import PartCounts, _apply_move, _move_delta

    n, k = 400, 6
    src, dst = _random_graph(n, 2400, 7)
    parts = np.random.default_rng(0).integers(0, k, n)
    counts = PartCounts(src, dst, parts, k)
    in_adj = sp.csr_matrix((np.ones(src.size, dtype=np.int32), (dst, src)), shape=(n, n))
    in_adj.sum_duplicates()
    d = counts.remote_parts(parts, n)
    send = np.bincount(parts, weights=d, minlength=k).astype(np.int64)
    rng = np.random.default_rng(1)
    for _ in range(60):
        u = int(rng.integers(n))
        s, t = int(parts[u]), int((parts[u] + rng.integers(1, k)) % k)
        delta = _move_delta(u, s, t, parts, counts, in_adj, k)
        _apply_move(u, s, t, parts, counts, d, send, in_adj)
        dense = np.zeros((n, k), dtype=np.int64)
        np.add.at(dense, (src, parts[dst]), 1)
        assert all((counts.row(v) == dense[v]).all() for v in range(n))
        assert (counts.get(np.arange(n), t) == dense[:, t]).all()
        remote = (dense > 0) & (np.arange(k)[None, :] != parts[:, None])
        assert (d == remote.sum(1)).all() and (
            send == np.bincount(parts, weights=d, minlength=k)
        ).all()
        assert (send - delta).sum() >= 0
    assert counts.new_keys.size > 0  # moves created pairs that were absent at the start


def test_volume_partitioner_memory_grows_with_edges_not_parts():
    """k = 512 parts of a 30k-node graph: a dense n x k count matrix would be 117 MiB; the sparse
    counts keep the refinement's allocations well below that (tracemalloc sees numpy's buffers)."""
    import tracemalloc

    from gnntrain.partition.partitioners import refine_max_send

    n, k = 30_000, 512
    src, dst = _random_graph(n, 120_000, 3)
    parts = np.arange(n) % k
    tracemalloc.start()
    refine_max_send(src, dst, n, parts, k, 0.05, 0.05, max_moves=20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < n * k * 8 / 4, f"peak {peak / 2**20:.1f} MiB"


def test_metis_volume_objective():
    """partitioner.objective=vol asks METIS for minimum total communication volume (k-way); it is
    part of the cache key only when it is not the default, and an unknown objective is refused."""
    from gnntrain.errors import PlanError
    from gnntrain.partition import partitioner_options

    data = load_dataset(
        compose(
            [
                "dataset=rmat",
                "dataset.num_nodes=20000",
                "dataset.num_edges=160000",
                "dataset.feat_dim=4",
            ]
        )
    )
    src, dst = data.src.numpy(), data.dst.numpy()
    cut, _ = partition_graph(
        src, dst, data.num_nodes, 8, _pcfg("metis", objective="cut"), data.content_hash
    )
    vol, _ = partition_graph(
        src, dst, data.num_nodes, 8, _pcfg("metis", objective="vol"), data.content_hash
    )
    assert (cut.parts != vol.parts).any()
    assert vol.metrics.total_volume < cut.metrics.total_volume
    assert "objective" not in partitioner_options(_pcfg("metis", objective="cut"))
    assert partitioner_options(_pcfg("volume", objective="vol"))["objective"] == "vol"
    with pytest.raises(PlanError, match="objective"):
        partition_graph(
            src, dst, data.num_nodes, 4, _pcfg("metis", objective="edges"), data.content_hash
        )


def test_row_weight_balances_dense_work_on_a_graph_with_many_bare_rows(tmp_path):
    """nnz weights alone put the rows without in-edges (half of a sparse R-MAT graph) into one part,
    whose dense update then sets the pace; a row weight of the update's nnz-equivalents spreads
    them. The cache key changes only when row_weight is set."""
    from gnntrain.data.generators.rmat import rmat_edges
    from gnntrain.errors import PlanError
    from gnntrain.partition import partitioner_options
    from gnntrain.partition.partitioners import metis_parts

    n = 20_000
    s, t = rmat_edges(n, 2 * n, (0.57, 0.19, 0.19, 0.05), np.random.default_rng(0))
    keep = s != t
    src, dst = np.concatenate([s[keep], t[keep]]), np.concatenate([t[keep], s[keep]])
    degree = np.bincount(dst, minlength=n)
    assert (degree == 0).mean() > 0.3

    def balance(parts):  # max/mean per part: (rows, nnz, rows x 23 + nnz)
        rows, nnz = (
            np.bincount(parts, minlength=4),
            np.bincount(parts, weights=degree + 1, minlength=4),
        )
        return [float(x.max() / x.mean()) for x in (rows, nnz, rows * 23 + nnz)]

    plain, weighted = (balance(metis_parts(src, dst, n, 4, 0, "nnz", "cut", rw)) for rw in (0, 23))
    assert plain[1] < 1.1 and plain[0] > 1.5, plain  # SpMM balanced, rows not
    assert weighted[2] < 1.1 and weighted[0] < 1.3, weighted  # the whole work balanced
    assert "row_weight" not in partitioner_options(_pcfg("metis"))
    assert partitioner_options(_pcfg("metis", row_weight=23))["row_weight"] == 23.0
    with pytest.raises(PlanError, match="row_weight"):
        metis_parts(src, dst, n, 4, 0, "nnz", "cut", -1)
