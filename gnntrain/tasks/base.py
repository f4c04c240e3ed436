"""What a run learns: the ``task`` config group (``task=node_classification`` by default,
``task=node_regression``, ``task=link_prediction``).

A task is registered as a :class:`TaskSpec`: its name, options dataclass (``task/<name>_schema``,
what ``configs/task/<name>.yaml`` extends) and three functions, one per stage of a run:

1. **data** (after the dataset loads, before partitioning): :attr:`TaskSpec.prepare_data` turns the
   loaded graph into the task's graph (link prediction holds the validation and test edges out of
   the message-passing graph) and checks that the dataset can serve the task (regression targets);
2. **shard** (each mode's prepare, :class:`~gnntrain.modes.base.ShardBuilder`): the task's graph
   carries ``task_data`` whose ``shard_payload(rows, counted)`` cuts what a rank needs to score its
   own rows (its edges to score, its targets), so that no mode names a task;
3. **rank** (the full-graph strategy of every exact mode): :attr:`TaskSpec.rank_task` builds the
   :class:`RankTask` that turns the model's output rows into a loss and evaluation sums.

The conventions that keep every exact mode equal to ``mode=single`` hold for every task: a rank's
loss is the sum over the items it counts divided by the global count, and evaluation figures are
sums over ranks (docs/design.md, "Exactness").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import torch

from gnntrain.registry import Registry


@dataclass
class TaskConfig:
    """The options every task has (``task.<key>``); a task's schema extends it."""

    name: str = "node_classification"


@dataclass
class RankRows:
    """What a rank's strategy holds that its task reads: the rows the mode's output has, in order,
    and where they live."""

    global_ids: torch.Tensor  # the global node id of each output row
    labels: torch.Tensor  # on the output's device
    masks: Dict[str, torch.Tensor]  # the rows this rank counts, per split
    global_counts: Dict[str, int]  # rows per split over all ranks
    counted: bool  # this rank counts its rows (one replica of a row does)
    num_nodes: int  # the graph's
    device: torch.device  # where the output rows are
    dtype: torch.dtype  # the run's
    comm: Any  # the rank's Communicator
    model: torch.nn.Module  # the epoch loop's (a task's own head is a submodule of it)
    seed: int  # train.seed


class RankTask:
    """One rank's side of a task: the model's output rows (the rows this rank's mode holds, in its
    order) to a loss and to evaluation sums. Built once per rank, after the mode's strategy."""

    def backward(self, out: torch.Tensor, epoch: int) -> float:
        """Run the backward pass of this rank's share of the loss through ``out`` (every rank calls
        it: a mode's backward is a collective) and return that share (Σ over the items this rank
        counts / the global count)."""
        raise NotImplementedError

    def eval_sums(self, out: torch.Tensor, epoch: int) -> List[float]:
        """This rank's evaluation sums (no grad), summed over ranks by the epoch loop and turned
        into metrics by :attr:`TaskSpec.metrics`."""
        raise NotImplementedError

    def values(self, out: torch.Tensor) -> Optional[torch.Tensor]:
        """``gnntrain predict --what values``: the output rows in the task's own units (a
        regression's targets), or None where the task has none."""
        return None

    def card(self) -> Dict[str, Any]:
        """What ``model.yaml`` records for a model of this task beyond its config (node
        regression's standardisation)."""
        return {}


@dataclass(frozen=True)
class TaskSizes:
    """What a task's plan sees: the graph's and the model's sizes, before anything loads."""

    num_nodes: int
    num_edges: int  # directed, reverse edges included
    output_width: int  # the GNN's output (the embedding width for link prediction)
    world_size: int
    dtype_bytes: int
    num_targets: int = 0  # real-valued targets per node the dataset has


@dataclass(frozen=True)
class TaskPlan:
    """A task's part of the run plan: its lines (values; the printer formats them, keys ending in
    " bytes" get units) and the bytes per epoch it adds, by accounting kind."""

    details: Dict[str, Any] = field(default_factory=dict)
    comm_by_kind: Dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    """One registered task (see the module docstring)."""

    name: str
    options: Type[TaskConfig]
    # (options, dataset classes, model.hidden, dataset regression targets) -> the model's output
    # width
    output_width: Callable[[Any, int, int, int], int]
    # (options, loaded GraphData, train seed) -> the task's GraphData (may be the same object)
    prepare_data: Callable[[Any, Any, int], Any]
    # (options, the shard's task payload, RankRows) -> RankTask
    rank_task: Callable[[Any, Any, RankRows], RankTask]
    # (options, summed eval sums, global split counts) -> {"<split>_<metric>": value}
    metrics: Callable[[Any, Sequence[float], Dict[str, int]], Dict[str, float]]
    # (options, the GNN's output width, seed, dtype) -> the task's own trained head (a decoder), or
    # None; the epoch loop adds it to the model as ``model.head``, so it is trained, synchronised,
    # checkpointed and exported with the GNN
    head: Callable[[Any, int, int, torch.dtype], Optional[torch.nn.Module]] = lambda *a: None
    # (options, TaskSizes) -> the task's plan (one PlanError for an impossible option)
    plan: Callable[[Any, TaskSizes], TaskPlan] = lambda options, sizes: TaskPlan()
    # the metric the progress line and mode=auto's notes show, per split ("acc", "auc", "rmse")
    headline: str = "acc"
    description: str = ""


TASK_REGISTRY: Registry[TaskSpec] = Registry("task")


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add ``spec`` to the registry and its options schema to Hydra's ConfigStore as
    ``task/<name>_schema`` (what ``configs/task/<name>.yaml`` extends)."""
    from hydra.core.config_store import ConfigStore

    TASK_REGISTRY.add(spec.name, spec)
    ConfigStore.instance().store(group="task", name=f"{spec.name}_schema", node=spec.options)
    return spec


def task_spec(name: str) -> TaskSpec:
    """The registered task ``name``; one PlanError naming the tasks there are otherwise."""
    return TASK_REGISTRY.require(name, "task")


def configured_task(section: Optional[Mapping[str, Any]]) -> Tuple[TaskSpec, Any]:
    """(the spec, its typed options) of a config's ``task`` section (:attr:`RunSettings.task`;
    None: the default task, node classification)."""
    from gnntrain.plan_types import typed_section

    section = dict(section or {"name": "node_classification"})
    spec = task_spec(str(section.get("name", "node_classification")))
    return spec, typed_section(spec.options, section, "task")
