"""A mode as a frozen spec of typed parts (torchtitan's ``TrainSpec``: builders registered once).

:class:`ModeSpec` is everything the rest of gnntrain knows of a mode:

* ``name`` and ``options`` (the options dataclass ``configs/mode/<name>.yaml`` extends);
* ``capabilities``: what it hosts and how it runs (:class:`Capabilities`);
* ``planner``: the plan side, a :class:`~gnntrain.modes.base.ModePlanner` subclass (cost model and
  the figures that need the graph), built by :meth:`ModeSpec.plan` from the options and the run's
  settings. It is the mode's cost model and lives in ``gnntrain/modes/<name>/cost.py``:
  ``validate`` refuses a plan or returns its warnings, and ``estimate_memory``, ``work``,
  ``estimate_comm`` and ``details`` return dataclasses
  (:class:`~gnntrain.plan_types.MemoryEstimate`, :class:`~gnntrain.modes.cost.Work`,
  :class:`~gnntrain.modes.cost.CommEstimate`, the mode's :class:`~gnntrain.modes.cost.Details`),
  which :meth:`~gnntrain.modes.base.ModePlanner.estimate` gathers into one
  :class:`~gnntrain.modes.cost.Estimate` (details aside);
* ``prepare(planner, data, part, ranks)``: one :class:`~gnntrain.modes.base.RankShard` (with
  the mode's typed payload) per rank;
* ``strategy(planner, shard, ctx, model, optimizer)``: the rank's
  :class:`~gnntrain.modes.strategy.RankStrategy` around the model and optimizer the epoch loop built
  (:func:`~gnntrain.modes.strategy.build_training`);
* ``select(options)``: where the options choose a variant with parts of its own (HongTu's direct
  path), that variant's spec.

A new mode is one package, ``gnntrain/modes/<name>/``, whose planner is in its ``cost.py`` and one
of whose modules calls :func:`register_mode` with its spec, plus one YAML.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple, Type

from gnntrain.config.schema import ModeConfig
from gnntrain.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.models.registry import ModelFamily
    from gnntrain.modes.base import ModePlanner, Prepared, RankShard
    from gnntrain.modes.strategy import RankStrategy
    from gnntrain.plan_types import RunSettings


@dataclass(frozen=True)
class Layout:
    """One way a mode's options lay it out over ranks: ``ranks`` and the option overrides."""

    ranks: int
    options: Tuple[Tuple[str, Any], ...] = ()

    def overrides(self) -> List[str]:
        """As ``mode.<option>=<value>`` overrides, with ``hardware.ranks_per_node`` first."""
        return [f"hardware.ranks_per_node={self.ranks}"] + [
            f"mode.{key}={value}" for key, value in self.options
        ]


@dataclass(frozen=True)
class Capabilities:
    """What a mode hosts and how it runs, read by the plan, ``mode=auto`` and the launcher."""

    # a model's aggregation must be a weighted sum of rows (no attention)
    needs_elementwise: bool = True
    # ... and follow the built-in layer protocol (a user's custom layer does not)
    needs_restructurable: bool = True
    models_rule: str = ""  # why other models are refused, for the plan's message
    # each rank opens only its own part from the partition store; False: the mode needs the whole
    # graph in every rank (single holds it by definition, HyScale samples from all of it), said by
    # whole_graph_reason
    part_store: bool = True
    whole_graph_reason: str = ""
    # prepare reads a partitioning of the graph (partition, SuperGCN, HongTu, MoP)
    partitions_graph: bool = True
    # prepare builds one part alone from a graph's CSR (ranks=[r]): the store of a graph on disk
    # is then built part by part, each host its own parts (gnntrain/partition/part_wise.py)
    parts_from_csr: bool = False
    # why the mode cannot aggregate with the user's edge weights (model.edge_weight=true), or ""
    edge_weight_refusal: str = ""
    min_world_size: int = 2  # below it the mode is mode=single with overhead; mode=auto skips it
    # the tasks it hosts (gnntrain/tasks), empty: every task (a full-graph strategy hands any task
    # its output rows); tasks_rule says why others are refused
    tasks: Tuple[str, ...] = ()
    tasks_rule: str = ""
    auto_variants: Tuple[Mapping[str, Any], ...] = ({},)  # mode=auto's option overrides to try
    # the distinct layouts that reproduce mode=single exactly (1D and 1.5D, a pipeline, chunks): a
    # property every exact layout must keep (test_exactness's layer norm) is checked in each
    exact_layouts: Tuple[Layout, ...] = ()

    def refuses(self, family: "ModelFamily") -> Optional[str]:
        """Why a mode with these capabilities cannot host ``family`` (one line for the plan), or
        None."""
        if self.needs_elementwise and not family.elementwise:
            return f"its aggregation is not a weighted sum of rows ({family.name} uses attention)"
        if self.needs_restructurable and not family.restructurable:
            return (
                "a custom layer is hosted only by the modes that exchange what its aggregate "
                "hands them"
            )
        return None


# (planner, graph, partitioning, ranks): the planner holds the options, settings and world size
PrepareFn = Callable[["ModePlanner", Any, Any, Optional[Sequence[int]]], "Prepared"]
# (planner, shard, rank context, model, optimizer): the model and optimizer are the epoch loop's
StrategyFn = Callable[["ModePlanner", "RankShard", Any, Any, Any], "RankStrategy"]


@dataclass(frozen=True)
class ModeSpec:
    """One registered mode (see the module docstring)."""

    name: str
    options: Type[ModeConfig]
    capabilities: Capabilities
    planner: Type["ModePlanner"]
    prepare: PrepareFn
    strategy: StrategyFn
    # a variant of this mode that its options choose (HongTu's direct path: mode.direct=true), or
    # None
    select: Optional[Callable[[Any], Optional["ModeSpec"]]] = None

    def plan(self, options: Any, settings: "RunSettings") -> "ModePlanner":
        """The planner for this mode's ``options`` section and the run's ``settings``: of the
        variant the options select, where they select one."""
        from gnntrain.plan_types import typed_section

        chosen = self.select(typed_section(self.options, options, "mode")) if self.select else None
        spec = chosen or self
        return spec.planner(spec, options, settings)


MODE_REGISTRY: Registry[ModeSpec] = Registry("mode")


def register_mode(spec: ModeSpec) -> ModeSpec:
    """Add ``spec`` to the registry (a second mode under a taken name is refused) and its options
    schema to Hydra's ConfigStore as ``mode/<name>_schema`` (what ``configs/mode/<name>.yaml``
    extends)."""
    from hydra.core.config_store import ConfigStore

    MODE_REGISTRY.add(spec.name, spec)
    ConfigStore.instance().store(group="mode", name=f"{spec.name}_schema", node=spec.options)
    return spec


def mode_spec(name: str) -> ModeSpec:
    """The registered mode ``name``; one PlanError naming the modes there are otherwise."""
    return MODE_REGISTRY.require(name, "mode")
