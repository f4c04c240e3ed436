"""``task=node_classification`` (the default): cross-entropy over the train rows, accuracy per
split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

import torch
import torch.nn.functional as F

from gnntrain.plan_types import SPLITS
from gnntrain.tasks.base import RankRows, RankTask, TaskConfig, TaskSpec, register_task


@dataclass
class NodeClassificationConfig(TaskConfig):
    name: str = "node_classification"


class NodeClassificationRank(RankTask):
    """loss = Σ CE over the train rows this rank counts / the global train count; evaluation counts
    the correct predictions per split."""

    def __init__(self, labels: torch.Tensor, masks: Dict[str, torch.Tensor], n_train: int):
        self.labels, self.masks, self.n_train = labels, masks, max(1, n_train)

    def backward(self, out: torch.Tensor, epoch: int) -> float:
        mask = self.masks["train"]
        loss = F.cross_entropy(out[mask], self.labels[mask], reduction="sum") / self.n_train
        loss.backward()
        return float(loss.detach())

    def eval_sums(self, out: torch.Tensor, epoch: int) -> List[float]:
        pred = out.argmax(dim=1)
        return [float(((pred == self.labels) & self.masks[s]).sum()) for s in SPLITS]


def _rank_task(options, payload, rows: RankRows) -> NodeClassificationRank:
    return NodeClassificationRank(rows.labels, rows.masks, int(rows.global_counts["train"]))


def _metrics(options, sums: Sequence[float], counts: Dict[str, int]) -> Dict[str, float]:
    return {f"{s}_acc": sums[i] / max(1, counts[s]) for i, s in enumerate(SPLITS)}


NODE_CLASSIFICATION = register_task(
    TaskSpec(
        name="node_classification",
        options=NodeClassificationConfig,
        output_width=lambda options, classes, hidden, targets: classes,
        prepare_data=lambda options, data, seed: data,
        rank_task=_rank_task,
        metrics=_metrics,
        headline="acc",
        description="cross-entropy over the train rows; accuracy per split",
    )
)
