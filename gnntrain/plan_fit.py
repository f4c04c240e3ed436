"""What the plan chooses so that a run fits its host, and the checks that refuse one that cannot:
the partitioner behind ``partitioner=auto`` (:mod:`gnntrain.partition.choice`), where a generated
graph is built (``dataset.on_disk``, :mod:`gnntrain.data.generated_store`), and the host-memory
checks whose refusals name the options that would fit."""

from __future__ import annotations

import copy
import dataclasses
from typing import Optional, Tuple

from omegaconf import DictConfig, open_dict, read_write

from gnntrain.errors import PlanError
from gnntrain.plan_types import MemoryEstimate
from gnntrain.sizing import PROCESS_BYTES, format_bytes, host_memory_bytes, launcher_bytes


def resolve_partitioner(cfg: DictConfig, n: int, e: int) -> Tuple[DictConfig, str]:
    """(the config with ``partitioner=auto`` made the partitioner that fits this host, why): the
    modes, the partition cache and the store key only ever see the chosen name
    (:mod:`gnntrain.partition.choice`)."""
    from gnntrain.partition.choice import choose_partitioner

    if str(cfg.partitioner.name) != "auto":
        return cfg, ""
    choice = choose_partitioner(n, e, host_memory_bytes(cfg.hardware))
    cfg = copy.deepcopy(cfg)
    with read_write(cfg), open_dict(cfg):
        cfg.partitioner.name = choice.name
    return cfg, choice.note


def check_partitioner_memory(pcfg, n: int, e: int, hw) -> None:
    """A named partitioner whose estimated peak exceeds the host's memory is refused, with the one
    that fits named (:func:`gnntrain.partition.choice.partitioner_peak_bytes`)."""
    from gnntrain.partition.choice import partitioner_peak_bytes

    if str(pcfg.name) not in ("metis", "volume"):
        return  # the others hold O(N) or a compressed graph: the plan's own memory check binds
    need, host = partitioner_peak_bytes(str(pcfg.name), n, e), host_memory_bytes(hw)
    if need > host:
        lean = partitioner_peak_bytes("kaminpar", n, e)
        fix = (
            f"use partitioner=kaminpar (about {format_bytes(lean)}) or partitioner=auto"
            if lean <= host
            else "use partitioner=ldg (one part id per node)"
        )
        raise PlanError(
            "partitioner",
            f"partitioner={pcfg.name} needs about {format_bytes(need)} for {n} nodes and {e} "
            f"edges, more than the host's {format_bytes(host)}.",
            fix,
        )


