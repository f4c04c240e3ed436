"""``task=node_regression``: real-valued node targets (one or more per node), mean squared error
over the train rows, MAE, RMSE and R² per split.

The targets are standardised with the train rows' mean and standard deviation per target (so that
every target weighs alike in the loss and the model's outputs stay near unit scale); the metrics and
``gnntrain predict --what values`` are in the targets' own units, and ``model.yaml`` records the
standardisation. A node without a target (NaN) is left out of the loss and of the metrics.
R² is the mean over targets of 1 - SSE/SST (scikit-learn's ``r2_score``, ``uniform_average``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch

from gnntrain.errors import PlanError
from gnntrain.partition.store import store_record
from gnntrain.plan_types import SPLITS
from gnntrain.tasks.base import (
    RankRows,
    RankTask,
    TaskConfig,
    TaskPlan,
    TaskSizes,
    TaskSpec,
    register_task,
)


@dataclass
class NodeRegressionConfig(TaskConfig):
    name: str = "node_regression"
    standardize: bool = True  # train on (y - mean) / std of the train rows, per target


@store_record
@dataclass
class RegressionShard:
    """A rank's rows' standardised targets (NaN: none) and the standardisation."""

    targets: torch.Tensor  # (rows, T), standardised
    mean: torch.Tensor  # (T,) float64
    std: torch.Tensor  # (T,) float64
    train_elements: int  # target values over every rank's train rows

    @property
    def num_targets(self) -> int:
        return int(self.targets.shape[1])


@dataclass
class RegressionTargets:
    """The whole graph's standardised targets (the data stage's ``GraphData.task_data``)."""

    targets: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    train_elements: int

    def shard_payload(self, rows: Optional[torch.Tensor], counted: bool) -> RegressionShard:
        held = self.targets if rows is None else self.targets[rows]
        return RegressionShard(held, self.mean, self.std, self.train_elements)


def prepare_data(options: NodeRegressionConfig, data, seed: int):
    """The graph with its targets standardised by the train rows' statistics."""
    if data.targets is None:
        raise PlanError(
            "task",
            f"dataset '{data.name}' has no regression targets.",
            "ingest your graph with --targets FILE (or --target-columns in the node table), or "
            "use a generated graph with dataset.regression_targets=1",
        )
    y = data.targets.to(torch.float64)
    y = y.view(-1, 1) if y.dim() == 1 else y
    train = data.train_mask.view(-1, 1) & ~torch.isnan(y)
    count = train.sum(dim=0).clamp(min=1)
    mean = torch.where(train, y, 0.0).sum(dim=0) / count
    var = torch.where(train, (y - mean) ** 2, 0.0).sum(dim=0) / count
    std = var.sqrt().clamp(min=1e-12)
    if not options.standardize:
        mean, std = torch.zeros_like(mean), torch.ones_like(std)
    data.task_data = RegressionTargets(((y - mean) / std).float(), mean, std, int(train.sum()))
    return data


class NodeRegressionRank(RankTask):
    """loss = Σ (ŷ - z)² over the train rows' target values this rank counts / their global count
    (z: the standardised target); evaluation sums per split in the targets' units."""

    def __init__(self, shard: RegressionShard, rows: RankRows):
        self.masks = rows.masks
        self.z = shard.targets.to(device=rows.device, dtype=rows.dtype)
        self.present = ~torch.isnan(self.z)
        self.mean = shard.mean.to(device=rows.device, dtype=rows.dtype)
        self.std = shard.std.to(device=rows.device, dtype=rows.dtype)
        self.total = max(1, int(shard.train_elements))

    def backward(self, out: torch.Tensor, epoch: int) -> float:
        keep = self.masks["train"].view(-1, 1) & self.present
        err = torch.where(keep, out - torch.nan_to_num(self.z), 0.0)
        loss = (err * err).sum() / self.total
        loss.backward()
        return float(loss.detach())

    def values(self, out: torch.Tensor) -> torch.Tensor:
        """Predictions in the targets' units."""
        return out * self.std + self.mean

    def card(self) -> Dict[str, Any]:
        return {"targets": {"mean": self.mean.tolist(), "std": self.std.tolist()}}

    def eval_sums(self, out: torch.Tensor, epoch: int) -> List[float]:
        """Per split: values counted, Σ|e|, Σe², then per target n_t, Σy_t, Σy_t², SSE_t."""
        y = torch.nan_to_num(self.z) * self.std + self.mean
        err = self.values(out) - y
        sums: List[float] = []
        for split in SPLITS:
            keep = (self.masks[split].view(-1, 1) & self.present).to(out.dtype)
            e, yk = err * keep, y * keep
            sums += [float(keep.sum()), float(e.abs().sum()), float((e * e).sum())]
            for t in range(out.shape[1]):
                sums += [
                    float(keep[:, t].sum()),
                    float(yk[:, t].sum()),
                    float((yk[:, t] ** 2).sum()),
                    float((e[:, t] ** 2).sum()),
                ]
        return sums


def regression_metrics(options, sums: Sequence[float], counts: Dict[str, int]) -> Dict[str, float]:
    """``{split}_rmse``, ``{split}_mae`` and ``{split}_r2`` from the summed evaluation figures."""
    width = len(sums) // len(SPLITS)
    targets = (width - 3) // 4
    record: Dict[str, float] = {}
    for i, split in enumerate(SPLITS):
        n, abs_err, sq_err, *per_target = sums[i * width : (i + 1) * width]
        r2 = []
        for t in range(targets):
            nt, sy, syy, sse = per_target[4 * t : 4 * t + 4]
            sst = syy - sy * sy / max(1.0, nt)
            r2.append(1.0 - sse / sst if sst > 0 else float("nan"))
        record[f"{split}_rmse"] = (sq_err / max(1.0, n)) ** 0.5
        record[f"{split}_mae"] = abs_err / max(1.0, n)
        record[f"{split}_r2"] = sum(r2) / max(1, len(r2))
    return record


def plan(options, sizes: TaskSizes) -> TaskPlan:
    if sizes.num_targets < 1:
        raise PlanError(
            "task",
            "the dataset has no regression targets.",
            "ingest your graph with --targets FILE, or use a generated graph with "
            "dataset.regression_targets=1",
        )
    return TaskPlan(
        details={
            "targets": sizes.num_targets,
            "standardised": bool(options.standardize),
            "metrics": "RMSE, MAE, R² per split, in the targets' units",
        }
    )


NODE_REGRESSION = register_task(
    TaskSpec(
        name="node_regression",
        options=NodeRegressionConfig,
        output_width=lambda options, classes, hidden, targets: targets,
        prepare_data=prepare_data,
        plan=plan,
        rank_task=lambda options, payload, rows: NodeRegressionRank(payload, rows),
        metrics=regression_metrics,
        headline="rmse",
        description="mean squared error over standardised targets; RMSE, MAE and R² per split",
    )
)
