"""Link prediction's edge split and what each rank scores (``task.edge_split``).

The graph's edges are split once, seeded, into train, validation and test edges; an undirected
edge (both directions present) is one item, so its two directions always land on the same side.
The message-passing graph keeps the train edges only (both directions of an undirected one), so
no validation or test edge leaks into the embeddings that score it. Each validation and test edge
gets ``task.eval_negatives`` fixed negatives (its first endpoint with a uniformly drawn node: a
hash of the split seed, the split and the edge's index, drawn where it is scored, never stored), as
OGB's link property prediction protocol draws them (Hu et al., Open Graph Benchmark, NeurIPS 2020,
§4.2).

A rank scores the edges whose first endpoint is a row it counts (one replica of a row does), so
every edge is scored once over all ranks, whatever the mode and world size.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import torch

from gnntrain.data.edge_split import HELD_OUT, draw_sides
from gnntrain.errors import PlanError
from gnntrain.partition.store import store_record
from gnntrain.tasks.link_prediction.negatives import draw_negatives

EMPTY = torch.zeros(0, dtype=torch.int64)


EVAL_STREAMS = {"val": -1, "test": -2}  # the fixed negatives' hash streams (epochs are >= 0)


def eval_negative_nodes(
    name: str, index: torch.Tensor, per_edge: int, num_nodes: int, seed: int
) -> torch.Tensor:
    """(edges, per_edge) fixed negatives of the ``name`` edges with global ``index``: a uniform
    node per (seed, split, edge, j) hash, so any rank draws an edge's negatives without storing
    them (OGB's protocol draws each held-out edge's negatives once, uniformly)."""
    return draw_negatives(index, per_edge, num_nodes, seed, EVAL_STREAMS[name])


@store_record
@dataclass
class LinkShard:
    """What one rank scores: the train, validation and test edges whose first endpoint it counts
    (global node ids), each edge's global index (its negatives are drawn from it), and the degree
    distribution for degree-biased negatives."""

    train_a: torch.Tensor
    train_b: torch.Tensor
    train_index: torch.Tensor
    val_a: torch.Tensor
    val_b: torch.Tensor
    val_index: torch.Tensor
    test_a: torch.Tensor
    test_b: torch.Tensor
    test_index: torch.Tensor
    num_train: int  # train edges over all ranks
    num_val: int
    num_test: int
    num_nodes: int
    eval_negatives: int  # fixed negatives per held-out edge
    split_seed: int  # ... drawn from this seed
    degree_cdf: Optional[torch.Tensor] = None  # float64 cumulative train degree (negatives=degree)

    def held_out(self, name: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(first endpoints, second endpoints, global indices) of ``val`` or ``test``."""
        return tuple(getattr(self, f"{name}_{part}") for part in ("a", "b", "index"))

    def negatives(self, name: str, index: torch.Tensor) -> torch.Tensor:
        """The fixed negatives of the ``name`` edges with global ``index``."""
        return eval_negative_nodes(
            name, index, self.eval_negatives, self.num_nodes, self.split_seed
        )


@dataclass
class LinkSplit:
    """The whole graph's split (the data stage's ``GraphData.task_data``): train (a, b), and per
    held-out split (a, b, global index)."""

    num_nodes: int
    train: Tuple[torch.Tensor, torch.Tensor]
    val: Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    test: Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    symmetric: bool
    eval_negatives: int
    split_seed: int
    degree_cdf: Optional[torch.Tensor] = None

    @property
    def counts(self) -> Tuple[int, int, int]:
        return int(self.train[0].numel()), int(self.val[0].numel()), int(self.test[0].numel())

    def negatives(self, name: str) -> torch.Tensor:
        """(edges, eval_negatives) fixed negatives of the whole ``val`` or ``test`` split."""
        index = getattr(self, name)[2]
        return eval_negative_nodes(
            name, index, self.eval_negatives, self.num_nodes, self.split_seed
        )

    def shard_payload(self, rows: Optional[torch.Tensor], counted: bool) -> LinkShard:
        """The edges a rank holding the global ``rows`` (None: all) scores; none where it does not
        count its rows."""
        if not counted:
            owned = torch.zeros(self.num_nodes, dtype=torch.bool)
        elif rows is None:
            owned = torch.ones(self.num_nodes, dtype=torch.bool)
        else:
            owned = torch.zeros(self.num_nodes, dtype=torch.bool)
            owned[rows] = True
        a, b = self.train
        keep = owned[a]
        fields = {}
        for name in HELD_OUT:
            va, vb, vi = getattr(self, name)
            pick = owned[va]
            fields.update({f"{name}_a": va[pick], f"{name}_b": vb[pick], f"{name}_index": vi[pick]})
        n_train, n_val, n_test = self.counts
        return LinkShard(
            train_a=a[keep],
            train_b=b[keep],
            train_index=torch.nonzero(keep).flatten(),
            num_train=n_train,
            num_val=n_val,
            num_test=n_test,
            num_nodes=self.num_nodes,
            eval_negatives=self.eval_negatives,
            split_seed=self.split_seed,
            degree_cdf=self.degree_cdf,
            **fields,
        )


