"""The rank side of a mode: a :class:`RankStrategy` that the one epoch loop
(:class:`gnntrain.training.EpochLoop`) drives.

A mode's ``strategy`` (:class:`~gnntrain.modes.ModeSpec`) builds one per rank from its shard
(torchtitan's split: the parallelism wraps the model, one trainer runs every
parallelism). The conventions that make the exact modes equal ``mode=single``
(docs/design.md, "Exactness") live here and in :mod:`gnntrain.modes.fullgraph`:

* loss = Σ over the items this rank counts (train rows, or edges) / their global count (the task's
  :class:`~gnntrain.tasks.RankTask`);
* parameter gradients all-reduced with SUM (never AVG) over all ranks;
* identical initial weights from one seeded generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from gnntrain.config.schema import option_value
from gnntrain.models import ModelSpec
from gnntrain.plan_types import RunSettings
from gnntrain.tasks import configured_task


def model_spec(
    settings: RunSettings,
    in_dim: int,
    num_classes: int,
    aggregate_first: Optional[bool] = None,
    label_inputs: bool = False,
) -> ModelSpec:
    """The model to build from the run's typed model settings and the model's own options."""
    model = settings.model
    return ModelSpec(
        name=model.name,
        in_dim=in_dim,
        hidden=model.hidden,
        out_dim=num_classes,
        layers=model.layers,
        dropout=model.dropout,
        aggregate_first=aggregate_first,
        layer_options=tuple(sorted(settings.model_options.items())),
        label_classes=num_classes if label_inputs else 0,
        norm=option_value(model.norm),
        target=model.target,
    )


def build_training(
    settings: RunSettings, shard, ctx, aggregate_first: Optional[bool]
) -> Tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The rank's model and optimizer, built once by the epoch loop and handed to the mode's
    strategy (torchtitan's split: the trainer builds the model, the parallelism wraps it): identical
    initial weights on every rank from one seeded generator, on the rank's device in the run's
    dtype, in the mode's layer order, with a label embedding where the shard has label-input rows
    (SuperGCN), and the task's own head (link prediction's decoder) as ``model.head``."""
    from gnntrain.models import build_model

    task, options = configured_task(settings.task)
    spec = model_spec(
        settings,
        shard.features.shape[1],
        task.output_width(
            options,
            shard.num_classes,
            int(settings.model.hidden),
            int(getattr(shard.task, "num_targets", 0)),
        ),
        aggregate_first,
        label_inputs=shard.label_input_mask is not None,
    )
    model = build_model(spec, int(settings.train.seed), ctx.dtype)
    head = task.head(options, spec.out_dim, int(settings.train.seed), ctx.dtype)
    if head is not None:  # trained, synchronised, checkpointed and exported with the GNN
        model.head = head
    model = model.to(ctx.device)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=float(settings.train.lr),
        weight_decay=float(settings.train.weight_decay),
    )
    return model, optimizer


def sync_gradients(params: List[torch.nn.Parameter], comm, through_host: bool = False) -> None:
    """One flat SUM all-reduce of every parameter gradient (kind ``allreduce``).

    ``through_host``: gradients on an accelerator are staged through host
    memory (``d2h``, all-reduce over gloo, ``h2d``), as HyScale's trainers do.
    """
    if not comm.distributed:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = _flatten_dense_tensors(grads)
    if through_host and flat.device.type != "cpu":
        device = flat.device
        staged = comm.to_device(flat, torch.device("cpu"), "d2h", non_blocking=False)
        flat = comm.to_device(
            comm.all_reduce(staged, "allreduce"), device, "h2d", non_blocking=False
        )
    else:
        comm.all_reduce(flat, "allreduce")
    for p, g in zip(params, _unflatten_dense_tensors(flat, grads)):
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)


@dataclass
class EpochStats:
    """What one training epoch hands the loop (this rank's figures)."""

    loss: float  # this rank's loss; the record holds the sum over ranks / loss_divisor
    seconds: float  # the epoch's training time on this rank
    stages: Dict[str, float] = field(default_factory=dict)  # named parts of ``seconds``
    loss_divisor: float = 1.0
    other_stage: bool = True  # book the time no stage claims as "other"
    extra: Dict[str, Any] = field(default_factory=dict)  # mode's own fields, merged into the record


class RankStrategy:
    """How one rank of a mode trains: the hooks the epoch loop calls.

    A subclass sets ``model``, ``optimizer``, ``global_counts`` (train/val/test rows over all
    ranks) and ``num_nodes`` (the graph's) when it is built, and implements :meth:`train_epoch`
    and :meth:`evaluate`; the loop owns resume, checkpoints, interrupts, metrics and predict.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    global_counts: Dict[str, int]
    num_nodes: int

    def start(self, first_epoch: int, history: List[Dict[str, Any]]) -> None:
        """Called once before the first epoch; ``history`` holds the resumed epochs' records."""

    def train_epoch(self, epoch: int) -> EpochStats:
        """One training epoch (runs inside the ledger's train phase)."""
        raise NotImplementedError

    def evaluate(self, epoch: int) -> List[float]:
        """This rank's evaluation sums (eval phase, no grad): for node classification the correct
        predictions per split it counts; for any task what its ``RankTask.eval_sums`` gives."""
        raise NotImplementedError

    def predict(self, what: str, layer: int) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """(global node ids, values) of the rows this rank infers (``gnntrain predict``), or
        None."""
        return None

    def finish(self, result: Dict[str, Any]) -> None:
        """After the last epoch, on every rank (collectives allowed): add the mode's own figures to
        ``result`` (``mode_report``, extra peaks)."""

    def close(self) -> None:
        """Always, last, also after a failure or an interrupt (no collectives): release what
        outlives the process otherwise (scratch files)."""
