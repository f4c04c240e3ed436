"""HongTu's chunks on a loaded graph (HongTu §4-§5): the chunk layout chosen for the device budget,
the reorganised batch order (Algorithm 4, cached beside the partition), their transfer volumes and
cost model, and the figures ``gnntrain plan`` prints for them."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from gnntrain.comm.accounting import NOT_TRAFFIC
from gnntrain.data import cache_folder
from gnntrain.errors import PlanError
from gnntrain.idsets import union_ids
from gnntrain.models.registry import configured_shape, graph_dims
from gnntrain.modes.hongtu.config import REORGANIZE_VERSION
from gnntrain.modes.hongtu.schedule import disk_traffic, epoch_traffic
from gnntrain.modes.hongtu.tiers import DISK, disk_bytes_needed
from gnntrain.modes.hongtu.transfer_model import bandwidths, chunk_working_bytes, cost_model
from gnntrain.modes.row_edges import RowEdges, graph_tensors, row_edges
from gnntrain.partition import partitioner_options
from gnntrain.partition.cache import PartitionCache, cache_key
from gnntrain.partition.chunks import (
    ChunkLayout,
    chunk_layout,
    identity_batches,
    reorganize,
    transfer_volumes,
)
from gnntrain.partition.layout import split_chunks_by_work
from gnntrain.sizing import DTYPE_BYTES, format_bytes


def graph_edges(mode, data, part):
    src, dst, w = graph_tensors(data, mode.settings)
    inverse = torch.from_numpy(part.inverse)
    src_n, dst_n = inverse[src], inverse[dst]
    order = torch.argsort(dst_n * data.num_nodes + src_n)
    return src_n[order], dst_n[order], w[order]


def streamed_chunk_layout(streamed: RowEdges, part, n: int) -> ChunkLayout:
    """:func:`~gnntrain.partition.chunks.chunk_layout` from the graph's CSR, a chunk at a time:
    the same chunks (balanced by in-edges + 1, the model's self-loops counted) and neighbour sets,
    without the edge lists."""
    loop = 1 if streamed.self_loop else 0
    degree = np.diff(streamed.indptr)[part.perm] + loop  # in-edges per relabelled row
    offsets = split_chunks_by_work(part.offsets, degree + 1, n)
    bounds = np.concatenate([[0], np.cumsum(degree)])[offsets]
    inverse = part.inverse
    neighbours = []
    for c in range(offsets.size - 1):
        _, src, _ = streamed.rows(part.perm[offsets[c] : offsets[c + 1]])
        neighbours.append(union_ids(inverse[src.numpy()], np.arange(offsets[c], offsets[c + 1])))
    return ChunkLayout(
        num_parts=part.offsets.size - 1,
        chunks_per_part=n,
        part_offsets=part.offsets,
        offsets=offsets,
        neighbours=neighbours,
        edge_bounds=bounds,
    )


def rank_edges(streamed: RowEdges, part, rank: int):
    """(dst, src, weight factors) of rank ``rank``'s rows' in-edges in relabelled IDs, sorted by
    (dst, src) as :func:`graph_edges` sorts the whole graph's."""
    lo, hi = int(part.offsets[rank]), int(part.offsets[rank + 1])
    d, s, w = streamed.rows(part.perm[lo:hi])
    s = torch.from_numpy(part.inverse)[s]
    order = torch.argsort(d * streamed.num_nodes + s)
    return d[order] + lo, s[order], w[order]


# the layout last chosen from a CSR, kept for the next part's prepare of the same plan
_CHOSEN: Dict[Tuple, Dict[str, Any]] = {}


def choose_layout(mode, data, part) -> Dict[str, Any]:
    """Chunks (given or automatic), batches (reorganized or identity) and their figures. From an
    ingested graph's CSR (:meth:`HongTuPlanner.streams_parts`) the layout is read a chunk at a
    time and ``edges`` is None: each rank's come from :func:`rank_edges`; the store's build asks
    once per part, and gets the layout made for the first."""
    streamed = row_edges(data, mode.settings) if mode.streams_parts(data) else None
    if streamed is not None:
        key = (id(streamed), id(part), repr(mode.options), mode.settings.dtype, mode.world)
        if key not in _CHOSEN:
            _CHOSEN.clear()
            _CHOSEN[key] = _choose_layout(mode, data, part, streamed)
        return _CHOSEN[key]
    return _choose_layout(mode, data, part, None)


def _choose_layout(mode, data, part, streamed: Optional[RowEdges]) -> Dict[str, Any]:
    if streamed is None:
        edges = graph_edges(mode, data, part)
        src_np, dst_np = edges[0].numpy(), edges[1].numpy()

        def make_layout(n: int) -> ChunkLayout:
            return chunk_layout(src_np, dst_np, part.offsets, n)
    else:
        edges = None

        def make_layout(n: int) -> ChunkLayout:
            return streamed_chunk_layout(streamed, part, n)

    ctx_dims = graph_dims(mode.settings, data)
    b = DTYPE_BYTES[mode.settings.dtype]
    pbytes = configured_shape(mode.settings, ctx_dims, b, mode.aggregate_first).param_bytes
    cap = mode.device_cap()
    max_n = int(np.diff(part.offsets).min())
    n = int(mode.options.chunks)
    tried: List[Tuple[int, int]] = []
    if n == 0:
        n = 1
        while True:
            layout = make_layout(n)
            need = chunk_working_bytes(layout, mode.family, ctx_dims, b, pbytes, mode.dedup)
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
        layout = make_layout(n)
        need = chunk_working_bytes(layout, mode.family, ctx_dims, b, pbytes, mode.dedup)
    if cap and need > cap:
        floor_layout = layout if layout.chunks_per_part == max_n else make_layout(max_n)
        floor = chunk_working_bytes(floor_layout, mode.family, ctx_dims, b, pbytes, mode.dedup)
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
    if bool(mode.options.reorganize):
        batches, hit = reorganized(mode, layout, data, part)
    rows = int(np.diff(part.offsets).max())
    return {
        "layout": layout,
        "batches": batches,
        "identity": identity,
        "device_bytes": need,
        "cap": cap,
        "tiers": mode.tiers(rows, ctx_dims, b, mode.host_budget()),
        "tier_rows": rows,
        "tried": tried,
        "dims": ctx_dims,
        "dtype_bytes": b,
        "reorganize_cache_hit": hit,
        "edges": edges,
    }


def reorganized(mode, layout: ChunkLayout, data, part) -> Tuple[np.ndarray, bool]:
    """Algorithm 4 once per graph, partitioning and n: cached beside the partition."""
    options = {
        "partitioner": partitioner_options(mode.settings.partitioner),
        "hongtu_batches": int(layout.chunks_per_part),
        "self_loop": bool(mode.settings.model.self_loop),
        "algorithm": REORGANIZE_VERSION,
    }
    key = cache_key(data.content_hash, options, layout.num_parts)
    arrays, _, hit = PartitionCache(
        cache_folder(mode.settings.cache_dir), arrays=("batches",)
    ).get_or_build(key, lambda: ({"batches": reorganize(layout)}, {"k": layout.num_parts}))
    return arrays["batches"].astype(np.int64), hit


def layout_figures(mode, chosen: Dict[str, Any]) -> Dict[str, Any]:
    """Volumes, cost model and memory for the plan printout and the run summary."""
    layout, batches = chosen["layout"], chosen["batches"]
    volumes = transfer_volumes(layout, batches)
    row_bytes = sum(chosen["dims"][:-1]) * chosen["dtype_bytes"]  # one row through every layer
    bw = bandwidths(mode.settings.hardware)
    out = {
        "chunks_per_part": layout.chunks_per_part,
        "batches": int(batches.shape[0]),
        "chunk_offsets": layout.offsets.tolist(),
        "batch_order": batches.tolist(),
        "dedup": mode.dedup,
        "rows_per_layer": volumes,
        "cost_model_fwd": cost_model(volumes, row_bytes, bw),
        "estimated_device_bytes": int(chosen["device_bytes"]),
        "device_memory_cap": int(chosen["cap"]),
    }
    if bool(mode.options.reorganize):
        out["rows_per_layer_identity_order"] = transfer_volumes(layout, chosen["identity"])
    tiers = chosen["tiers"]
    on_disk = {name for name, tier in tiers.items() if tier == DISK}
    out["tiers"] = {
        "host_budget": mode.host_budget(),
        "tables": tiers,
        "disk_dir": str(mode.disk_folder()) if on_disk else None,
        "disk_bytes_per_rank": disk_bytes_needed(
            chosen["tier_rows"], chosen["dims"], tiers, chosen["dtype_bytes"]
        ),
        "predicted_disk_bytes_per_epoch": disk_traffic(
            layout,
            batches,
            mode.dedup,
            mode.family,
            list(chosen["dims"]),
            chosen["dtype_bytes"],
            on_disk,
            mode.input_kept,
        ),
    }
    if chosen["tried"]:
        out["auto_chunks_tried"] = [
            {"chunks": n, "device_bytes": int(b)} for n, b in chosen["tried"]
        ]
    return out


def graph_figures(mode, data, part, plan) -> Optional[Dict[str, Any]]:
    chosen = choose_layout(mode, data, part)
    figures = layout_figures(mode, chosen)
    v = figures["rows_per_layer"]
    report: Dict[str, Any] = {
        "chunks per partition": figures["chunks_per_part"],
        "V_ori / V_p2p / V_ru rows per layer": {
            "V_ori": v["ori"],
            "V_p2p": v["p2p"],
            "V_ru": v["ru"],
        },
        "host->device rows per layer (this dedup)": _rows_for(mode.dedup, v),
        "peer rows per layer (measured form)": v[
            "peer_p2p_reuse" if mode.dedup == "p2p+reuse" else "peer_p2p"
        ]
        if "p2p" in mode.dedup
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
        mode.dedup,
        mode.family,
        list(chosen["dims"]),
        chosen["dtype_bytes"],
        mode.input_kept,
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
            f"n={t['chunks']} device bytes": t["device_bytes"] for t in figures["auto_chunks_tried"]
        }
    return report


def _rows_for(dedup: str, volumes: Dict[str, int]) -> int:
    return {
        "none": volumes["ori"],
        "p2p": volumes["p2p"],
        "reuse": volumes["reuse"],
        "p2p+reuse": volumes["ru"],
    }[dedup]
