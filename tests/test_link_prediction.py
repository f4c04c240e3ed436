"""task=link_prediction: the edge split, the negatives, exactness in every mode that hosts it, the
endpoint exchange's bytes against their closed form, and the results under the user's IDs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import CORA, EXACT, assert_exact, compose, requires_shared

from gnntrain.errors import PlanError
from gnntrain.modes import MODE_REGISTRY
from gnntrain.tasks.link_prediction.negatives import draw_negatives
from gnntrain.tasks.link_prediction.split import is_symmetric, split_edges

LP = ["task=link_prediction", "model.hidden=8"]
SMALL = ["dataset=csbm", "dataset.num_nodes=300"]


def _exact_variant(mode: str):
    """The mode's first option set (its own, then mode=auto's variants) that plans as exact."""
    from gnntrain.plan import build_plan, plan_mode

    spec = MODE_REGISTRY[mode]
    for variant in ({},) + tuple(spec.capabilities.auto_variants):
        extra = [f"mode.{k}={v}" for k, v in variant.items()]
        plan = build_plan(compose(SMALL + EXACT + LP + [f"mode={mode}", *extra]))
        if plan_mode(plan).is_exact():
            return extra
    return None


HOSTS = sorted(n for n, s in MODE_REGISTRY.items() if not s.capabilities.tasks and n != "single")


# ---------------------------------------------------------------------------- the split
def _ring(n: int):
    src = torch.arange(n)
    dst = (src + 1) % n
    src, dst = torch.cat([src, dst, src]), torch.cat([dst, src, (src + 5) % n])
    keep = src != dst
    return src[keep], dst[keep]


def test_the_split_keeps_an_undirected_edge_together_and_out_of_the_message_passing_graph():
    src, dst = _ring(60)  # ring edges both ways, plus one-way chords: not symmetric
    sym_src, sym_dst = torch.cat([src, dst]), torch.cat([dst, src])
    key = torch.unique(sym_src * 60 + sym_dst)
    sym_src, sym_dst = key // 60, key % 60
    assert is_symmetric(sym_src, sym_dst, 60) and not is_symmetric(src, dst, 60)
    split, mp_src, mp_dst = split_edges(sym_src, sym_dst, 60, [0.7, 0.15, 0.15], 3, 4, False)
    n_train, n_val, n_test = split.counts
    assert n_train + n_val + n_test == sym_src.numel() // 2  # an undirected edge is one item
    held = set()
    for name in ("val", "test"):
        a, b, _ = getattr(split, name)
        assert split.negatives(name).shape == (a.numel(), 4)
        held |= {(int(u), int(v)) for u, v in zip(a, b)}
    graph = {(int(u), int(v)) for u, v in zip(mp_src, mp_dst)}
    assert len(graph) == 2 * n_train and is_symmetric(mp_src, mp_dst, 60)
    assert not any((u, v) in graph or (v, u) in graph for u, v in held)  # nothing leaks
    # the same edge set in another order: the same split
    order = torch.randperm(sym_src.numel())
    again, _, _ = split_edges(sym_src[order], sym_dst[order], 60, [0.7, 0.15, 0.15], 3, 4, False)
    assert torch.equal(again.val[0], split.val[0]) and torch.equal(again.test[1], split.test[1])


def test_a_split_without_train_edges_is_one_line():
    src, dst = torch.tensor([0, 1, 1, 2]), torch.tensor([1, 0, 2, 1])
    with pytest.raises(
        PlanError, match=r"task.edge_split: .* leaves no train edges of the graph's 2"
    ):
        split_edges(src, dst, 3, [0.2, 0.4, 0.4], 0, 1, False)
    with pytest.raises(PlanError, match=r"^task.edge_split: .*leaves no train edges"):
        from gnntrain.plan import build_plan

        build_plan(compose(SMALL + LP + ["mode=single", "task.edge_split=[0,0.5,0.5]"]))


def test_negatives_depend_on_the_edge_not_on_who_draws_them():
    index = torch.arange(20000)
    whole = draw_negatives(index, 3, 500, seed=7, epoch=2)
    part = draw_negatives(index[123:456], 3, 500, seed=7, epoch=2)
    assert torch.equal(whole[123:456], part) and whole.shape == (20000, 3)
    assert not torch.equal(whole, draw_negatives(index, 3, 500, seed=7, epoch=3))
    counts = torch.bincount(whole.reshape(-1), minlength=500).double()
    # about uniform: 120 draws a node, Poisson's relative spread 0.09
    assert counts.min() > 60 and counts.std() / counts.mean() < 0.15
    degree = torch.zeros(500, dtype=torch.float64)
    degree[::2] = torch.arange(250, dtype=torch.float64)  # odd nodes and node 0: no train edges
    biased = draw_negatives(index, 3, 500, 7, 2, torch.cumsum(degree, 0))
    assert bool((degree[biased] > 0).all())
    assert biased.double().mean() > whole.double().mean()  # heavier nodes drawn more


# ------------------------------------------------------------------------- exactness
def _reference(train, graph):
    from conftest import single_losses

    return single_losses(train, graph + EXACT + LP)


@pytest.mark.parametrize("mode", HOSTS)
def test_every_mode_that_hosts_it_equals_single(train, mode):
    """One exact option set of every registered mode that hosts link prediction, at p=2; the same
    negatives, so the same losses and the same metrics."""
    extra = _exact_variant(mode)
    assert extra is not None, f"{mode} has no exact option set"
    ref = train(SMALL + EXACT + LP + ["mode=single"])
    s = train(SMALL + EXACT + LP + [f"mode={mode}", "hardware.ranks_per_node=2", *extra])
    assert s["status"] == "completed", s.get("error")
    assert_exact(s["losses"], ref["losses"])
    for split in ("val", "test"):
        for name, value in ref["metrics"][split].items():
            assert s["metrics"][split][name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
    assert {"endpoint_ids", "endpoint_fwd", "endpoint_bwd"} <= set(s["comm_bytes"]["by_kind"])


@pytest.mark.parametrize(
    "layout",
    [
        ["mode=partition", "mode.replication=2", "hardware.ranks_per_node=4"],
        ["mode=hongtu", "mode.direct=true", "hardware.ranks_per_node=1"],
        # tiny batches: many training batches a round, many evaluation chunks
        ["mode=partition", "hardware.ranks_per_node=3", "task.edge_batch=7"],
    ],
)
def test_replicated_rows_the_direct_path_and_small_batches_equal_single(train, layout):
    ref = train(SMALL + EXACT + LP + ["mode=single"])
    s = train(SMALL + EXACT + LP + layout)
    assert_exact(s["losses"], ref["losses"])
    for name, value in ref["metrics"]["test"].items():
        assert s["metrics"]["test"][name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


@pytest.mark.slow
@pytest.mark.parametrize("graph", ["csbm", pytest.param("cora", marks=requires_shared)])
@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("mode", HOSTS)
@pytest.mark.parametrize("decoder", ["dot", "mlp", "distmult"])
def test_the_whole_matrix_equals_single(train, graph, p, mode, decoder):
    """Every hosting mode, both graphs, p = 2 and 3, each decoder (make test-tasks)."""
    base = (SMALL if graph == "csbm" else CORA) + EXACT + LP + [f"task.decoder={decoder}"]
    ref = train(base + ["mode=single"])
    s = train(base + [f"mode={mode}", f"hardware.ranks_per_node={p}", *_exact_variant(mode)])
    assert_exact(s["losses"], ref["losses"])


# ----------------------------------------------------------------------------- bytes
def test_endpoint_bytes_equal_their_closed_form_from_the_split_and_the_partition(
    tmp_path, cache_dir
):
    """Per epoch, R_r = the distinct endpoints of rank r's train edges and this epoch's negatives
    that other ranks count: Σ_r (8 R_r + 8 (p - 1)²) id bytes, Σ_r R_r d b row bytes each way."""
    from gnntrain.launch import run_training
    from gnntrain.launch.shards import prepare_in_memory
    from gnntrain.plan import build_plan

    p, width, k = 3, 8, 2
    cfg = compose(
        SMALL
        + EXACT
        + LP
        + [f"cache_dir={cache_dir}", "mode=partition", f"hardware.ranks_per_node={p}"]
        + [f"task.num_negatives={k}", "train.progress=false"]
    )
    plan = build_plan(cfg)
    assert {"endpoint_ids", "endpoint_fwd", "endpoint_bwd"} <= set(plan.comm_per_epoch["by_kind"])
    shards = prepare_in_memory(plan).shards
    owner = torch.full((shards[0].num_global_nodes,), -1)
    for shard in shards:
        if shard.counted:
            owner[shard.global_ids] = shard.rank
    summary = run_training(plan, tmp_path / "run")
    assert summary["status"] == "completed"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    for record in records:
        remote = 0
        for shard in shards:
            t = shard.task
            negatives = draw_negatives(t.train_index, k, owner.numel(), 3, record["epoch"])
            ends = torch.unique(torch.cat([t.train_a, t.train_b, negatives.reshape(-1)]))
            remote += int((owner[ends] != shard.rank).sum())
        kinds = record["comm_by_kind"]
        # the counts: each of the p - 1 fetching rounds, every rank tells the others (8 bytes each)
        assert kinds["endpoint_ids"] == 8 * remote + 8 * p * (p - 1) ** 2
        assert kinds["endpoint_fwd"] == kinds["endpoint_bwd"] == remote * width * 8


# ------------------------------------------------------------------------ bad input
def test_a_mode_that_cannot_host_it_says_so_in_one_line():
    from gnntrain.plan import build_plan

    with pytest.raises(PlanError, match=r"^task: mode 'hyscale' cannot host task 'link_pred"):
        build_plan(compose(SMALL + LP + ["mode=hyscale"]))
    with pytest.raises(PlanError, match=r"^mode.label_propagation: .*no classes"):
        build_plan(compose(SMALL + LP + ["mode=supergcn", "mode.label_propagation=0.2"]))
    with pytest.raises(PlanError, match=r"^task.decoder: unknown decoder 'bilinear'"):
        build_plan(compose(SMALL + LP + ["mode=single", "task.decoder=bilinear"]))


# ------------------------------------------------------------------------- results out
def test_scores_and_top_k_under_the_users_ids_and_a_plain_session(tmp_path, cache_dir):
    """gnntrain predict --what scores|topk from a partitioned run; load_model's score agrees; top-k
    leaves out the source and its train edges; an unknown ID is one line naming it."""
    import pyarrow.parquet as pq

    from gnntrain.api import load_model
    from gnntrain.errors import GnnTrainError
    from gnntrain.launch import run_training
    from gnntrain.launch.predict_links import predict_links, train_edges
    from gnntrain.plan import build_plan

    overrides = SMALL + LP + [f"cache_dir={cache_dir}", "train.epochs=15", "train.progress=false"]
    cfg = compose(overrides + ["mode=partition", "hardware.ranks_per_node=2", "task.decoder=mlp"])
    run, plan = tmp_path / "run", build_plan(cfg)
    assert run_training(plan, run)["status"] == "completed"
    plan.write_yaml(run / "plan.yaml")  # as gnntrain run writes it
    (tmp_path / "pairs.csv").write_text("src,dst\n0,5\n7,3\n")
    (tmp_path / "sources.csv").write_text("id\n4\n9\n")
    keep = [f"cache_dir={cache_dir}"]
    pairs, sources = tmp_path / "pairs.csv", tmp_path / "sources.csv"
    predict_links(run, "scores", tmp_path / "s.parquet", "parquet", pairs, overrides=keep)
    predict_links(run, "topk", tmp_path / "t.parquet", "parquet", None, sources, 4, overrides=keep)
    scores = pq.read_table(tmp_path / "s.parquet").to_pydict()
    # the same scores in a plain session: the exported model over the train graph, its decoder
    from gnntrain.data import load_dataset

    src, dst = train_edges(cfg)
    model = load_model(run)
    h = model(load_dataset(cfg).features, torch.stack([src, dst]))
    plain = model.score(h, [0, 7], [5, 3]).detach().numpy()
    assert np.allclose(plain, scores["logit"], rtol=1e-4, atol=1e-5)
    top = pq.read_table(tmp_path / "t.parquet").to_pydict()
    assert scores["src"] == [0, 7] and len(scores["logit"]) == 2
    assert np.allclose(scores["probability"], 1 / (1 + np.exp(-np.array(scores["logit"]))))
    known = set(zip(src.tolist(), dst.tolist()))
    assert len(top["candidate"]) == 8 and top["rank"][:4] == [1, 2, 3, 4]
    assert all(c != s and (s, c) not in known for s, c in zip(top["source"], top["candidate"]))
    assert top["logit"][:4] == sorted(top["logit"][:4], reverse=True)
    (tmp_path / "bad.csv").write_text("src,dst\n1,2\n3,99999\n")
    with pytest.raises(GnnTrainError, match=r"--pairs .*bad.csv row 2: node ID 99999 is not"):
        predict_links(run, "scores", tmp_path / "b.parquet", "parquet", tmp_path / "bad.csv")


def test_a_graph_of_edges_without_labels_ingests_and_trains_link_prediction(tmp_path, train):
    """A `follows` export: edges and a node table without labels or targets ingests (0 classes),
    trains task=link_prediction, and node classification on it is one line."""
    from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest

    n = 60
    lines = ["src,dst"] + [f"u{i},u{(i + d) % n}" for i in range(n) for d in (1, 2, 5)]
    (tmp_path / "follows.csv").write_text("\n".join(lines) + "\n")
    rows = ["id,age,score"] + [f"u{i},{i % 9},{(i * 7) % 11}" for i in range(n)]
    (tmp_path / "users.csv").write_text("\n".join(rows) + "\n")
    nodes = NodeOptions(features=tmp_path / "users.csv")
    summary = ingest(
        IngestOptions(out=tmp_path / "g", edges=[tmp_path / "follows.csv"], nodes=nodes)
    )
    assert summary["num_classes"] == 0
    graph = ["dataset=files", f"dataset.path={tmp_path / 'g'}"]
    s = train(graph + LP + ["mode=partition", "hardware.ranks_per_node=2", "train.epochs=2"])
    assert s["status"] == "completed" and "auc" in s["metrics"]["test"]
    with pytest.raises(PlanError, match=r"^task: .* holds no class labels.*Fix: train task=link"):
        from gnntrain.plan import build_plan

        build_plan(compose(graph + ["mode=single"]))


def test_a_pyg_link_split_and_ingests_held_out_edges_are_kept_as_given(tmp_path, cache_dir):
    """RandomLinkSplit's (train, val, test) through the API, and --val-edges/--test-edges through
    ingest: the held-out edges are stored beside the graph (in its digest), kept out of it, and
    scored as given (task.edge_split does not apply)."""
    import torch_geometric.transforms as T
    from torch_geometric.data import Data

    import gnntrain.api as gt
    from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest
    from gnntrain.data.ondisk import load_graph_dir, open_graph_dir

    n = 80
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (400,), generator=gen)
    dst = torch.randint(0, n, (400,), generator=gen)
    keep = src != dst
    data = Data(x=torch.randn(n, 6, generator=gen), edge_index=torch.stack([src[keep], dst[keep]]))
    data = T.ToUndirected()(data)
    split = T.RandomLinkSplit(num_val=0.1, num_test=0.2, is_undirected=True)(data)
    result = gt.train(
        split,
        [f"cache_dir={cache_dir}", "mode=partition", "hardware.ranks_per_node=2", "train.epochs=2"],
        run_dir=tmp_path / "run",
        task="link_prediction",
    )
    assert result.status == "completed"
    folder = open_graph_dir(result.plan.config["dataset"]["path"])
    val_pos = split[1].edge_label_index[:, split[1].edge_label > 0]
    assert folder.meta["held_out_edges"]["val"] == val_pos.shape[1]
    graph = load_graph_dir(folder.path)
    kept = {(int(u), int(v)) for u, v in zip(graph.src, graph.dst)}
    val = graph.held_out_edges["val"]
    assert {(int(u), int(v)) for u, v in zip(*val)} == {
        (min(int(u), int(v)), max(int(u), int(v))) for u, v in val_pos.t()
    }
    assert not any((int(u), int(v)) in kept or (int(v), int(u)) in kept for u, v in zip(*val))
    # the CLI's way: the same edges as files, read as --edges is; one of them also in the graph
    edges = ["src,dst"] + [f"{u},{v}" for u, v in data.edge_index.t().tolist()]
    (tmp_path / "e.csv").write_text("\n".join(edges) + "\n")
    (tmp_path / "v.csv").write_text(
        "src,dst\n" + "\n".join(f"{u},{v}" for u, v in val_pos.t().tolist()) + "\n"
    )
    np.save(tmp_path / "x.npy", data.x.numpy())
    nodes = NodeOptions(features=tmp_path / "x.npy")
    opts = IngestOptions(
        out=tmp_path / "g",
        edges=[tmp_path / "e.csv"],
        nodes=nodes,
        held_out={"val": tmp_path / "v.csv"},
    )
    summary = ingest(opts)
    assert summary["held_out_edges"] == {"val": val_pos.shape[1]}
    assert summary["num_edges"] == data.edge_index.shape[1] - 2 * val_pos.shape[1]
    plain = ingest(IngestOptions(out=tmp_path / "h", edges=[tmp_path / "e.csv"], nodes=nodes))
    assert plain["digest"] != summary["digest"]


def test_auc_and_ranks_follow_scikit_learn_and_ogb():
    """AUC equals scikit-learn's roc_auc_score (ties included); a positive's rank among its
    negatives is OGB's: 1 + the mean of the strictly-higher and higher-or-equal counts."""
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    from gnntrain.tasks.link_prediction.rank import reciprocal_ranks, roc_auc

    gen = torch.Generator().manual_seed(0)
    positive = torch.randint(0, 15, (300,), generator=gen).double()  # many ties
    negative = torch.randint(0, 15, (500,), generator=gen).double()
    labels = np.r_[np.ones(300), np.zeros(500)]
    want = sklearn_metrics.roc_auc_score(labels, np.r_[positive.numpy(), negative.numpy()])
    assert roc_auc(positive, negative) == pytest.approx(want, abs=1e-12)
    ranks = reciprocal_ranks(
        torch.tensor([2.0, 0.0]), torch.tensor([[3.0, 2.0, 1.0], [1.0, 1.0, 1.0]])
    )
    assert ranks.tolist() == [2.5, 4.0]  # 1 higher + 1 tie -> 1 + (1 + 2) / 2; all 3 higher -> 4