def builds_at_once(memory: MemoryEstimate, ranks_per_node: int, world: int, host: int) -> int:
    """How many ranks of a node build their parts of the store at once (gnntrain/launch/shards.py
    takes as many build slots): as many builds as fit beside the node's ranks and the process that
    started them, at least one, at most one per rank."""
    if not memory.part_build_bytes:
        return max(1, ranks_per_node)
    room = host - launcher_bytes(world) - ranks_per_node * memory.process_bytes
    return int(max(1, min(ranks_per_node, room // memory.part_build_bytes)))


def store_builds(
    memory: MemoryEstimate, config, spec, ranks_per_node: int, world: int, host: int
) -> MemoryEstimate:
    """``memory`` with the plan's builds of its partition store: as many at once per node as fit
    (:func:`builds_at_once`), and none counted where the store is already complete (``gnntrain
    partition`` or an earlier run built it: no rank builds, so the node check counts training
    alone). The build slots stay as sized: a part found corrupt is rebuilt in one of them.
    ``config``: the plan's resolved config, which names the store (:mod:`gnntrain.modes.store_key`).
    """
    from gnntrain.modes.store_key import store_complete, uses_part_store

    builds = builds_at_once(memory, ranks_per_node, world, host)
    memory = dataclasses.replace(memory, part_builds_at_once=builds)
    if memory.part_build_bytes and uses_part_store(spec, world):
        if store_complete(config, spec.name, world):
            memory = dataclasses.replace(memory, part_build_bytes=0)
    return memory


def node_peak_bytes(memory: MemoryEstimate, ranks_per_node: int, world: int) -> Tuple[int, str]:
    """(a node's peak under the plan, when): its ranks training, or its ranks (imported, waiting)
    while ``memory.part_builds_at_once`` of them build their parts of the store, whichever is
    higher; beside them, with several ranks, the process that started them."""
    training = ranks_per_node * memory.training_bytes + launcher_bytes(world)
    building = (
        ranks_per_node * memory.process_bytes
        + memory.part_builds_at_once * memory.part_build_bytes
        + launcher_bytes(world)
    )
    if building > training:
        return building, "while a rank builds its part of the store"
    return training, "training"


def check_host_memory(node_bytes: int, hw, dataset: str, remedy: str, when: str = "") -> None:
    """One PlanError where the estimate per node exceeds the profile's host memory; its fix is the
    mode's own ``remedy`` first (:meth:`~gnntrain.modes.ModePlanner.memory_remedy`: the disk tier
    where the mode has it left), then the remedies every plan has. ``when``: the phase that peaks
    (:func:`node_peak_bytes`), named unless it is training."""
    host_mem = host_memory_bytes(hw)
    if node_bytes <= host_mem:
        return
    rest = "more nodes, a smaller dataset, or a profile with more memory"
    phase = f" {when}" if when and when != "training" else ""
    raise PlanError(
        "dataset/hardware",
        f"estimated {format_bytes(node_bytes)} per node{phase} for {dataset} does not fit the "
        f"profile's {format_bytes(host_mem)} host memory.",
        f"{remedy}, {rest}" if remedy else f"use {rest}",
    )


def resolve_generated_storage(
    cfg: DictConfig, n: int, e: int, f: int
) -> Tuple[DictConfig, int, str]:
    """(the config with a generated graph's ``dataset.on_disk`` decided, the bytes its construction
    takes in this process (0 on disk), why). ``on_disk: null`` becomes true where generating the
    graph whole in memory would not fit the host beside the interpreter: the loader then writes it
    to the cache folder block by block and trains on its mapped CSR."""
    from gnntrain.data.generated_store import construction_bytes, generated_folder

    ds = cfg.dataset
    if ds.get("source") != "generated":
        return cfg, 0, ""
    in_memory = construction_bytes(n, e, f) + PROCESS_BYTES
    on_disk = ds.get("on_disk")
    note = ""
    if on_disk is None:
        on_disk = in_memory > host_memory_bytes(cfg.hardware)
        cfg = copy.deepcopy(cfg)
        with read_write(cfg), open_dict(cfg):
            cfg.dataset.on_disk = bool(on_disk)
        if on_disk:
            note = (
                f"generated on disk in {generated_folder(cfg)}, block by block: in memory it "
                f"would take about {format_bytes(in_memory)} of the host's "
                f"{format_bytes(host_memory_bytes(cfg.hardware))}"
            )
    elif on_disk:
        note = f"generated on disk in {generated_folder(cfg)} (dataset.on_disk=true)"
    return cfg, 0 if on_disk else in_memory, note


def known_partition(cfg: DictConfig, spec, num_parts: int):
    """The volumes of the partitioning this plan's run would make, where an earlier run or
    ``gnntrain partition`` left it in the cache; the dataset's content hash is read without loading
    the graph (an ingested folder's meta, a generated graph's parameters). None otherwise."""
    from gnntrain.data import cache_folder
    from gnntrain.partition import known_metrics

    if num_parts < 2 or not spec.capabilities.partitions_graph:
        return None
    content = _content_hash(cfg)
    if content is None:
        return None
    return known_metrics(cfg.partitioner, content, num_parts, cache_folder(cfg.get("cache_dir")))


def _content_hash(cfg: DictConfig) -> Optional[str]:
    """The dataset's content hash where it is known without loading the graph, else None."""
    from gnntrain.data.generated_store import generated_folder
    from gnntrain.data.generators import content_hash
    from gnntrain.data.locations import resolve_graph_path
    from gnntrain.data.ondisk import is_graph_dir, open_graph_dir
    from gnntrain.errors import DatasetError

    ds = cfg.dataset
    try:
        if ds.get("source") == "files":
            return open_graph_dir(resolve_graph_path(cfg)).content_hash
        if ds.get("source") == "generated":
            if ds.get("on_disk"):
                folder = generated_folder(cfg)
                return open_graph_dir(folder).content_hash if is_graph_dir(folder) else None
            return content_hash(str(ds.name), ds)
    except (DatasetError, OSError):
        return None
    return None


def hosted_task(cfg: DictConfig, spec):
    """(the task's spec, its typed options) for a mode that can host the task; one PlanError naming
    the modes that do otherwise (:attr:`gnntrain.modes.Capabilities.tasks`)."""
    from gnntrain.modes import MODE_REGISTRY
    from gnntrain.plan_types import plain_section
    from gnntrain.tasks import configured_task

    task, options = configured_task(plain_section(cfg.task) if cfg.get("task") else None)
    can = spec.capabilities
    if can.tasks and task.name not in can.tasks:
        hosts = [n for n, s in sorted(MODE_REGISTRY.items()) if not s.capabilities.tasks]
        raise PlanError(
            "task",
            f"mode '{spec.name}' cannot host task '{task.name}': {can.tasks_rule}.",
            f"use one of {', '.join(hosts)}",
        )
    return task, options


def with_task_plan(comm: Optional[dict], details: dict, task_plan) -> Optional[dict]:
    """The plan's communication estimate with the task's bytes added by kind, and the task's lines
    in the plan's details (under "task"); None stays None where the task adds nothing."""
    if task_plan.details:
        details["task"] = dict(task_plan.details)
    if not task_plan.comm_by_kind:
        return comm
    comm = dict(comm or {"per_epoch_bytes": 0, "by_kind": {}, "formula": ""})
    comm["by_kind"] = {**comm["by_kind"], **task_plan.comm_by_kind}
    comm["per_epoch_bytes"] = int(comm["per_epoch_bytes"] or 0) + sum(
        task_plan.comm_by_kind.values()
    )
    return comm
