"""The plan side of a mode (:class:`ModePlanner`) and what a mode hands its ranks
(:class:`RankShard`, :class:`Prepared`).

A mode is registered as a :class:`~gnntrain.modes.spec.ModeSpec` (gnntrain/modes/spec.py): its name,
options dataclass, capabilities, planner class, ``prepare`` function and ``strategy`` factory. It
reads its own options and the run's typed settings (:class:`~gnntrain.plan_types.RunSettings`),
never the composed config, and takes part in three stages:

1. **plan** (no processes yet): the planner's :meth:`ModePlanner.world_size`,
:meth:`ModePlanner.validate`
   and :meth:`ModePlanner.estimate` see only sizes (a :class:`~gnntrain.plan_types.PlanContext`);
2. **prepare** (launcher process, or each rank under torchrun/srun): ``spec.prepare`` turns the
   loaded :class:`GraphData` into one :class:`RankShard` of plain tensors (and the mode's typed
   payload) per rank;
3. **train** (in each rank): ``spec.strategy`` builds the rank's
   :class:`~gnntrain.modes.strategy.RankStrategy`, which the one epoch loop runs.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import torch

from gnntrain.errors import PlanError
from gnntrain.modes.cost import (
    CommEstimate,
    CostProfile,
    Details,
    Estimate,
    Prediction,
    Work,
    local_work,
    price_estimate,
)
from gnntrain.plan_types import MemoryEstimate, PlanContext, RunPlan, RunSettings, typed_section
from gnntrain.sizing import PART_LOAD_BYTES_PER_NODE, estimate_memory, halo_rows
from gnntrain.tasks import SPLITS

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.data.graph import GraphData
    from gnntrain.partition import Partitioning


@dataclass
class RankShard:
    """What one rank holds, as plain tensors: no DGL needed to train from it.

    ``count_masks`` select the held rows whose loss/accuracy this rank counts (replicas of a row
    count it once). ``edges`` are (dst, src, weight) in an index space the mode defines; ``payload``
    is the mode's own typed layout data: a dataclass, registered with
    :func:`~gnntrain.partition.store.store_record` where the mode trains from the partition store.
    """

    rank: int
    world_size: int
    num_global_nodes: int
    num_classes: int
    features: torch.Tensor
    labels: torch.Tensor
    count_masks: Dict[str, torch.Tensor]
    global_counts: Dict[str, int]
    global_ids: torch.Tensor
    edges: Sequence[torch.Tensor]
    payload: Any = None
    # rows whose label is an input (label propagation)
    label_input_mask: Optional[torch.Tensor] = None
    # what the run's task needs on this rank (link prediction's edges to score), or None
    task: Any = None
    # this rank counts its rows' loss and metrics (False: a replica another rank counts)
    counted: bool = True


@dataclass
class Prepared:
    shards: List[RankShard]
    partition: Dict[str, Any]  # summary.json "partition" block
    preprocess_s: float = 0.0


class ShardBuilder:
    """What every mode's prepare shares: the clock, the split counts over the whole graph, one
    :class:`RankShard` per rank from the rows it holds, and the summary's partition block."""

    def __init__(
        self, data: "GraphData", world_size: int, masks: Optional[Dict[str, torch.Tensor]] = None
    ):
        self.start = time.perf_counter()
        self.data, self.world_size = data, world_size
        # a mode may hold some rows out (SuperGCN)
        self.masks = dict(data.masks if masks is None else masks)
        self.counts = {s: int(self.masks[s].sum()) for s in SPLITS}

    def shard(
        self,
        rank: int,
        rows: Optional[torch.Tensor],
        edges,
        payload: Any = None,
        counted: bool = True,
        label_input_mask: Optional[torch.Tensor] = None,
    ) -> RankShard:
        """Rank ``rank`` holding the global rows ``rows`` (None: every row, in order); ``counted``:
        this rank counts its rows' loss and accuracy (one replica of a row does)."""
        data, masks = self.data, self.masks
        if rows is None:
            features, labels, ids, held = (
                data.features,
                data.labels,
                torch.arange(data.num_nodes),
                dict(masks),
            )
        else:
            features, labels, ids = data.features[rows], data.labels[rows], rows
            held = {
                s: masks[s][rows] if counted else torch.zeros(rows.numel(), dtype=torch.bool)
                for s in SPLITS
            }
        return RankShard(
            rank=rank,
            world_size=self.world_size,
            num_global_nodes=data.num_nodes,
            num_classes=data.num_classes,
            features=features,
            labels=labels,
            count_masks=held,
            global_counts=self.counts,
            global_ids=ids,
            edges=edges,
            payload=payload,
            label_input_mask=label_input_mask,
            task=None if data.task_data is None else data.task_data.shard_payload(rows, counted),
            counted=counted,
        )

    def prepared(
        self,
        shards: List[RankShard],
        part: Optional["Partitioning"] = None,
        partitioner: str = "",
        **figures: Any,
    ) -> Prepared:
        """The shards, with the summary's partition block: the parts and, where ``part`` is given,
        its cut and volumes (else none: one part, or a layout without halos), then the mode's
        ``figures``; the seconds since this builder started."""
        m = part.metrics if part is not None else None
        block: Dict[str, Any] = {
            "num_parts": figures.pop("num_parts", 1),
            "edge_cut": m.edge_cut if m else 0,
            "total_volume": m.total_volume if m else 0,
            "max_send_volume": m.max_send_volume if m else 0,
        }
        if partitioner:
            block["partitioner"] = partitioner
        block.update(figures)
        return Prepared(
            shards=shards, partition=block, preprocess_s=time.perf_counter() - self.start
        )


