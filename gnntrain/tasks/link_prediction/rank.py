"""One rank's link prediction: the loss over the edges it scores and OGB's ranking metrics.

The GNN's final rows are the node embeddings; a decoder scores edges from them. An edge's score is
a sum of pair terms, one per (anchor, far endpoint): the positive (a, b) and each negative (a, n).
One epoch is one full-graph forward, then the pair terms in rounds by who holds the far endpoint:
round r fetches the far rows that rank (me + r) mod p holds (round 0: this rank's own), scores that
round's pairs in batches of ``task.edge_batch`` edges' worth, and sends the fetched rows' gradients
back. A rank so holds one peer's rows at a time, at most about N/p of them, never every node's (with
uniform negatives every node is someone's far endpoint). Then one backward of the accumulated
gradient of the owned rows through the GNN, and the usual SUM all-reduce. loss = Σ BCE over the
pairs this rank scores / the global count (train edges × (1 + negatives)), so the sum over ranks is
``mode=single``'s loss.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from gnntrain.data.edge_split import HELD_OUT
from gnntrain.heap import release_heap
from gnntrain.tasks.base import RankRows, RankTask
from gnntrain.tasks.link_prediction.exchange import EndpointExchange
from gnntrain.tasks.link_prediction.negatives import draw_negatives
from gnntrain.tasks.link_prediction.split import LinkShard


class PairRounds:
    """The pair terms of some edges (anchor: a node this rank holds; far: any node) grouped by the
    rank that holds the far node, and the rounds that fetch them: round r serves the pairs whose far
    node rank (me + r) mod p holds. Every rank runs every round (the fetch is a collective)."""

    def __init__(
        self,
        exchange: EndpointExchange,
        owned_rows: torch.Tensor,
        anchor: torch.Tensor,
        far: torch.Tensor,
        repeat: Tuple[int, ...] = (1,),
    ):
        """``anchor`` per edge; ``far`` per pair, the pairs of ``repeat`` blocks: block b pairs
        each edge's anchor ``repeat[b]`` times in a row (train: (1, k), the positives then each
        edge's k negatives; evaluation: (1 + eval_negatives,))."""
        self.exchange, self.owned_rows = exchange, owned_rows
        # positions among this rank's own rows, and each far node's holder: int32 (half the bytes
        # of the per-pair arrays; positions and ranks stay far below 2^31)
        row = exchange.rows(anchor).to(torch.int32)
        self.anchor_row = torch.cat([row.repeat_interleave(r) for r in repeat])
        self.far = far
        self.owner = exchange.owner_of(far)

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Any]]:
        """(the round's pair indices, their far rows' positions, the fetched rows or None for this
        rank's own, the handle that sends the fetched rows' gradients back) per round."""
        ex, me, p = self.exchange, self.exchange.comm.rank, self.exchange.comm.world_size
        for r in range(p):
            peer = (me + r) % p
            pairs = torch.nonzero(self.owner == peer).flatten()
            far = self.far[pairs]
            if r == 0:  # this rank's own rows: nothing to fetch
                yield pairs, ex.rows(far), None, None
                continue
            wanted = torch.unique(far)
            fetched, pending = ex.fetch(self.owned_rows, wanted)
            yield pairs, torch.searchsorted(wanted, far), fetched, pending

    @staticmethod
    def batches(count: int, size: int) -> Iterator[slice]:
        """Consecutive slices of at most ``size`` of a round's ``count`` pairs."""
        for lo in range(0, int(count), max(1, size)):
            yield slice(lo, lo + size)