def is_symmetric(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> bool:
    """Every edge's reverse is present."""
    forward = torch.sort(src * num_nodes + dst).values
    return torch.equal(forward, torch.sort(dst * num_nodes + src).values)


def canonical_pairs(
    src: torch.Tensor, dst: torch.Tensor, num_nodes: int
) -> Tuple[torch.Tensor, torch.Tensor, bool]:
    """(first, second endpoints, symmetric): each undirected edge once as (smaller, larger) where
    every edge's reverse is present, else every directed edge; sorted."""
    src, dst = src.to(torch.int64), dst.to(torch.int64)
    symmetric = is_symmetric(src, dst, num_nodes)
    keep = src < dst if symmetric else torch.ones_like(src, dtype=torch.bool)
    key = torch.sort(src[keep] * num_nodes + dst[keep]).values
    return key // num_nodes, key % num_nodes, symmetric


def _finish(
    train: Tuple[torch.Tensor, torch.Tensor],
    held: Sequence[Tuple[torch.Tensor, torch.Tensor]],
    num_nodes: int,
    symmetric: bool,
    seed: int,
    eval_negatives: int,
    degree_negatives: bool,
) -> Tuple[LinkSplit, torch.Tensor, torch.Tensor]:
    """The split of train pairs and held-out (val, test) pairs, each held-out edge indexed (its
    fixed negatives are drawn from its index), and the message-passing graph of the train pairs
    (sorted by (dst, src))."""
    indexed = [(a, b, torch.arange(a.numel())) for a, b in held]
    ta, tb = train
    cdf = None
    if degree_negatives:
        degree = torch.bincount(ta, minlength=num_nodes) + torch.bincount(tb, minlength=num_nodes)
        cdf = torch.cumsum(degree.to(torch.float64), 0)
    split = LinkSplit(
        num_nodes, (ta, tb), indexed[0], indexed[1], symmetric, int(eval_negatives), int(seed), cdf
    )
    mp_src, mp_dst = (torch.cat([ta, tb]), torch.cat([tb, ta])) if symmetric else (ta, tb)
    order = torch.argsort(mp_dst * num_nodes + mp_src)  # sorted by (dst, src), as loaders give it
    return split, mp_src[order], mp_dst[order]


def split_edges(
    src: torch.Tensor,
    dst: torch.Tensor,
    num_nodes: int,
    fractions: Sequence[float],
    seed: int,
    eval_negatives: int,
    degree_negatives: bool,
) -> Tuple[LinkSplit, torch.Tensor, torch.Tensor]:
    """(the split, the message-passing graph's src, dst). Edges are ordered canonically (by first,
    then second endpoint) before the seeded permutation, so the split depends on the edge set, not
    on the order a loader returns it in."""
    a, b, symmetric = canonical_pairs(src, dst, num_nodes)
    what = "undirected edges" if symmetric else "directed edges"
    train, val, test = draw_sides(a.numel(), fractions, seed, what)
    held = [(a[val], b[val]), (a[test], b[test])]
    return _finish(
        (a[train], b[train]), held, num_nodes, symmetric, seed, eval_negatives, degree_negatives
    )


def given_split(
    src: torch.Tensor,
    dst: torch.Tensor,
    num_nodes: int,
    held_out: Dict[str, Tuple[torch.Tensor, torch.Tensor]],
    seed: int,
    eval_negatives: int,
    degree_negatives: bool,
) -> Tuple[LinkSplit, torch.Tensor, torch.Tensor]:
    """The split an ingested graph was given (``gnntrain ingest --val-edges/--test-edges``): every
    edge of the graph trains, the given edges (kept out of it at ingest) are scored."""
    a, b, symmetric = canonical_pairs(src, dst, num_nodes)
    if a.numel() == 0:
        raise PlanError(
            "task",
            "the graph holds no train edges (every edge was given as held out).",
            "ingest it again with fewer --val-edges/--test-edges",
        )
    empty = (torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    held = [tuple(t.to(torch.int64) for t in held_out.get(name, empty)) for name in HELD_OUT]
    return _finish((a, b), held, num_nodes, symmetric, seed, eval_negatives, degree_negatives)


def split_hash(content_hash: str, options) -> str:
    """The split graph's content hash: the graph's and the split's options (a partition of the
    message-passing graph is cached under it)."""
    text = (
        f"{content_hash}|link_prediction|{[float(f) for f in options.edge_split]}|"
        f"{int(options.split_seed)}|{int(options.eval_negatives)}"
    )
    return hashlib.sha1(text.encode()).hexdigest()[:16]