def test_ingest_edge_split_holds_out_what_task_edge_split_holds_out(tmp_path, cora):
    """gnntrain ingest --edge-split F --seed S stores the validation and test edges that
    task.edge_split=F task.split_seed=S draws at load from the whole graph, keeps them out of the
    graph, and refuses to be given both ways."""
    from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest
    from gnntrain.data.ondisk import load_graph_dir
    from gnntrain.errors import DatasetError

    edges = ["src,dst"] + [f"{u},{v}" for u, v in zip(cora.src.tolist(), cora.dst.tolist())]
    (tmp_path / "e.csv").write_text("\n".join(edges) + "\n")
    np.save(tmp_path / "x.npy", cora.features.numpy())
    nodes = NodeOptions(features=tmp_path / "x.npy")
    fractions = (0.8, 0.1, 0.1)
    opts = IngestOptions(
        out=tmp_path / "g", edges=[tmp_path / "e.csv"], nodes=nodes, edge_split=fractions, seed=4
    )
    summary = ingest(opts)
    drawn, _, _ = split_edges(cora.src, cora.dst, cora.num_nodes, fractions, 4, 1, False)
    graph = load_graph_dir(tmp_path / "g")
    for name, (a, b, _) in (("val", drawn.val), ("test", drawn.test)):
        given = graph.held_out_edges[name]
        assert torch.equal(given[0], a) and torch.equal(given[1], b)
        assert summary["held_out_edges"][name] == a.numel()
    assert summary["num_edges"] == cora.num_edges - 2 * (
        drawn.val[0].numel() + drawn.test[0].numel()
    )
    both = IngestOptions(
        out=tmp_path / "h",
        edges=[tmp_path / "e.csv"],
        nodes=nodes,
        edge_split=fractions,
        held_out={"val": tmp_path / "e.csv"},
    )
    with pytest.raises(DatasetError, match=r"give held-out edges once"):
        ingest(both)
