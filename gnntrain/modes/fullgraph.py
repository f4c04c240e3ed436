"""Full-graph training for the exact modes (single, partition, SuperGCN, MoP, HongTu).

A mode hands :func:`train_full_graph` the rank's shard and an aggregation
callable; :class:`FullGraphTask` is the epoch the shared
:class:`~gnntrain.modes.loop.EpochLoop` runs. Besides the loop's conventions,
dropout is drawn for the global tensor and sliced to the held rows, so that a
partitioned run draws the masks ``mode=single`` draws (docs/design.md, "Exactness").
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from gnntrain.metrics.clock import StageClock
from gnntrain.models import GNN, GlobalDropout, build_model
from gnntrain.modes.base import RankShard
from gnntrain.modes.loop import SPLITS, EpochLoop, EpochStats, model_spec, run_totals, sync_gradients
from gnntrain.runtime import RankContext

Forward = Callable[[GNN, torch.Tensor, Optional[GlobalDropout]], torch.Tensor]

__all__ = ["SPLITS", "FullGraphTask", "train_full_graph"]


class FullGraphTask:
    """One full-graph epoch: forward over the rank's rows, loss on its train rows,
    backward, SUM all-reduce of the gradients, optimizer step."""

    def __init__(self, ctx: RankContext, model: GNN, optimizer: torch.optim.Optimizer, shard: RankShard,
                 x: torch.Tensor, labels: torch.Tensor, masks: Dict[str, torch.Tensor],
                 label_mask: Optional[torch.Tensor], forward: Forward, dropout: GlobalDropout,
                 on_epoch: Optional[Callable[[int, bool], None]], clock: Optional[StageClock]):
        self.ctx, self.model, self.optimizer = ctx, model, optimizer
        self.params = list(model.parameters())
        self.x, self.labels, self.masks, self.label_mask = x, labels, masks, label_mask
        self.forward, self.dropout, self.on_epoch, self.clock = forward, dropout, on_epoch, clock
        self.n_train = max(1, shard.global_counts["train"])
        self.global_ids = shard.global_ids

    def start(self, first_epoch: int, history: List[Dict[str, Any]]) -> None:
        pass

    def _inputs(self) -> torch.Tensor:
        return self.model.with_label_inputs(self.x, self.labels, self.label_mask)

    def train_epoch(self, epoch: int) -> EpochStats:
        self.dropout.epoch = epoch
        start = time.perf_counter()
        if self.clock is not None:
            self.clock.reset()
        if self.on_epoch is not None:
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
        from gnntrain.modes.predict import rows_output

        if self.on_epoch is not None:
            self.on_epoch(0, False)
        values = rows_output(self.model, lambda: self.forward(self.model, self._inputs(), None), what, layer)
        return self.global_ids, values

    def evaluate(self, epoch: int) -> List[float]:
        if self.on_epoch is not None:
            self.on_epoch(epoch, False)
        pred = self.forward(self.model, self._inputs(), None).argmax(dim=1)
        return [float(((pred == self.labels) & self.masks[s]).sum()) for s in SPLITS]


def train_full_graph(shard: RankShard, ctx: RankContext, aggregate: Callable[[torch.Tensor], torch.Tensor],
                     aggregate_first: Optional[bool] = None, setup_s: float = 0.0,
                     forward: Optional[Forward] = None, on_epoch: Optional[Callable[[int, bool], None]] = None,
                     clock: Optional[StageClock] = None, inputs_on_host: bool = False) -> Dict[str, Any]:
    """Train on ``shard``.

    ``forward(model, x, dropout)`` overrides the plain ``model(x, aggregate,
    dropout)`` for modes that re-layout between the aggregate and update
    halves (MoP); ``on_epoch(epoch, training)`` runs before each training and
    evaluation forward (SuperGCN seeds its rounding there); ``clock``'s
    stages (aggregation, quantization, ...) join the epoch's time breakdown.
    ``inputs_on_host`` keeps features, labels and the loss in host memory
    (HongTu: only the mode's chunks visit the device; the parameters live
    there). Rows in ``shard.label_input_mask`` get a learnable label embedding added
    to their features (label propagation) and are left out of the loss by
    the mode's ``count_masks``.
    """
    if forward is None:
        def forward(model, x, dropout):
            return model(x, aggregate, dropout)

    cfg = ctx.plan.config_obj
    data_device = torch.device("cpu") if inputs_on_host else ctx.device
    x = shard.features.to(device=data_device, dtype=ctx.dtype)
    labels = shard.labels.to(data_device)
    masks = {s: shard.count_masks[s].to(data_device) for s in SPLITS}
    label_mask = shard.label_input_mask.to(data_device) if shard.label_input_mask is not None else None
    spec = model_spec(cfg, x.shape[1], shard.num_classes, aggregate_first, label_inputs=label_mask is not None)
    model = build_model(spec, int(cfg.train.seed), ctx.dtype).to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(cfg.train.lr), weight_decay=float(cfg.train.weight_decay))
    global_ids = None if torch.equal(shard.global_ids, torch.arange(shard.num_global_nodes)) else shard.global_ids
    dropout = GlobalDropout(spec.dropout, int(cfg.train.seed), shard.num_global_nodes, global_ids)
    task = FullGraphTask(ctx, model, optimizer, shard, x, labels, masks, label_mask, forward, dropout, on_epoch, clock)
    result = EpochLoop(ctx, model, optimizer, shard.global_counts, shard.num_global_nodes).run(task)
    return {**result, **run_totals(ctx, setup_s), "model": model}
