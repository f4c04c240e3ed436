"""Where each rank's shard comes from (docs/design.md#partition-store).

Modes with ``part_store`` (partition, supergcn, mop, hongtu) train from the partition store: one
process builds every part once (load the graph, the mode's ``prepare``, write), under the store's
lock, and each rank then opens only its own part. The launcher does not keep the graph while the
ranks train, and under torchrun or srun no rank loads the graph when the store is already there.
``single`` and ``hyscale`` need the whole graph in their ranks and prepare it in memory as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from gnntrain.data import load_dataset
from gnntrain.launch.forkserver import launched_externally
from gnntrain.modes import mode_spec
from gnntrain.modes.base import Prepared, RankShard
from gnntrain.modes.store_key import store_folder, uses_part_store
from gnntrain.partition import store
from gnntrain.tasks import configured_task

log = logging.getLogger(__name__)


def uses_store(plan) -> bool:
    return uses_part_store(mode_spec(plan.mode), plan.world_size)


_STORES: Dict[
    int, Tuple[Any, Path]
] = {}  # id(plan) -> (the plan, kept alive so the id stays its own; its store)


def store_dir(plan) -> Path:
    """The plan's store folder (:func:`gnntrain.modes.store_key.store_folder` says what its key
    hashes), resolved once per plan object in a process: the raw files' stat walk is not
    repeated."""
    if id(plan) not in _STORES:
        _STORES[id(plan)] = (plan, store_folder(plan.config, plan.mode, plan.world_size))
    return _STORES[id(plan)][1]


def load_task_graph(cfg):
    """The dataset of the composed config ``cfg`` as its task trains on it (link prediction: the
    train edges' message-passing graph, with the split): the one place a run's graph is loaded."""
    from gnntrain.plan_types import RunSettings

    settings = RunSettings.of(cfg)
    task, options = configured_task(settings.task)
    return task.prepare_data(options, load_dataset(cfg), int(settings.train.seed))


def load_and_partition(plan, printing: bool = False):
    """(the graph, the mode's planner, the partitioning, whether it came from the cache): the one
    place that loads the graph and partitions it for the plan's mode. A mode whose prepare reads no
    partitioning gets None, unless ``printing`` (``gnntrain partition``/``plan`` print the
    configured partitioner's metrics for every mode: the plan's parts, where the mode partitions
    nothing itself)."""
    from gnntrain.modes import ModePlanner
    from gnntrain.plan import plan_mode

    data = load_task_graph(plan.config_obj)
    mode = plan_mode(plan)
    part, hit = None, False
    if printing or mode.spec.capabilities.partitions_graph:
        part, hit = mode.partition(data, plan)
    if part is None and printing:
        part, hit = ModePlanner.partition(mode, data, plan)
    return data, mode, part, hit


def prepare_in_memory(plan, ranks: Optional[Sequence[int]] = None) -> Prepared:
    """Load the graph, partition it and prepare ``ranks``' shards (all when None) in this
    process."""
    start = time.perf_counter()
    data, mode, part, hit = load_and_partition(plan)
    # loading and partitioning (the partitioner's cache, or METIS)
    load_s = time.perf_counter() - start
    return _with_graph_figures(mode.spec.prepare(mode, data, part, ranks), data, part, hit, load_s)


def _with_graph_figures(prepared: Prepared, data, part, hit: bool, load_s: float) -> Prepared:
    prepared.preprocess_s += load_s
    if part is not None:
        prepared.partition.setdefault("cache_hit", hit)
    # the graph as loaded (directed edges, before any model's self-loops), for summary.json
    prepared.partition.setdefault("graph_nodes", data.num_nodes)
    prepared.partition.setdefault("graph_edges", data.num_edges)
    prepared.partition.setdefault("dataset_hash", data.content_hash)
    return prepared


def _fields(shard: RankShard) -> Dict[str, Any]:
    return {f.name: getattr(shard, f.name) for f in dataclasses.fields(RankShard)}


def _build(plan):
    """(every part's fields, the store's figures): what ``gnntrain partition`` and the first rank
    write for a whole store (a part-wise one, :func:`part_wise`, is built by
    :class:`_PartBuilder`)."""
    prepared = prepare_in_memory(plan)
    return [_fields(shard) for shard in prepared.shards], {
        "partition": prepared.partition,
        "preprocess_s": prepared.preprocess_s,
        "mode": plan.mode,
        "dataset": plan.dataset,
        "world_size": plan.world_size,
    }


def part_wise(plan) -> bool:
    """Whether the plan's store is built part by part (:mod:`gnntrain.partition.part_wise`): a mode
    that prepares a part from the graph's CSR, on a graph that is on disk (ingested, or generated
    with ``dataset.on_disk``)."""
    from gnntrain.data.locations import graph_on_disk

    return (
        uses_store(plan)
        and graph_on_disk(plan.config["dataset"])
        and mode_spec(plan.mode).capabilities.parts_from_csr
    )


class _PartBuilder:
    """Builds parts of one plan's store in this process: the graph is loaded (memory-mapped) and
    partitioned once, on the first part asked for, under a lock beside the store so that concurrent
    builders on other hosts share one partitioning (from the partition cache)."""

    def __init__(self, plan, directory: Path):
        self.plan, self.directory = plan, Path(directory)
        self.loaded: Optional[tuple] = None

    def __call__(self, rank: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        from gnntrain.atomic import file_lock

        if self.loaded is None:
            self.directory.parent.mkdir(parents=True, exist_ok=True)
            lock = self.directory.with_name(f".{self.directory.name}.partition.lock")
            with file_lock(lock):
                self.loaded = load_and_partition(self.plan)
        data, mode, part, hit = self.loaded
        started = time.perf_counter()
        prepared = mode.spec.prepare(mode, data, part, [rank])
        _with_graph_figures(prepared, data, part, hit, 0.0)
        figures = {
            "partition": prepared.partition,
            "preprocess_s": time.perf_counter() - started,
            "mode": self.plan.mode,
            "dataset": self.plan.dataset,
            "world_size": self.plan.world_size,
        }
        return _fields(prepared.shards[0]), figures


def host_build_lock(slot: int = 0) -> Path:
    """Build slot ``slot`` of this node: a lock in the node's own temporary folder, named by the
    node's index under torchrun (``GROUP_RANK``) or SLURM (``SLURM_NODEID``), so that hosts
    emulated on one machine (``gnntrain netem``) stay apart."""
    import tempfile

    node = os.environ.get("GROUP_RANK") or os.environ.get("SLURM_NODEID") or "0"
    return Path(tempfile.gettempdir()) / f"gnntrain-part-build-node{node}-slot{slot}.lock"


def _local_rank(plan, rank: int) -> int:
    """``rank``'s index on its node: torchrun's ``LOCAL_RANK``, SLURM's ``SLURM_LOCALID``, else
    ``rank`` modulo the plan's ranks per node."""
    local = os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID")
    return int(local) if local is not None else rank % max(1, int(plan.ranks_per_node))


def _built_in_turn(plan, builder: "_PartBuilder", rank: int):
    """``builder(rank)`` holding one of the node's build slots: as many of a node's ranks build at
    once as the plan found room for (``memory_per_rank.part_builds_at_once``, counted in its node
    check, :func:`gnntrain.plan_fit.node_peak_bytes`); the others wait for their slot. A build's
    working memory is returned before the slot's next build starts."""
    from gnntrain.atomic import file_lock

    slots = max(1, int(plan.memory_per_rank.part_builds_at_once))
    with file_lock(host_build_lock(_local_rank(plan, rank) % slots)):
        return builder(rank)


def node_ranks(plan, rank: int) -> range:
    """The ranks of ``rank``'s node (:func:`_local_rank` places it)."""
    first = rank - _local_rank(plan, rank)
    return range(max(0, first), min(int(plan.world_size), first + max(1, int(plan.ranks_per_node))))


def await_node_parts(directory: Path, ranks: range, poll_s: float = 0.5) -> None:
    """Return once every part of ``ranks`` (a node's) is published. A node's ranks may build in
    turn (:func:`_built_in_turn`); without this its first rank would wait for its last at the
    process group's rendezvous, which gives up after ``comm_timeout_s``. No limit of its own: a
    rank whose build fails ends, and its launcher (torchrun's agent, srun) stops the others."""
    from gnntrain.partition.part_wise import read_part_meta

    waiting = [r for r in ranks if read_part_meta(directory, r) is None]
    if waiting:
        log.info("waiting for parts %s of this node to be built", waiting)
    while any(read_part_meta(directory, r) is None for r in waiting):
        time.sleep(poll_s)


def _open_or_build_part(plan, directory: Path, rank: int, builder: Optional[_PartBuilder] = None):
    """(part ``rank``'s fields, the store's meta where complete, else one made from the part's
    record)."""
    from gnntrain.partition.part_wise import open_or_build_part

    builder = builder or _PartBuilder(plan, directory)
    fields, record = open_or_build_part(
        directory, rank, plan.world_size, lambda: _built_in_turn(plan, builder, rank), _warn
    )
    meta = store.read_meta(directory)
    if meta is None:  # other hosts' parts are still being built
        own = sum(int(f["bytes"]) for f in record["files"].values())
        meta = dict(
            record, bytes_per_part=[own if r == rank else 0 for r in range(plan.world_size)]
        )
    return fields, meta


def ensure_store(plan) -> Tuple[Path, Dict[str, Any], float]:
    """(the store's folder, its meta, seconds this call spent building it: 0 when reused)."""
    directory = store_dir(plan)
    start = time.perf_counter()
    built = []
    if part_wise(plan):  # every part in this process, each under its own lock, the graph once
        from gnntrain.partition.part_wise import complete

        meta = store.read_meta(directory)
        if meta is None:
            builder = _PartBuilder(plan, directory)
            for rank in range(plan.world_size):
                _open_or_build_part(plan, directory, rank, builder)
            built.append(builder.loaded is not None)
            meta = complete(directory, plan.world_size)
        seconds = time.perf_counter() - start
        return directory, meta, seconds if any(built) else 0.0
    meta = store.ensure_store(directory, lambda: (built.append(True), _build(plan))[1])
    seconds = time.perf_counter() - start
    if built:
        log.info("partition store built in %.1f s: %s", seconds, directory)
    else:
        log.info("partition store hit: %s", directory)
    return directory, meta, seconds if built else 0.0


def _warn(message: str) -> None:
    log.warning(message)


def open_rank_shard(plan, rank: int) -> Tuple[RankShard, Dict[str, Any], float]:
    """(rank's shard from its own part, the partition figures, preprocessing seconds): opened from
    the store, which this call builds first when it is missing or its part is corrupt."""
    start = time.perf_counter()
    directory = store_dir(plan)
    shard, meta = open_shard(plan, directory, rank)
    partition = dict(
        meta["partition"], store=str(directory), store_bytes_per_part=meta["bytes_per_part"]
    )
    return shard, partition, float(meta.get("preprocess_s", 0.0)) + time.perf_counter() - start


def open_shard(plan, directory: Path, rank: int) -> Tuple[RankShard, Dict[str, Any]]:
    """The one way a rank opens its part, whoever started it (the local launcher, torchrun, srun):
    from the store at ``directory``, built first (under its lock) when missing or corrupt; a
    part-wise store (:func:`part_wise`) builds only this rank's part."""
    if part_wise(plan):
        meta = store.read_meta(Path(directory))
        if meta is not None:
            # a corrupt part: reported and rebuilt alone below, from its own record
            with contextlib.suppress(store.StoreError):
                return RankShard(**store.open_part(Path(directory), rank, meta)), meta
        fields, meta = _open_or_build_part(plan, Path(directory), rank)
        if launched_externally():  # one rank per process (the local launcher built every part)
            await_node_parts(Path(directory), node_ranks(plan, rank))
        return RankShard(**fields), meta
    fields, meta = store.open_or_build(Path(directory), rank, lambda: _build(plan), _warn)
    return RankShard(**fields), meta


@dataclass(frozen=True)
class ShardSource:
    """What a spawned rank gets: its shard, or where to open it (a path, never the graph)."""

    # {rank: shard} prepared in memory (modes that need the whole graph in their ranks, one rank)
    shards: Optional[Dict[int, RankShard]] = None
    store: Optional[str] = None

    def shard(self, plan, rank: int) -> Tuple[RankShard, Optional[Dict[str, Any]]]:
        if self.shards is not None:
            return self.shards[rank], None
        return open_shard(plan, Path(self.store), rank)


def shard_source(plan, rank: Optional[int] = None) -> Tuple[ShardSource, Dict[str, Any], float]:
    """(what the ranks open, the partition figures, preprocessing seconds): the one place that
    chooses between the partition store and preparing in this process.

    Store modes (:func:`uses_store`): the launcher (``rank`` None) builds or reuses the store, so
    neither it nor a rank holds more than its part while training; an externally launched rank
    (``rank`` given) opens its own part, building the store first under its lock. Other modes
    prepare every rank's shard here, or ``rank``'s alone."""
    if uses_store(plan) and rank is None:
        directory, meta, build_s = ensure_store(plan)
        partition = dict(
            meta["partition"],
            store=str(directory),
            store_bytes_per_part=meta["bytes_per_part"],
            store_hit=build_s == 0.0,
        )
        return ShardSource(store=str(directory)), partition, build_s  # 0 s when reused
    if uses_store(plan):
        shard, partition, seconds = open_rank_shard(plan, rank)
        return ShardSource(shards={rank: shard}), partition, seconds
    ranks = None if rank is None else [rank]
    prepared = prepare_in_memory(plan, ranks)
    shards = dict(zip(ranks or range(plan.world_size), prepared.shards))
    return ShardSource(shards=shards), prepared.partition, prepared.preprocess_s