def reciprocal_ranks(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """OGB's rank of each positive among its negatives (ties count half): 1 + the mean of the
    optimistic (strictly higher negatives) and pessimistic (higher or equal) counts."""
    higher = (negative > positive.unsqueeze(1)).sum(dim=1)
    at_least = (negative >= positive.unsqueeze(1)).sum(dim=1)
    return 0.5 * (higher + at_least).to(torch.float64) + 1.0


def roc_auc(positive: torch.Tensor, negative: torch.Tensor) -> float:
    """Area under the ROC curve of positives against negatives: the Mann-Whitney statistic from
    the positives' ranks among all scores, tied scores sharing their mean rank (as scikit-learn's
    ``roc_auc_score``)."""
    n_pos, n_neg = int(positive.numel()), int(negative.numel())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    scores = torch.cat([positive, negative]).to(torch.float64)
    order = torch.argsort(scores, stable=True)
    _, inverse, counts = torch.unique_consecutive(
        scores[order], return_inverse=True, return_counts=True
    )
    last = torch.cumsum(counts, 0).to(torch.float64)
    mean_rank = last - (counts.to(torch.float64) - 1) / 2  # 1-based, ties averaged
    ranks = torch.empty_like(scores)
    ranks[order] = mean_rank[inverse]
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


class LinkPredictionRank(RankTask):
    def __init__(self, options, shard: LinkShard, rows: RankRows):
        self.options, self.shard, self.comm = options, shard, rows.comm
        self.head = rows.model.head
        owned = rows.global_ids if rows.counted else rows.global_ids[:0]
        self.exchange = EndpointExchange(rows.comm, owned, rows.num_nodes)
        self.num_nodes, self.seed = rows.num_nodes, rows.seed
        self.hits_at: Tuple[int, ...] = tuple(int(k) for k in options.hits_at)

    def _owned(self, out: torch.Tensor) -> torch.Tensor:
        """The output rows this rank owns (all of them, or none for a replica that does not
        count)."""
        return out if self.exchange.owned_ids.numel() else out[:0]

    def _pair_batch(self) -> int:
        """Pairs scored at a time: ``task.edge_batch`` train edges' worth (each edge is 1 + k
        pairs), in training and in evaluation alike (a held-out edge's 1 + eval_negatives pairs
        would make an evaluation batch 100 times a training one)."""
        return max(1, int(self.options.edge_batch) * (1 + int(self.options.num_negatives)))

    def backward(self, out: torch.Tensor, epoch: int) -> float:
        s, o = self.shard, self.options
        k = int(o.num_negatives)
        negatives = draw_negatives(s.train_index, k, self.num_nodes, self.seed, epoch, s.degree_cdf)
        owned = self._owned(out.detach())
        n_pos = int(s.train_a.numel())
        # pair j < n_pos is edge j's positive; n_pos + i·k + t is edge i's t-th negative
        far = torch.cat([s.train_b, negatives.reshape(-1)])
        del negatives
        rounds = PairRounds(self.exchange, owned, s.train_a, far, repeat=(1, k))
        del far
        # the owned rows' gradient, accumulated from the gathered rows' gradients (an autograd
        # gather would add a zero tensor of the whole table per gather)
        grad_owned = torch.zeros_like(owned)
        total = max(1, s.num_train * (1 + k))
        loss_sum = 0.0
        for pairs, far_at, fetched, pending in rounds:
            far_rows = owned if fetched is None else fetched
            grad_far = grad_owned if fetched is None else torch.zeros_like(fetched)
            for part in rounds.batches(pairs.numel(), self._pair_batch()):
                at_anchor = rounds.anchor_row[pairs[part]].to(owned.device)
                at_far = far_at[part].to(owned.device)
                h_a = owned[at_anchor].requires_grad_()
                h_f = far_rows[at_far].requires_grad_()
                logit = self.head(h_a, h_f)
                label = (pairs[part] < n_pos).to(device=logit.device, dtype=logit.dtype)
                loss = F.binary_cross_entropy_with_logits(logit, label, reduction="sum") / total
                loss.backward()
                grad_owned.index_add_(0, at_anchor, h_a.grad)
                grad_far.index_add_(0, at_far, h_f.grad)
                loss_sum += float(loss.detach())
            if pending is not None:
                pending.send_back(grad_far, grad_owned)
        del rounds
        if grad_owned.shape[0] == out.shape[0]:
            out.backward(grad_owned)
        else:  # a replica that counts no rows: its share is zero, its backward still runs
            out.backward(torch.zeros_like(out))
        release_heap()  # the rounds' arrays: not carried into the next stage's resident size
        return loss_sum

    def eval_sums(self, out: torch.Tensor, epoch: int) -> List[float]:
        sums: List[float] = []
        owned = self._owned(out)
        # held-out edges per chunk: a quarter of task.edge_batch (each is 1 + eval_negatives pairs)
        size = max(1, int(self.options.edge_batch) // 4)
        for name in HELD_OUT:
            a_ids, b_ids, index = self.shard.held_out(name)
            # a chunk of edges at a time (their pairs' indices are the evaluation's largest
            # arrays); every rank runs as many chunks as the rank with the most edges
            chunks = int(self.comm.reduce_stats([-(-int(a_ids.numel()) // size)], op="max")[0])
            ranks, positives, firsts = [], [], []
            for c in range(chunks):
                part = slice(c * size, (c + 1) * size)
                negatives = self.shard.negatives(name, index[part])
                scores = self._scores(owned, a_ids[part], b_ids[part], negatives)
                ranks.append(reciprocal_ranks(scores[:, 0], scores[:, 1:]))
                positives.append(scores[:, 0])
                firsts.append(scores[:, 1])
            ranks = torch.cat(ranks) if ranks else torch.zeros(0, dtype=torch.float64)
            sums += [float(ranks.numel()), float(ranks.reciprocal().sum())]
            sums += [float((ranks <= k).sum()) for k in self.hits_at]
            empty = owned.new_zeros(0)
            sums.append(self._auc(torch.cat(positives or [empty]), torch.cat(firsts or [empty])))
        release_heap()
        return sums

    def _scores(self, owned, a_ids, b_ids, neg_ids) -> torch.Tensor:
        """(edges, 1 + negatives) logits: each held-out edge's, then its negatives', scored in the
        rounds of :class:`PairRounds`, a batch of about ``task.edge_batch`` edges' pairs at a
        time."""
        n, width = int(a_ids.numel()), 1 + int(neg_ids.shape[1])
        far = torch.cat([b_ids.view(-1, 1), neg_ids], dim=1).reshape(-1)
        rounds = PairRounds(self.exchange, owned, a_ids, far, repeat=(width,))
        scores = torch.empty(n * width, dtype=owned.dtype, device=owned.device)
        for pairs, far_at, fetched, _ in rounds:
            far_rows = owned if fetched is None else fetched
            for part in rounds.batches(pairs.numel(), self._pair_batch()):
                h_a = owned[rounds.anchor_row[pairs[part]].to(owned.device)]
                h_f = far_rows[far_at[part].to(owned.device)]
                scores[pairs[part].to(owned.device)] = self.head(h_a, h_f)
        return scores.view(n, width)

    def _auc(self, positive: torch.Tensor, negative: torch.Tensor) -> float:
        """The split's AUC of every positive against its first negative, computed on rank 0 from
        every rank's scores (one value; the others add 0)."""
        comm = self.comm
        scores = torch.stack([positive, negative], dim=1).to(torch.float64)
        if comm.distributed:
            counts = [scores.shape[0] if r == 0 else 0 for r in range(comm.world_size)]
            arriving = comm.exchange_counts(counts, "allgather")
            scores = comm.all_to_all(scores, counts, arriving, "allgather")
            if comm.rank != 0:
                return 0.0
        scores = scores.detach().cpu()
        return roc_auc(scores[:, 0], scores[:, 1])


def link_metrics(options, sums: Sequence[float], counts) -> dict:
    """``{split}_mrr``, ``{split}_hits@K`` and ``{split}_auc`` for the validation and test edges
    from the summed evaluation figures."""
    hits = [int(k) for k in options.hits_at]
    width = 3 + len(hits)
    record = {}
    for i, name in enumerate(HELD_OUT):
        n, mrr, *rest = sums[i * width : (i + 1) * width]
        n = max(1.0, n)
        record[f"{name}_auc"] = rest[-1]  # first: the headline the progress line shows
        record[f"{name}_mrr"] = mrr / n
        for k, h in zip(hits, rest[:-1]):
            record[f"{name}_hits@{k}"] = h / n
    return record
