"""``task=link_prediction``'s options (``configs/task/link_prediction.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from gnntrain.errors import PlanError
from gnntrain.tasks.base import TaskConfig

DECODERS = ("dot", "mlp", "distmult")
NEGATIVES = ("uniform", "degree")


@dataclass
class LinkPredictionConfig(TaskConfig):
    name: str = "link_prediction"
    decoder: str = "dot"  # dot | mlp | distmult, over the two endpoints' final embeddings
    embedding_dim: int = 0  # the GNN's output width; 0 = model.hidden
    negatives: str = "uniform"  # uniform | degree (∝ a node's degree in the train graph)
    num_negatives: int = 1  # negatives per positive train edge, drawn anew each epoch
    edge_batch: int = 16384  # positive edges scored per batch (with their negatives)
    # train, validation, test fractions of the graph's edges (an undirected edge's two directions
    # go to the same side); the message-passing graph holds the train edges only
    edge_split: List[float] = field(default_factory=lambda: [0.85, 0.05, 0.10])
    split_seed: int = 0
    eval_negatives: int = 100  # fixed negatives per validation/test edge (OGB's MRR protocol)
    hits_at: List[int] = field(default_factory=lambda: [1, 3, 10])


def check_options(o: LinkPredictionConfig) -> None:
    """One PlanError per impossible option."""
    if o.decoder not in DECODERS:
        raise PlanError(
            "task.decoder", f"unknown decoder '{o.decoder}'.", f"use one of {', '.join(DECODERS)}"
        )
    if o.negatives not in NEGATIVES:
        raise PlanError(
            "task.negatives",
            f"unknown negative sampler '{o.negatives}'.",
            f"use one of {', '.join(NEGATIVES)}",
        )
    fractions = [float(f) for f in o.edge_split]
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise PlanError(
            "task.edge_split",
            f"{fractions} is not three non-negative fractions (train, val, test) summing to 1.",
            "give e.g. task.edge_split=[0.85,0.05,0.1]",
        )
    if fractions[0] <= 0:
        raise PlanError(
            "task.edge_split",
            f"{fractions} leaves no train edges.",
            "give the train side a positive fraction, e.g. task.edge_split=[0.85,0.05,0.1]",
        )
    for key in ("num_negatives", "edge_batch", "eval_negatives"):
        if int(getattr(o, key)) < 1:
            raise PlanError(f"task.{key}", f"must be at least 1, not {getattr(o, key)}.")
    if int(o.embedding_dim) < 0 or any(int(k) < 1 for k in o.hits_at):
        raise PlanError(
            "task", "embedding_dim must be >= 0 (0 = model.hidden) and every hits_at >= 1."
        )
