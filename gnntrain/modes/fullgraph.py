"""Full-graph training for the exact modes (single, partition, SuperGCN, MoP, HongTu).

A mode's strategy subclasses :class:`FullGraphStrategy` and says how a layer
aggregates (:meth:`~FullGraphStrategy.aggregate`) or, where it re-lays out
between the aggregate and update halves (MoP, HongTu), how the whole forward
runs (:meth:`~FullGraphStrategy.forward`). Dropout is drawn for the global
tensor and sliced to the held rows, so that a partitioned run draws the masks
``mode=single`` draws (docs/design.md, "Exactness").
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, List, Optional

import torch

from gnntrain.errors import GnnTrainError
from gnntrain.metrics.clock import StageClock
from gnntrain.models import GNN, GlobalDropout, SparseAdjacency
from gnntrain.models.export import rows_output
from gnntrain.modes.base import RankShard
from gnntrain.modes.strategy import EpochStats, RankStrategy, sync_gradients
from gnntrain.plan_types import RunSettings
from gnntrain.runtime import RankContext
from gnntrain.tasks import SPLITS, RankRows, configured_task

__all__ = ["SPLITS", "FullGraphStrategy", "InputAggregate"]


class InputAggregate:
    """The adjacency (or a mode's block of it) as a layer's aggregation, keeping its product with
    the input features (``train.cache_input_aggregation``; single, MoP, SuperGCN): dropout sits
    between layers, never on the inputs, so where the first layer aggregates before its weights (GCN
    or SAGE widening or keeping the width, GIN) A·x is the same in every epoch and evaluation, and
    is computed once (SGC's observation, Wu et al., Simplifying Graph Convolutional Networks, §3:
    the propagation of fixed features needs no recomputation). Any other input (a hidden layer's, or
    x once changed in place) runs the SpMM."""

    def __init__(self, adjacency: SparseAdjacency, x: torch.Tensor):
        self.adjacency, self.x = adjacency, x
        self._kept: Optional[torch.Tensor] = None
        self._version = -1

    def _is_input(self, h: torch.Tensor) -> bool:
        """``h`` is the input features themselves, or a view of all of them (a stage clock's
        identity mark)."""
        x = self.x
        return h is x or (
            h.data_ptr() == x.data_ptr()
            and h.shape == x.shape
            and h.stride() == x.stride()
            and h.dtype == x.dtype
            and h.device == x.device
        )

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if h.requires_grad or not self._is_input(h):
            return self.adjacency.spmm(h)
        if self._kept is None or self._version != h._version:
            self._kept, self._version = self.adjacency.spmm(h).detach(), h._version
        return self._kept


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
    # the disk tier for autograd's saved tensors (modes/saved_tier.py), where the plan set a budget
    saved_tier: Optional[Any] = None

    def __init__(
        self,
        shard: RankShard,
        ctx: RankContext,
        settings: RunSettings,
        model: GNN,
        optimizer: torch.optim.Optimizer,
    ):
        """``model`` and ``optimizer``: the epoch loop's
        (:func:`~gnntrain.modes.strategy.build_training`), in this mode's layer order."""
        self.ctx = ctx
        data_device = torch.device("cpu") if self.inputs_on_host else ctx.device
        self.x = shard.features.to(device=data_device, dtype=ctx.dtype)
        self.labels = shard.labels.to(data_device)
        self.masks = {s: shard.count_masks[s].to(data_device) for s in SPLITS}
        self.label_mask = (
            shard.label_input_mask.to(data_device) if shard.label_input_mask is not None else None
        )
        seed = int(settings.train.seed)
        self.model, self.optimizer = model, optimizer
        self.params = list(self.model.parameters())
        full = torch.equal(shard.global_ids, torch.arange(shard.num_global_nodes))
        self.dropout = GlobalDropout(
            model.spec.dropout, seed, shard.num_global_nodes, None if full else shard.global_ids
        )
        self.global_counts, self.num_nodes = shard.global_counts, shard.num_global_nodes
        self.global_ids = shard.global_ids
        task, options = configured_task(settings.task)
        self.task = task.rank_task(
            options,
            shard.task,
            RankRows(
                global_ids=shard.global_ids,
                labels=self.labels,
                masks=self.masks,
                global_counts=shard.global_counts,
                counted=shard.counted,
                num_nodes=shard.num_global_nodes,
                device=data_device,
                dtype=ctx.dtype,
                comm=ctx.comm,
                model=model,
                seed=seed,
            ),
        )

    # ------------------------------------------------------------ the mode's part
    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        """One layer's neighbourhood aggregation of the held rows ``h``."""
        raise NotImplementedError

    def forward(
        self, model: GNN, x: torch.Tensor, dropout: Optional[GlobalDropout]
    ) -> torch.Tensor:
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
        # saved tensors beyond the host budget go to the disk tier between forward and backward
        tier = self.saved_tier.epoch() if self.saved_tier is not None else contextlib.nullcontext()
        with tier:
            self.optimizer.zero_grad(set_to_none=False)
            out = self.forward(self.model, self._inputs(), self.dropout)
            # the task's loss share, its backward run through the mode's (a collective)
            loss = self.task.backward(out, epoch)
        sync_gradients(self.params, self.ctx.comm)
        self.optimizer.step()
        stages = dict(sorted(self.clock.seconds.items())) if self.clock is not None else {}
        return EpochStats(loss=loss, seconds=time.perf_counter() - start, stages=stages)

    def close(self) -> None:
        if self.saved_tier is not None:
            self.saved_tier.close()
        super().close()

    def predict(self, what: str, layer: int):
        self.on_epoch(0, False)
        if what == "values":  # in the task's own units (a regression's targets)
            values = self.task.values(self.forward(self.model, self._inputs(), None))
            if values is None:
                raise GnnTrainError(
                    "predict: --what values needs a model trained with task=node_regression."
                )
            return self.global_ids, values
        values = rows_output(
            self.model, lambda: self.forward(self.model, self._inputs(), None), what, layer
        )
        return self.global_ids, values

    def evaluate(self, epoch: int) -> List[float]:
        self.on_epoch(epoch, False)
        return self.task.eval_sums(self.forward(self.model, self._inputs(), None), epoch)
