"""``mode=hongtu``: planning, layout choice, prepare and train (the Mode protocol)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from gnntrain.comm.accounting import NOT_TRAFFIC
from gnntrain.data import cache_folder
from gnntrain.errors import PlanError
from gnntrain.models.registry import ModelFamily, model_family
from gnntrain.modes.base import CommEstimate, ModePlanner, Prepared, RankShard, ShardBuilder
from gnntrain.modes.cost import Work, local_work
from gnntrain.modes.hongtu import direct as direct_path
from gnntrain.modes.hongtu.config import DEDUP, REORGANIZE_VERSION, HongTuConfig, parse_bytes
from gnntrain.modes.hongtu.cost import bandwidths, batch_bytes, chunk_working_bytes, cost_model
from gnntrain.modes.hongtu.payload import DirectPayload, HongTuPayload
from gnntrain.modes.hongtu.schedule import disk_traffic, epoch_traffic
from gnntrain.modes.hongtu.strategy import HongTuStrategy
from gnntrain.modes.hongtu.tiers import DISK, assign_tiers, check_free_space, disk_bytes_needed
from gnntrain.modes.single import graph_tensors
from gnntrain.modes.spec import Capabilities, ModeSpec, register_mode
from gnntrain.partition import partitioner_options
from gnntrain.partition.cache import PartitionCache, cache_key
from gnntrain.partition.chunks import (
    ChunkLayout,
    chunk_layout,
    identity_batches,
    reorganize,
    transfer_volumes,
)
from gnntrain.plan_types import MemoryEstimate
from gnntrain.sizing import DTYPE_BYTES, estimate_memory, format_bytes, host_memory_bytes


class HongTuPlanner(ModePlanner):
    @property
    def dedup(self) -> str:
        return str(self.options.dedup)

    @property
    def direct(self) -> bool:
        """mode.direct: one CPU rank reads neighbour rows in place
        (gnntrain.modes.hongtu.direct)."""
        return bool(getattr(self.options, "direct", False))

    @property
    def family(self) -> ModelFamily:
        """The configured model's family: what HongTu caches and recomputes depends on it."""
        return model_family(self.settings.model.name, self.settings.model.target)

    def host_budget(self, ctx=None) -> Optional[int]:
        """mode.host_budget in bytes. Unset, at plan time (``ctx``): what the profile's host memory
        leaves
        a rank after everything but its vertex tables, or None where everything fits (no disk tier).
        The plan writes the value it resolved into its config (:meth:`resolved_options`)."""
        if self.options.host_budget not in (None, ""):
            return parse_bytes(self.options.host_budget, "mode.host_budget")
        if ctx is None:
            return None
        host = host_memory_bytes(self.settings.hardware) // max(
            1, int(self.settings.hardware.ranks_per_node)
        )
        everything = self._memory(ctx, None).total_bytes
        if everything <= host:
            return None
        every_table = self.planned_tiers(ctx, 0)[1]  # a budget of 0: every table's bytes on disk
        return max(0, host - (everything - every_table))

    def resolved_options(self, ctx) -> Dict[str, Any]:
        budget = self.host_budget(ctx)
        return (
            {}
            if budget is None or self.options.host_budget not in (None, "")
            else {"host_budget": str(budget)}
        )

    def disk_folder(self) -> Path:
        """Where the disk tier's scratch files go: mode.disk_dir, else <cache_dir>/disk-tier."""
        if self.options.disk_dir:
            return Path(self.options.disk_dir).expanduser()
        return cache_folder(self.settings.cache_dir) / "disk-tier"

    def tiers(
        self, rows: int, dims: Sequence[int], dtype_bytes: int, budget: Optional[int]
    ) -> Dict[str, str]:
        return assign_tiers(rows, dims, self.family.elementwise, dtype_bytes, budget)

    def planned_tiers(self, ctx, budget: Optional[int]) -> Tuple[Dict[str, str], int]:
        """(table -> tier, file bytes) of a rank of ceil(N/m) rows, before the partition is
        known."""
        rows = -(-ctx.num_nodes // ctx.world_size)
        tiers = self.tiers(rows, ctx.dims, ctx.dtype_bytes, budget)
        return tiers, disk_bytes_needed(rows, ctx.dims, tiers, ctx.dtype_bytes)

    def device_cap(self) -> int:
        """mode.device_memory, else the hardware profile's device memory; 0 = no cap."""
        if self.options.device_memory not in (None, "", 0):
            return parse_bytes(self.options.device_memory)
        return int(float(self.settings.hardware.device_memory_gb or 0) * 2**30)

    @property
    def aggregate_first(self) -> Optional[bool]:
        return True  # a chunk aggregates its input rows, then applies the weights on the device

    def estimate_memory(self, ctx) -> MemoryEstimate:
        return self._memory(ctx, self.host_budget(ctx))

    def _memory(self, ctx, budget: Optional[int]) -> MemoryEstimate:
        """Host memory per rank: HongTu keeps every layer's activations, their gradients and the
        cached aggregates in host memory (§4.1), a full copy of each rather than autograd's working
        set, plus the device arena, which lives in host memory too on a CPU profile. Tables on the
        disk
        tier (mode.host_budget) leave host memory: their bytes come off the activations."""
        if self.direct:
            return direct_path.direct_memory(
                ctx, self.planned_tiers(ctx, budget)[0], int(self.options.chunks)
            )
        base = estimate_memory(ctx, self.num_parts(ctx.world_size), activation_factor=2.0)
        if budget is not None:
            on_disk = self.planned_tiers(ctx, budget)[1]
            base = dataclasses.replace(
                base, activation_bytes=max(0, base.activation_bytes - on_disk)
            )
        on_host = self.settings.device == "cpu"
        arena = self.device_cap() if on_host else 0
        if (
            on_host and not arena
        ):  # no cap: the arena holds a batch's working set (chunk_working_bytes, unchunked)
            m, n = ctx.world_size, max(1, int(self.options.chunks) or 4)
            degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
            rows = ctx.num_nodes // (m * n)
            arena = batch_bytes(
                rows,
                int(rows * degree),
                self._resident_rows(ctx),
                m,
                self.family,
                ctx.dims,
                ctx.dtype_bytes,
                ctx.param_bytes,
                self.dedup,
            )
        return dataclasses.replace(base, activation_bytes=base.activation_bytes + arena)

    def validate(self, ctx) -> List[str]:
        if self.dedup not in DEDUP:
            raise PlanError(
                "mode.dedup",
                f"unknown deduplication '{self.dedup}'.",
                f"use one of {', '.join(DEDUP)}",
            )
        n = int(self.options.chunks)
        if n < 0:
            raise PlanError(
                "mode.chunks",
                f"{n} chunks per partition.",
                "use n >= 1, or 0 to pick n automatically",
            )
        self.require_rows_per_part(ctx)
        rows_per_part = ctx.num_nodes // ctx.world_size
        if n > rows_per_part:
            raise PlanError(
                "mode.chunks",
                f"{n} chunks per partition, but a partition has about {rows_per_part} "
                "rows and every chunk needs one.",
                f"use mode.chunks <= {rows_per_part}",
            )
        budget = self.host_budget(ctx)
        if budget is not None:  # the disk tier: every rank's files on this node's disk, checked now
            needed = self.planned_tiers(ctx, budget)[1]
            if needed:
                check_free_space(self.disk_folder(), needed * ctx.world_size)
        if self.direct:
            self._check_direct(ctx)
        cap = self.device_cap()
        floor = 5 * ctx.param_bytes + 4 * max(ctx.dims) * ctx.dtype_bytes
        if cap and cap < floor:
            raise PlanError(
                "mode.device_memory",
                f"{format_bytes(cap)} cannot hold even the parameters and one "
                f"row of the widest layer ({format_bytes(floor)} at the least).",
                f"set mode.device_memory to at least {format_bytes(floor)}",
            )
        return []

    def _check_direct(self, ctx) -> None:
        from gnntrain.models._native import native_problem

        model = self.settings.model.name
        problem = (
            f"the plan has {ctx.world_size} ranks"
            if ctx.world_size != 1
            else f"device={self.settings.device}"
            if self.settings.device != "cpu"
            else f"model={model} is not a built-in elementwise aggregation"
            if model == "custom" or not self.family.elementwise
            else native_problem()
        )
        if problem:
            raise PlanError(
                "mode.direct",
                f"the direct path runs one rank on a CPU device with a built-in GCN, SAGE "
                f"or GIN and the native kernel, but {problem}.",
                "use one rank (hardware.ranks_per_node=1) on a CPU profile, or drop "
                "mode.direct=true "
                "(the gathering engine runs every other plan)",
            )

    def partition(self, data, plan):
        if (
            self.direct
        ):  # one part in the graph's own order: no partitioner, the edges are never read
            return direct_path.whole_graph_partitioning(data.num_nodes), False
        return super().partition(data, plan)

    def _direct_figures(self, data, plan) -> Tuple[Dict[str, Any], list]:
        chunks = direct_path.chunk_ranges(data.num_nodes, int(self.options.chunks))
        dims, b = self.model_dims(data), DTYPE_BYTES[plan.dtype]
        budget = self.host_budget()
        tiers = self.tiers(data.num_nodes, dims, b, budget)
        return direct_path.direct_figures(
            data.num_nodes,
            chunks,
            dims,
            tiers,
            self.family.self_row,
            b,
            budget,
            str(self.disk_folder()),
        ), chunks

    def _resident_rows(self, ctx) -> int:
        """In-neighbour rows of a chunk before chunking is known: chunk rows x degree, at most N."""
        m, n = ctx.world_size, max(1, int(self.options.chunks) or 4)
        degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
        return int(min(ctx.num_nodes, ctx.num_nodes / m / n * degree))

    def work(self, ctx) -> Work:
        """HongTu §4-§5 on one rank's partition of n chunks: every chunk loads its in-neighbour rows
        to the
        device per layer (forward) and sends their gradients back (backward), and the update is
        recomputed
        in backward. Rows per chunk before chunking: min(N, chunk rows x degree); p2p divides the
        host loads
        among the m ranks, reuse removes about what consecutive chunks share (1/n of them)."""
        m, n = ctx.world_size, max(1, int(self.options.chunks) or 4)
        rows = ctx.num_nodes / m
        work = local_work(ctx, rows, (ctx.num_edges + ctx.num_nodes) / m)
        degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
        loaded = n * min(ctx.num_nodes, rows / n * degree)
        if "p2p" in self.dedup:
            loaded /= m
        if "reuse" in self.dedup:
            loaded *= 1 - 1 / (n + 1)
        moved = loaded * (sum(ctx.comm_widths) + sum(ctx.grad_widths)) * ctx.dtype_bytes
        on_host = self.settings.device == "cpu"
        # rows picked from (or added into) the host copies
        work.gathered_elements += moved / ctx.dtype_bytes
        if not on_host:
            work.h2d_bytes += moved
        work.gemms += [
            (rows * d_in * d_out, min(d_in, d_out))
            for d_in, d_out in zip(ctx.dims[:-1], ctx.dims[1:])
        ]
        work.layers *= 2 * n  # forward and the recomputing backward, chunk by chunk
        if (
            m > 1
            # per layer and batch: one row exchange forward, and backward the recompute's and the
            # gradients'
        ):
            layers = len(ctx.dims) - 1
            calls = 3 * layers * n - n
            work.collectives += [("alltoall", moved * (m - 1) / m / calls)] * calls
            work.collectives.append(("allreduce", ctx.param_bytes))
        return work

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        by_kind = {"allreduce": ctx.world_size * ctx.param_bytes} if ctx.world_size > 1 else {}
        return CommEstimate(
            None,
            by_kind,
            "h2d/d2h/peer bytes follow from the chunks' sweeps: known once the "
            "graph is chunked (gnntrain plan prints them per kind)",
        )

    def details(self, ctx) -> Dict[str, Any]:
        if self.direct:
            chunks = int(self.options.chunks)
            return {
                "path": "direct: one CPU rank, neighbour rows read in place, topology sliced from "
                "the CSR",
                "chunks": chunks or "auto",
                "rows per chunk": None if chunks else direct_path.ROWS_PER_CHUNK,
                "vertex tables": self._tiers(ctx),
                "recompute": "update only; aggregation cached",
            }
        cap = self.device_cap()
        return {
            "chunks per partition": int(self.options.chunks) or "auto (smallest n that fits)",
            "dedup": self.dedup,
            "reorganize": bool(self.options.reorganize),
            "device memory bytes": cap if cap else "no cap (accounted only)",
            "vertex tables": self._tiers(ctx),
            "recompute": (
                "whole layer (attention)"
                if not ctx.elementwise
                else "update only; aggregation cached on host"
            ),
        }

    def _tiers(self, ctx) -> Any:
        """Where the vertex tables live: host memory, or the disk tier's tables, bytes and
        folder."""
        budget = self.host_budget(ctx)
        if budget is None:
            return "host memory (they fit)"
        tiers, needed = self.planned_tiers(ctx, budget)
        return {
            "host budget bytes": budget,
            "on disk": [name for name, tier in tiers.items() if tier == DISK],
            "disk bytes per rank": needed,
            "folder": str(self.disk_folder()),
        }

    # ------------------------------------------------------------ layout
    def _edges(self, data, part):
        src, dst, w = graph_tensors(data, self.settings)
        inverse = torch.from_numpy(part.inverse)
        src_n, dst_n = inverse[src], inverse[dst]
        order = torch.argsort(dst_n * data.num_nodes + src_n)
        return src_n[order], dst_n[order], w[order]

    def choose_layout(self, data, part, plan) -> Dict[str, Any]:
        """Chunks (given or automatic), batches (reorganized or identity) and their figures."""
        src_n, dst_n, weights = self._edges(data, part)
        src_np, dst_np = src_n.numpy(), dst_n.numpy()
        ctx_dims = self.model_dims(data)
        b = DTYPE_BYTES[plan.dtype]
        pbytes = self.model_shape(ctx_dims, b).param_bytes
        cap = self.device_cap()
        max_n = int(np.diff(part.offsets).min())
        n = int(self.options.chunks)
        tried: List[Tuple[int, int]] = []
        if n == 0:
            n = 1
            while True:
                layout = chunk_layout(src_np, dst_np, part.offsets, n)
                need = chunk_working_bytes(layout, self.family, ctx_dims, b, pbytes, self.dedup)
                tried.append((n, need))
                if not cap or need <= cap or n >= max_n:
                    break
                n = min(max_n, n * 2)
        else:
            if n > max_n:
                raise PlanError(
                    "mode.chunks",
                    f"{n} chunks per partition, but the smallest partition has {max_n} "
                    "rows and every chunk needs one.",
                    f"use mode.chunks <= {max_n}",
                )
            layout = chunk_layout(src_np, dst_np, part.offsets, n)
            need = chunk_working_bytes(layout, self.family, ctx_dims, b, pbytes, self.dedup)
        if cap and need > cap:
            floor_layout = (
                layout
                if layout.chunks_per_part == max_n
                else chunk_layout(src_np, dst_np, part.offsets, max_n)
            )
            floor = chunk_working_bytes(floor_layout, self.family, ctx_dims, b, pbytes, self.dedup)
            if floor > cap:
                raise PlanError(
                    "mode.device_memory",
                    f"{format_bytes(cap)} is too small for even one chunk of the "
                    f"largest layer: the smallest working set ({max_n} chunks per partition) needs "
                    f"{format_bytes(floor)}.",
                    f"set mode.device_memory to at least {format_bytes(floor)}, or use more ranks",
                )
            raise PlanError(
                "mode.chunks",
                f"{n} chunks per partition need about {format_bytes(need)} of device "
                f"memory, over mode.device_memory {format_bytes(cap)}.",
                "use more chunks, or mode.chunks=0 to pick n",
            )
        identity = identity_batches(layout.num_parts, layout.chunks_per_part)
        batches, hit = identity, None
        if bool(self.options.reorganize):
            batches, hit = self._reorganized(layout, data, part, plan)
        rows = int(np.diff(part.offsets).max())
        return {
            "layout": layout,
            "batches": batches,
            "identity": identity,
            "device_bytes": need,
            "cap": cap,
            "tiers": self.tiers(rows, ctx_dims, b, self.host_budget()),
            "tier_rows": rows,
            "tried": tried,
            "dims": ctx_dims,
            "dtype_bytes": b,
            "reorganize_cache_hit": hit,
            "edges": (src_n, dst_n, weights),
        }

    def _reorganized(self, layout: ChunkLayout, data, part, plan) -> Tuple[np.ndarray, bool]:
        """Algorithm 4 once per graph, partitioning and n: cached beside the partition."""
        options = {
            "partitioner": partitioner_options(self.settings.partitioner),
            "hongtu_batches": int(layout.chunks_per_part),
            "self_loop": bool(self.settings.model.self_loop),
            "algorithm": REORGANIZE_VERSION,
        }
        key = cache_key(data.content_hash, options, layout.num_parts)
        arrays, _, hit = PartitionCache(
            cache_folder(self.settings.cache_dir), arrays=("batches",)
        ).get_or_build(key, lambda: ({"batches": reorganize(layout)}, {"k": layout.num_parts}))
        return arrays["batches"].astype(np.int64), hit

    def figures(self, chosen: Dict[str, Any]) -> Dict[str, Any]:
        """Volumes, cost model and memory for the plan printout and the run summary."""
        layout, batches = chosen["layout"], chosen["batches"]
        volumes = transfer_volumes(layout, batches)
        row_bytes = sum(chosen["dims"][:-1]) * chosen["dtype_bytes"]  # one row through every layer
        bw = bandwidths(self.settings.hardware)
        out = {
            "chunks_per_part": layout.chunks_per_part,
            "batches": int(batches.shape[0]),
            "chunk_offsets": layout.offsets.tolist(),
            "batch_order": batches.tolist(),
            "dedup": self.dedup,
            "rows_per_layer": volumes,
            "cost_model_fwd": cost_model(volumes, row_bytes, bw),
            "estimated_device_bytes": int(chosen["device_bytes"]),
            "device_memory_cap": int(chosen["cap"]),
        }
        if bool(self.options.reorganize):
            out["rows_per_layer_identity_order"] = transfer_volumes(layout, chosen["identity"])
        tiers = chosen["tiers"]
        on_disk = {name for name, tier in tiers.items() if tier == DISK}
        out["tiers"] = {
            "host_budget": self.host_budget(),
            "tables": tiers,
            "disk_dir": str(self.disk_folder()) if on_disk else None,
            "disk_bytes_per_rank": disk_bytes_needed(
                chosen["tier_rows"], chosen["dims"], tiers, chosen["dtype_bytes"]
            ),
            "predicted_disk_bytes_per_epoch": disk_traffic(
                layout,
                batches,
                self.dedup,
                self.family,
                list(chosen["dims"]),
                chosen["dtype_bytes"],
                on_disk,
                self.input_kept,
            ),
        }
        if chosen["tried"]:
            out["auto_chunks_tried"] = [
                {"chunks": n, "device_bytes": int(b)} for n, b in chosen["tried"]
            ]
        return out

    @property
    def input_kept(self) -> bool:
        """Steady epochs read the first layer's A·x kept from the first
        (train.cache_input_aggregation)."""
        return (
            bool(self.settings.train.cache_input_aggregation)
            and self.settings.model.name != "custom"
            and self.family.elementwise
        )

    def graph_report(self, data, part, plan) -> Optional[Dict[str, Any]]:
        if self.direct:
            figures = self._direct_figures(data, plan)[0]
            report: Dict[str, Any] = {
                "path": "direct: the SpMM reads neighbour rows in place, each chunk's "
                "topology a slice of the CSR",
                "chunks": figures["chunks_per_part"],
                "rows per chunk": figures["rows_per_chunk"],
            }
            tiers = figures["tiers"]
            if tiers["disk_dir"] is not None:
                predicted = tiers["predicted_disk_bytes_per_epoch"]
                report["disk tier"] = {
                    "tables": [n for n, t in tiers["tables"].items() if t == DISK],
                    "folder": tiers["disk_dir"],
                    "file bytes per rank": tiers["disk_bytes_per_rank"],
                    "read per epoch": predicted["disk_read"],
                    "written per epoch": predicted["disk_write"],
                }
            return report
        chosen = self.choose_layout(data, part, plan)
        figures = self.figures(chosen)
        v = figures["rows_per_layer"]
        report: Dict[str, Any] = {
            "chunks per partition": figures["chunks_per_part"],
            "V_ori / V_p2p / V_ru rows per layer": {
                "V_ori": v["ori"],
                "V_p2p": v["p2p"],
                "V_ru": v["ru"],
            },
            "host->device rows per layer (this dedup)": _rows_for(self.dedup, v),
            "peer rows per layer (measured form)": v[
                "peer_p2p_reuse" if self.dedup == "p2p+reuse" else "peer_p2p"
            ]
            if "p2p" in self.dedup
            else 0,
        }
        if "rows_per_layer_identity_order" in figures:
            ident = figures["rows_per_layer_identity_order"]
            report["identity order V_ori / V_p2p / V_ru"] = {
                "V_ori": ident["ori"],
                "V_p2p": ident["p2p"],
                "V_ru": ident["ru"],
            }
        c = figures["cost_model_fwd"]
        report[
            "cost model C (one forward pass)"
        ] = {  # C = V_ru/T_hd + (V_ori-V_p2p)/T_dd + (V_p2p-V_ru)/T_ru
            "C ms": c["C_s"] * 1e3,
            "V_ru/T_hd ms": c["host_to_device_s"] * 1e3,
            "(V_ori-V_p2p)/T_dd ms": c["peer_s"] * 1e3,
            "(V_p2p-V_ru)/T_ru ms": c["reuse_s"] * 1e3,
        }
        traffic = epoch_traffic(
            chosen["layout"],
            chosen["batches"],
            self.dedup,
            self.family,
            list(chosen["dims"]),
            chosen["dtype_bytes"],
            self.input_kept,
        )
        bytes_by_kind = {k: v for k, v in traffic.items() if v}
        bytes_by_kind.update(
            {"allreduce": int(plan.comm_per_epoch["by_kind"].get("allreduce", 0))}
            if plan.world_size > 1
            else {}
        )
        report["bytes per epoch"] = {
            **bytes_by_kind,
            "total": sum(v for k, v in bytes_by_kind.items() if k not in NOT_TRAFFIC),
        }
        tiers = figures["tiers"]
        if tiers["disk_dir"] is not None:
            on_disk = [name for name, tier in tiers["tables"].items() if tier == DISK]
            predicted = tiers["predicted_disk_bytes_per_epoch"]
            report["disk tier"] = {
                "tables": on_disk,
                "folder": tiers["disk_dir"],
                "file bytes per rank": tiers["disk_bytes_per_rank"],
                "read per epoch": predicted["disk_read"],
                "written per epoch": predicted["disk_write"],
            }
        cap = figures["device_memory_cap"]
        report["estimated peak device bytes"] = figures["estimated_device_bytes"]
        report["device memory cap bytes"] = cap if cap else "no cap"
        if "auto_chunks_tried" in figures:
            report["auto chunks tried"] = {
                f"n={t['chunks']} device bytes": t["device_bytes"]
                for t in figures["auto_chunks_tried"]
            }
        return report


def _rows_for(dedup: str, volumes: Dict[str, int]) -> int:
    return {
        "none": volumes["ori"],
        "p2p": volumes["p2p"],
        "reuse": volumes["reuse"],
        "p2p+reuse": volumes["ru"],
    }[dedup]


def prepare_direct(mode: HongTuPlanner, data, plan) -> Prepared:
    """The direct path's one rank: the graph in its own order, read in place (no edge lists)."""
    builder = ShardBuilder(data, 1)
    figures, chunks = mode._direct_figures(data, plan)
    graph = direct_path.direct_graph(
        data, bool(mode.settings.model.self_loop), mode.family.normalization
    )
    shard = builder.shard(0, None, None, DirectPayload(graph, chunks, figures))
    return builder.prepared(
        [shard],
        partitioner="none (mode.direct: one rank, the graph's own order)",
        chunks_per_part=len(chunks),
        reorganize_cache_hit=None,
        num_edges=graph.num_edges,
    )


def prepare(
    mode: HongTuPlanner, data, plan, part, ranks: Optional[Sequence[int]] = None
) -> Prepared:
    """Rank r: its partition's rows and in-edges, and the chunk layout every rank shares (§4-§5)."""
    if mode.direct:
        return prepare_direct(mode, data, plan)
    builder = ShardBuilder(data, plan.world_size)
    chosen = mode.choose_layout(data, part, plan)
    src_n, dst_n, w = chosen["edges"]
    layout: ChunkLayout = chosen["layout"]
    perm = torch.from_numpy(part.perm)
    offsets = part.offsets
    figures = mode.figures(chosen)
    shards = []
    for rank in range(plan.world_size) if ranks is None else ranks:
        lo, hi = int(offsets[rank]), int(offsets[rank + 1])
        e_lo, e_hi = (int(x) for x in torch.searchsorted(dst_n, torch.tensor([lo, hi])))
        edges = (dst_n[e_lo:e_hi], src_n[e_lo:e_hi], w[e_lo:e_hi])
        shards.append(
            builder.shard(
                rank, perm[lo:hi], edges, HongTuPayload(layout, chosen["batches"], figures)
            )
        )
    return builder.prepared(
        shards,
        part,
        mode.settings.partitioner.name,
        num_parts=plan.world_size,
        chunks_per_part=layout.chunks_per_part,
        reorganize_cache_hit=chosen["reorganize_cache_hit"],
        num_edges=int(src_n.numel()),
    )


def strategy(mode: HongTuPlanner, shard: RankShard, ctx):
    if isinstance(shard.payload, DirectPayload):
        return direct_path.DirectStrategy(shard, ctx, mode.settings, mode.aggregate_first)
    return HongTuStrategy(shard, ctx, mode.settings, mode.dedup, mode.aggregate_first)


HONGTU = register_mode(
    ModeSpec(
        name="hongtu",
        options=HongTuConfig,
        planner=HongTuPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            # attention layers are recomputed whole (the engine's GAT path)
            needs_elementwise=False,
            min_world_size=1,  # one rank offloading to its device is HongTu's first use (§4)
            auto_variants=({"dedup": "p2p+reuse"}, {"dedup": "none"}),
        ),
    )
)
