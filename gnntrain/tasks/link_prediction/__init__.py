"""``task=link_prediction``: a GNN encoder in any exact mode, a decoder over the two endpoints'
final embeddings, binary cross-entropy over the train edges and sampled negatives, and OGB's
ranking metrics (MRR, Hits@K) plus AUC on held-out edges (docs/design.md, "Link prediction")."""

from __future__ import annotations

import torch

from gnntrain.data.graph import GraphData
from gnntrain.models.decoders import build_decoder
from gnntrain.tasks.base import TaskSpec, register_task
from gnntrain.tasks.link_prediction.config import LinkPredictionConfig, check_options
from gnntrain.tasks.link_prediction.plan import plan
from gnntrain.tasks.link_prediction.rank import LinkPredictionRank, link_metrics
from gnntrain.tasks.link_prediction.split import (
    LinkShard,
    LinkSplit,
    given_split,
    split_edges,
    split_hash,
)


def embedding_width(options, hidden: int) -> int:
    return int(options.embedding_dim) or int(hidden)


def prepare_data(options, data: GraphData, seed: int) -> GraphData:
    """The graph with its edges split: the message-passing graph of the train edges, and the
    split (``task_data``) from which each rank's edges to score are cut. A graph ingested with its
    own held-out edges keeps them (``task.edge_split`` does not apply); otherwise the split is
    drawn."""
    check_options(options)
    drawn = (int(options.split_seed), int(options.eval_negatives), options.negatives == "degree")
    if data.held_out_edges:  # given at ingest (--val-edges/--test-edges): the graph trains whole
        split, src, dst = given_split(
            data.src, data.dst, data.num_nodes, data.held_out_edges, *drawn
        )
    else:
        split, src, dst = split_edges(
            data.src, data.dst, data.num_nodes, options.edge_split, *drawn
        )
    weight = None
    if data.edge_weight is not None:  # each train edge keeps its weight
        n = data.num_nodes
        key = data.src.to(torch.int64) * n + data.dst.to(torch.int64)
        order = torch.argsort(key)
        found = torch.searchsorted(key[order], src * n + dst)
        weight = data.edge_weight[order[found]]
    return GraphData(
        name=data.name,
        num_nodes=data.num_nodes,
        src=src,
        dst=dst,
        features=data.features,
        labels=data.labels,
        train_mask=data.train_mask,
        val_mask=data.val_mask,
        test_mask=data.test_mask,
        num_classes=data.num_classes,
        content_hash=split_hash(data.content_hash, options),
        origin=data.origin,
        task_data=split,
        edge_weight=weight,
    )


LINK_PREDICTION = register_task(
    TaskSpec(
        name="link_prediction",
        options=LinkPredictionConfig,
        output_width=lambda options, classes, hidden, targets: embedding_width(options, hidden),
        prepare_data=prepare_data,
        rank_task=lambda options, payload, rows: LinkPredictionRank(options, payload, rows),
        metrics=link_metrics,
        head=lambda options, width, seed, dtype: build_decoder(
            str(options.decoder), width, seed, dtype
        ),
        plan=plan,
        headline="auc",
        description="a decoder over the endpoints' embeddings; BCE over edges and negatives",
    )
)

__all__ = ["LINK_PREDICTION", "LinkShard", "LinkSplit", "embedding_width"]
