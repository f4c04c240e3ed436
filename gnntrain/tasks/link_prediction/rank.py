"""One rank's link prediction: the loss over the edges it scores and OGB's ranking metrics.

The GNN's final rows are the node embeddings; a decoder scores edges from them. One epoch is one
full-graph forward, the edges scored in batches of ``task.edge_batch`` positives against the
embeddings (detached into one table, so a batch's decoder graph is freed after its backward), one
backward of the accumulated table gradient through the GNN, then the usual SUM all-reduce. loss =
Σ BCE over the positives this rank scores and their negatives / the global count of both, so the
sum over ranks is ``mode=single``'s loss.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F

from gnntrain.tasks.base import RankRows, RankTask
from gnntrain.tasks.link_prediction.exchange import EndpointExchange
from gnntrain.tasks.link_prediction.negatives import draw_negatives
from gnntrain.tasks.link_prediction.split import LinkShard

EVAL_SPLITS = ("val", "test")


class EndpointTable:
    """The rows a batch of edges reads: this rank's own rows, then the fetched ones, and each node
    id's row in that table."""

    def __init__(self, exchange: EndpointExchange, out: torch.Tensor, ends: torch.Tensor):
        wanted = torch.unique(ends)
        remote = wanted[~exchange.owns(wanted)]
        fetched, self.pending = exchange.fetch(out, remote)
        self.rows = torch.cat([out, fetched])
        self.owned = out.shape[0]
        index = torch.full((exchange.num_nodes,), -1, dtype=torch.int64)  # only ``ends`` are read
        mine = wanted[exchange.owns(wanted)]
        index[mine] = exchange.rows(mine)
        index[remote] = self.owned + torch.arange(remote.numel())
        self.index = index

    def at(self, ids: torch.Tensor) -> torch.Tensor:
        return self.index[ids].to(self.rows.device)


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

    def backward(self, out: torch.Tensor, epoch: int) -> float:
        s, o = self.shard, self.options
        k = int(o.num_negatives)
        negatives = draw_negatives(s.train_index, k, self.num_nodes, self.seed, epoch, s.degree_cdf)
        owned = self._owned(out.detach())
        table = EndpointTable(
            self.exchange, owned, torch.cat([s.train_a, s.train_b, negatives.reshape(-1)])
        )
        # the table's gradient, accumulated batch by batch from the gathered rows' gradients (an
        # autograd gather would add a zero tensor of the whole table per gather); its first rows
        # are the owned rows' gradient, handed to the GNN's backward
        grad = torch.zeros_like(table.rows)
        total = max(1, s.num_train * (1 + k))
        loss_sum = 0.0
        batch = int(o.edge_batch)
        for lo in range(0, int(s.train_a.numel()), batch):
            at = [table.at(ids[lo : lo + batch]) for ids in (s.train_a, s.train_b, negatives)]
            a, b, neg = (table.rows[i].requires_grad_() for i in at)
            positive = self.head(a, b)
            negative = self.head(a.unsqueeze(1), neg)
            loss = (
                F.binary_cross_entropy_with_logits(
                    positive, torch.ones_like(positive), reduction="sum"
                )
                + F.binary_cross_entropy_with_logits(
                    negative, torch.zeros_like(negative), reduction="sum"
                )
            ) / total
            loss.backward()
            for i, rows in zip(at, (a, b, neg)):
                grad.index_add_(0, i.reshape(-1), rows.grad.reshape(-1, rows.shape[-1]))
            loss_sum += float(loss.detach())
        grad_owned = grad[: table.owned]
        table.pending.send_back(grad[table.owned :], grad_owned)
        if grad_owned.shape[0] == out.shape[0]:
            out.backward(grad_owned)
        else:  # a replica that counts no rows: its share is zero, its backward still runs
            out.backward(torch.zeros_like(out))
        return loss_sum

    def eval_sums(self, out: torch.Tensor, epoch: int) -> List[float]:
        sums: List[float] = []
        owned = self._owned(out)
        for name in EVAL_SPLITS:
            a_ids, b_ids, neg_ids = self.shard.split(name)
            ends = torch.cat([a_ids, b_ids, neg_ids.reshape(-1)])
            table = EndpointTable(self.exchange, owned, ends)
            ranks, first = self._ranked(table, a_ids, b_ids, neg_ids)
            sums += [float(ranks.numel()), float(ranks.reciprocal().sum())]
            sums += [float((ranks <= k).sum()) for k in self.hits_at]
            sums.append(self._auc(*first))
        return sums

    def _ranked(self, table: EndpointTable, a_ids, b_ids, neg_ids):
        """(each positive's rank among its negatives, (positive scores, first negatives' scores)),
        scored in batches: a batch's (edges, negatives, width) rows are the evaluation's largest
        tensor, so a batch holds about ``task.edge_batch`` of them."""
        per_batch = max(1, int(self.options.edge_batch) // max(1, neg_ids.shape[1]))
        ranks, positives, firsts = [], [], []
        for lo in range(0, int(a_ids.numel()), per_batch):
            hi = lo + per_batch
            a = table.rows[table.at(a_ids[lo:hi])]
            positive = self.head(a, table.rows[table.at(b_ids[lo:hi])])
            negative = self.head(a.unsqueeze(1), table.rows[table.at(neg_ids[lo:hi])])
            ranks.append(reciprocal_ranks(positive, negative))
            positives.append(positive)
            firsts.append(negative[:, 0])
        if not ranks:
            empty = out_empty = table.rows.new_zeros(0)
            return empty.to(torch.float64), (out_empty, out_empty)
        return torch.cat(ranks), (torch.cat(positives), torch.cat(firsts))

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
    for i, name in enumerate(EVAL_SPLITS):
        n, mrr, *rest = sums[i * width : (i + 1) * width]
        n = max(1.0, n)
        record[f"{name}_auc"] = rest[-1]  # first: the headline the progress line shows
        record[f"{name}_mrr"] = mrr / n
        for k, h in zip(hits, rest[:-1]):
            record[f"{name}_hits@{k}"] = h / n
    return record