class ModePlanner:
    """A mode at plan time, configured: its options and the run's settings, and the cost model that
    sees only sizes (world size, parts, validation, memory, work, bytes, exactness), plus the
    figures that need the graph (:meth:`graph_report`). ``spec`` is the registered
    :class:`~gnntrain.modes.spec.ModeSpec` (capabilities, prepare, strategy) it was built from."""

    def __init__(self, spec: Any, options, settings: RunSettings):
        # the gnntrain.modes.spec.ModeSpec it was built from (spec imports this module)
        self.spec = spec
        self.options = typed_section(spec.options, options, "mode")  # this mode's own section
        # the run's typed settings: model, train, hardware, partitioner, dataset
        self.settings = settings

    @property
    def world(self) -> int:
        """The run's world size: this mode's :meth:`world_size` of the profile's nodes x ranks per
        node (what the plan validated)."""
        hardware = self.settings.hardware
        return self.world_size(int(hardware.nodes) * int(hardware.ranks_per_node))

    # ------------------------------------------------------------- planning
    def world_size(self, hardware_world_size: int) -> int:
        return hardware_world_size

    def num_parts(self, world_size: int) -> int:
        return world_size

    def memory_remedy(self, ctx: PlanContext) -> str:
        """The first fix a refusal for host memory names, before the ones every plan has (more
        nodes, a smaller dataset, a bigger profile): a mode whose own disk tier is spent already
        points at HongTu's vertex tables on disk."""
        return "use mode=hongtu with mode.host_budget=<bytes> (vertex tables on the disk tier)"

    def resolved_options(self, ctx: PlanContext) -> Dict[str, Any]:
        """Options this mode resolves from the estimate at plan time (written into the plan's
        config, so every process that rebuilds the mode from the plan sees the resolved value, as
        with kernel=auto)."""
        return {}

    @property
    def host_ranks(self) -> Optional[int]:
        """How many leading ranks compute on the host on a CUDA profile, where the mode mixes host
        and device ranks; None: every rank takes a GPU (the plan places them:
        :func:`gnntrain.sizing.place_ranks`)."""
        return None

    def rank_threads(
        self, rank_devices: Tuple[str, ...], ranks_per_node: int, cores: int
    ) -> Tuple[int, ...]:
        """Intra-op threads per rank: the host's cores shared evenly by the ranks of a node. Where
        CPU ranks run beside GPU ranks (HyScale's trainers, MoA's aggregation ranks), each GPU rank
        keeps one core to feed its device and the CPU ranks, which compute on the host, share the
        rest."""
        gpu = [d.startswith("cuda") for d in rank_devices]
        cpu_ranks = len(gpu) - sum(gpu)
        if not any(gpu) or not cpu_ranks:
            return tuple(max(1, cores // max(1, ranks_per_node)) for _ in rank_devices)
        cpu_share = max(1, (cores - sum(gpu)) // cpu_ranks)
        return tuple(1 if g else cpu_share for g in gpu)

    @property
    def aggregate_first(self) -> Optional[bool]:
        """GCN/SAGE layer order this mode trains with (None: per layer, aggregate unless
        narrowing)."""
        return None

    def validate(self, ctx: PlanContext) -> List[str]:
        """Raise PlanError for impossible plans; return warnings."""
        return []

    def estimate_memory(self, ctx: PlanContext) -> MemoryEstimate:
        """Bytes per rank; by default a rank holds 1/num_parts of the rows and of the edges."""
        return estimate_memory(ctx, self.num_parts(ctx.world_size))

    # bytes of the working set per in-edge of a part while a rank builds it from the mapped CSR
    # (the modes with Capabilities.parts_from_csr set it, measured: see their cost.py)
    PART_BUILD_BYTES_PER_EDGE = 0

    def part_build_bytes(self, ctx: PlanContext) -> int:
        """Beyond the process, the peak of building one part of a part-wise store from the graph's
        CSR on disk (gnntrain/launch/shards.py: as many of a node's ranks at once as fit), before
        training; 0 where the run builds no part that way (one rank, a graph in memory, a mode
        that prepares from the whole graph)."""
        from gnntrain.data.locations import graph_on_disk

        parts = self.num_parts(ctx.world_size)
        if parts < 2 or not self.spec.capabilities.parts_from_csr:
            return 0
        if not graph_on_disk(self.settings.dataset):
            return 0
        per_part = (ctx.num_edges + ctx.num_nodes) / parts  # its rows' in-edges and self-loops
        return int(
            PART_LOAD_BYTES_PER_NODE * ctx.num_nodes + self.PART_BUILD_BYTES_PER_EDGE * per_part
        )

    def estimate_comm(self, ctx: PlanContext) -> Optional[CommEstimate]:
        return None

    def require_rows_per_part(self, ctx: PlanContext) -> None:
        """Refuse a partitioning with more parts than the graph has nodes."""
        parts = self.num_parts(ctx.world_size)
        if parts > ctx.num_nodes:
            raise PlanError(
                "world size",
                f"{parts} parts for a graph of {ctx.num_nodes} nodes.",
                "use fewer ranks than nodes",
            )

    def details(self, ctx: PlanContext) -> Details:
        """Mode-specific lines for the printed plan: a frozen dataclass of the mode's own
        (:class:`~gnntrain.modes.cost.Details`); none by default."""
        return Details()

    # ------------------------------------------------------------ cost model
    def is_exact(self) -> bool:
        return True

    def work(self, ctx: PlanContext) -> Work:
        """The busiest rank's epoch (:class:`~gnntrain.modes.cost.Work`). Default: a 1D row
        partition, 1/p of the rows and edges, one all-to-all of the halo rows
        (:func:`~gnntrain.sizing.halo_rows`) per layer forward and per layer with a gradient
        backward, one all-reduce of the parameters."""
        p = self.num_parts(ctx.world_size)
        rows, edges = ctx.num_nodes / p, (ctx.num_edges + ctx.num_nodes) / p
        work = local_work(ctx, rows, edges)
        if ctx.world_size > 1:
            halo = halo_rows(ctx, int(rows), p) * ctx.dtype_bytes
            exchanged = [halo * w for w in ctx.comm_widths] + [halo * w for w in ctx.grad_widths]
            work.collectives += [("alltoall", b) for b in exchanged] + [
                ("allreduce", ctx.param_bytes)
            ]
            # packing what is sent, placing what arrives
            work.gathered_elements += 2 * sum(exchanged) / ctx.dtype_bytes
        return work

    def estimate(self, ctx: PlanContext) -> Estimate:
        """The one estimate of a plan: memory per rank, the busiest rank's work, bytes by kind and
        exactness, from this mode's hooks (:meth:`estimate_memory`, :meth:`work`,
        :meth:`estimate_comm`)."""
        memory = self.estimate_memory(ctx)
        return Estimate(
            memory=dataclasses.replace(memory, part_build_bytes=self.part_build_bytes(ctx)),
            work=self.work(ctx),
            comm=self.estimate_comm(ctx),
            exact=self.is_exact(),
            world_size=ctx.world_size,
        )

    def predict(self, ctx: PlanContext, cost: CostProfile) -> Prediction:
        """:meth:`estimate` priced at this host's measured ``cost``
        (:func:`~gnntrain.modes.cost.price_estimate`)."""
        return price_estimate(self.estimate(ctx), cost, self.spec.name)

    def graph_report(self, data: "GraphData", part, plan: RunPlan) -> Optional[Dict[str, Any]]:
        """Plan figures that need the graph and its partitioning (``gnntrain plan``/``partition``
        print them); None when the mode has none."""
        return None

    def streams_parts(self, data: "GraphData") -> bool:
        """Whether :func:`prepare` builds a part from the graph's CSR, in memory proportional to
        that part (``ranks=[r]``), instead of from the whole graph's edge lists (the default)."""
        return False

    # ------------------------------------------------------------ partition
    def partition(self, data: "GraphData", plan: RunPlan) -> Tuple[Optional["Partitioning"], bool]:
        """(the graph's partitioning into ``plan.num_parts`` parts, whether it came from the cache),
        made once per process upstream of :meth:`prepare` (``gnntrain partition`` prints it)."""
        from gnntrain.data import cache_folder
        from gnntrain.partition import partition_graph, reads_csr

        cfg = self.settings.partitioner
        csr = getattr(data, "csr", None)
        # streamed from the CSR: no edge lists
        symmetric = bool(getattr(data, "symmetric", False))
        if csr is not None and reads_csr(cfg, symmetric):
            return partition_graph(
                None,
                None,
                data.num_nodes,
                plan.num_parts,
                cfg,
                data.content_hash,
                cache_folder(self.settings.cache_dir),
                csr=csr,
                symmetric=symmetric,
            )
        return partition_graph(
            data.src.numpy(),
            data.dst.numpy(),
            data.num_nodes,
            plan.num_parts,
            cfg,
            data.content_hash,
            cache_folder(self.settings.cache_dir),
        )
