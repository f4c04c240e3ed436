"""Full-graph training for the exact modes (single, partition, SuperGCN, MoP, HongTu).

A mode's strategy subclasses :class:`FullGraphStrategy` and says how a layer
aggregates (:meth:`~FullGraphStrategy.aggregate`) or, where it re-lays out
between the aggregate and update halves (MoP, HongTu), how the whole forward
runs (:meth:`~FullGraphStrategy.forward`). Dropout is drawn for the global
tensor and sliced to the held rows, so that a partitioned run draws the masks
``mode=single`` draws (docs/design.md, "Exactness").
"""
from __future__ import annotations

import time
from typing import List, Optional

import torch
import torch.nn.functional as F

from gnntrain.metrics.clock import StageClock
from gnntrain.models import GNN, GlobalDropout, build_model
from gnntrain.models.export import rows_output
from gnntrain.modes.base import RankShard
from gnntrain.modes.strategy import SPLITS, EpochStats, RankStrategy, model_spec, sync_gradients
from gnntrain.plan_types import RunSettings
from gnntrain.runtime import RankContext

__all__ = ["SPLITS", "FullGraphStrategy"]


class FullGraphStrategy(RankStrategy):
    """One full-graph epoch: forward over the rank's rows, loss on its train rows,
    backward, SUM all-reduce of the gradients, optimizer step.

    Subclasses set their own state, then call ``super().__init__``; class attributes:
    ``inputs_on_host`` keeps features, labels and the loss in host memory (HongTu: only the
    mode's chunks visit the device; the parameters live there); ``clock``'s stages
    (aggregation, quantization, ...) join the epoch's time breakdown. Rows in
    ``shard.label_input_mask`` get a learnable label embedding added to their features (label
    propagation) and are left out of the loss by the mode's ``count_masks``.
    """

    inputs_on_host = False
    clock: Optional[StageClock] = None

    def __init__(self, shard: RankShard, ctx: RankContext, settings: RunSettings,
                 aggregate_first: Optional[bool] = None):
        self.ctx = ctx
        data_device = torch.device("cpu") if self.inputs_on_host else ctx.device
        self.x = shard.features.to(device=data_device, dtype=ctx.dtype)
        self.labels = shard.labels.to(data_device)
        self.masks = {s: shard.count_masks[s].to(data_device) for s in SPLITS}
        self.label_mask = shard.label_input_mask.to(data_device) if shard.label_input_mask is not None else None
        spec = model_spec(settings.model, self.x.shape[1], shard.num_classes, aggregate_first,
                          label_inputs=self.label_mask is not None)
        seed = int(settings.train.seed)
        self.model: GNN = build_model(spec, seed, ctx.dtype).to(ctx.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=float(settings.train.lr),
                                          weight_decay=float(settings.train.weight_decay))
        self.params = list(self.model.parameters())
        full = torch.equal(shard.global_ids, torch.arange(shard.num_global_nodes))
        self.dropout = GlobalDropout(spec.dropout, seed, shard.num_global_nodes, None if full else shard.global_ids)
        self.global_counts, self.num_nodes = shard.global_counts, shard.num_global_nodes
        self.n_train = max(1, shard.global_counts["train"])
        self.global_ids = shard.global_ids

    # ------------------------------------------------------------ the mode's part
    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        """One layer's neighbourhood aggregation of the held rows ``h``."""
        raise NotImplementedError

    def forward(self, model: GNN, x: torch.Tensor, dropout: Optional[GlobalDropout]) -> torch.Tensor:
        """The model over the held rows; modes that re-lay out between layers override it."""
        return model(x, self.aggregate, dropout)

    def on_epoch(self, epoch: int, training: bool) -> None:
        """Before each training and evaluation forward (SuperGCN seeds its rounding here)."""

    # ------------------------------------------------------------------ the epoch
    def _inputs(self) -> torch.Tensor:
        return self.model.with_label_inputs(self.x, self.labels, self.label_mask)

    def train_epoch(self, epoch: int) -> EpochStats:
        self.dropout.epoch = epoch
        start = time.perf_counter()
        if self.clock is not None:
            self.clock.reset()
        self.on_epoch(epoch, True)
        logits = self.forward(self.model, self._inputs(), self.dropout)
        train_mask = self.masks["train"]
        loss = F.cross_entropy(logits[train_mask], self.labels[train_mask], reduction="sum") / self.n_train
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        sync_gradients(self.params, self.ctx.comm)
        self.optimizer.step()
        stages = dict(sorted(self.clock.seconds.items())) if self.clock is not None else {}
        return EpochStats(loss=float(loss.detach()), seconds=time.perf_counter() - start, stages=stages)

    def predict(self, what: str, layer: int):
        self.on_epoch(0, False)
        values = rows_output(self.model, lambda: self.forward(self.model, self._inputs(), None), what, layer)
        return self.global_ids, values

    def evaluate(self, epoch: int) -> List[float]:
        self.on_epoch(epoch, False)
        pred = self.forward(self.model, self._inputs(), None).argmax(dim=1)
        return [float(((pred == self.labels) & self.masks[s]).sum()) for s in SPLITS]
