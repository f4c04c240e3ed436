"""Plan-time sizes: what a run needs from the config alone, before any data is loaded.

The lowest layer above the config schema and the plan's types (:mod:`gnntrain.plan_types`).
Modes, models and the plan builder read it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from types import SimpleNamespace
from typing import List, Optional, Tuple

from gnntrain.plan_types import MemoryEstimate, PlanContext

DTYPE_BYTES = {"float32": 4, "float64": 8}


# ------------------------------------------------------------------ units
def format_bytes(n: Optional[float]) -> str:
    """Bytes in binary units, the one formatter of every printed size ("—" when unknown)."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


# ------------------------------------------------------------------ host
def host_cores(hw) -> int:
    return int(hw.cores_per_node) or (os.cpu_count() or 1)


def host_memory_bytes(hw) -> int:
    if float(hw.host_memory_gb) > 0:
        return int(float(hw.host_memory_gb) * 2**30)
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # pragma: no cover
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


# ----------------------------------------------------------------- graph
# ----------------------------------------------------------------- model
def place_ranks(
    device: str,
    world_size: int,
    ranks_per_node: int,
    gpus_per_node: Optional[int],
    host_ranks: Optional[int] = None,
) -> Tuple[str, ...]:
    """The device of each rank. On a CPU profile every rank computes on the host. On a CUDA profile
    rank r takes GPU r mod ``ranks_per_node``, unless the mode puts its first ``host_ranks`` ranks
    on the host (HyScale's CPU trainers, MoA's aggregation ranks: ``ModePlanner.host_ranks``); the
    others then take the node's ``gpus_per_node`` GPUs in turn."""
    if device != "cuda":
        return tuple("cpu" for _ in range(world_size))
    if host_ranks is None:
        return tuple(f"cuda:{r % ranks_per_node}" for r in range(world_size))
    gpus = max(1, int(gpus_per_node or 1))
    return tuple(
        "cpu" if r < host_ranks else f"cuda:{(r - host_ranks) % gpus}" for r in range(world_size)
    )


def model_dims(in_dim: int, hidden: int, out_dim: int, layers: int) -> List[int]:
    """Feature width before each layer and after the last: [F, h, ..., h, C]."""
    return [int(in_dim)] + [int(hidden)] * (int(layers) - 1) + [int(out_dim)]


def aggregates_first(
    linear: bool, d_in: int, d_out: int, preference: Optional[bool] = None
) -> bool:
    """Whether a layer aggregates its input (width d_in) before its weights apply.

    A ``linear`` layer (GCN, SAGE: aggregation and weights commute) may swap the order;
    ``preference`` None is DGL's rule (aggregate unless the layer narrows). Other layers always
    aggregate their input.
    """
    if not linear:
        return True
    return (d_in <= d_out) if preference is None else bool(preference)


# ---------------------------------------------------------------- memory
EDGE_BYTES = 48  # src, dst, float64 weight factors and the kernel's index structure


# Calibrated against measured per-rank peaks (VmHWM): `python -m benchmarks memory`, csbm 1M nodes,
# average degree 20, f=128, 3-layer GCN hidden 128, float32 (docs/BENCHMARKS.md, "memory").
# a rank with an 8 MiB part of Cora peaks at 454 MiB: the process itself
PROCESS_BYTES = 450 * 2**20


def launcher_bytes(world_size: int) -> int:
    """The process beside a node's ranks that started them, where there are several: the local
    launcher, or torchrun's agent (one more interpreter with torch, 0.51 GiB RSS measured under
    torchrun)."""
    return PROCESS_BYTES if world_size > 1 else 0


# A rank building its part of a part-wise store from the mapped CSR (gnntrain/launch/shards.py):
# the loaded graph's per-node arrays and the partitioning's permutation, per node of the graph, plus
# the mode's own working set per in-edge of the part (ModePlanner.PART_BUILD_BYTES_PER_EDGE).
# Measured as the process's VmHWM after building part 0 of 4 beyond that after importing, on the
# communities graph at 400k and 1M nodes (19.8M and 49.8M edges, feat 128): 360 B per node.
PART_LOAD_BYTES_PER_NODE = 360
ACTIVATION_FACTOR = 1.4  # bytes kept per (row x layer width) in training, relative to one copy
HALO_FACTOR = 0.77  # received source rows held per layer, relative to one copy of them


def halo_rows(ctx: PlanContext, rows: int, num_parts: int) -> int:
    """Source rows a rank receives per layer, before the partition is known: every remote
    in-neighbour distinct, at most all the rows it does not own (what a random-like graph such as
    csbm reaches)."""
    if num_parts <= 1:
        return 0
    return int(min(ctx.num_nodes - rows, rows * ctx.num_edges / max(1, ctx.num_nodes)))


def _received(ctx: PlanContext, rows: int, num_parts: int) -> int:
    """Halo rows per layer: the cached partition's where the plan knows it, else the bound."""
    known = getattr(ctx, "received_rows", None)
    return int(known) if known is not None else halo_rows(ctx, rows, num_parts)


def estimate_memory(
    ctx: PlanContext,
    num_parts: int,
    gather_all: bool = False,
    replicated_graph: bool = False,
    activation_factor: float = ACTIVATION_FACTOR,
    receives_halo: bool = True,
) -> MemoryEstimate:
    """Per-rank bytes for a rank holding 1/num_parts of the rows.

    process: PROCESS_BYTES; graph: its in-edges (+ self-loops) x 48 B, or every edge when
    ``replicated_graph``; features: rows x F x dtype; activations: per layer ACTIVATION_FACTOR x
    rows x (input + aggregate + output width) x dtype, plus HALO_FACTOR x received source rows x
    width x dtype (all N rows when ``gather_all``, as the oblivious all-gather does, else
    :func:`halo_rows`; none unless ``receives_halo``). The factors are calibrated against measured
    peaks (see above).
    """
    rows = -(-ctx.num_nodes // num_parts)
    all_edges = ctx.num_edges + ctx.num_nodes
    edges = all_edges if replicated_graph else -(-all_edges // num_parts)
    features = rows * ctx.feat_dim * ctx.dtype_bytes
    received = (
        ctx.num_nodes if gather_all else (_received(ctx, rows, num_parts) if receives_halo else 0)
    )
    act = 0.0
    for (d_in, d_out), w in zip(zip(ctx.dims[:-1], ctx.dims[1:]), ctx.comm_widths):
        act += activation_factor * rows * (d_in + w + d_out) * ctx.dtype_bytes
        act += HALO_FACTOR * received * w * ctx.dtype_bytes
    return MemoryEstimate(
        graph_bytes=int(edges * EDGE_BYTES),
        feature_bytes=int(features),
        activation_bytes=int(act),
        process_bytes=PROCESS_BYTES,
    )


def with_measured_halo(
    estimate: MemoryEstimate,
    num_nodes: int,
    num_edges: int,
    num_parts: int,
    received_rows: int,
    widths,
    dtype_bytes: int,
    assumed_rows: Optional[int] = None,
) -> MemoryEstimate:
    """``estimate`` with its halo share of the activations recomputed from the rows a rank actually
    receives per layer (the partition's maximum receive volume) instead of the ``assumed_rows`` it
    was made with (default: :func:`halo_rows`' bound, the estimate before the partition is
    known)."""
    rows = -(-num_nodes // num_parts)
    sizes = SimpleNamespace(num_nodes=num_nodes, num_edges=num_edges)
    guessed = assumed_rows if assumed_rows is not None else halo_rows(sizes, rows, num_parts)
    delta = HALO_FACTOR * (received_rows - guessed) * sum(widths) * dtype_bytes
    return dataclasses.replace(
        estimate, activation_bytes=max(0, int(estimate.activation_bytes + delta))
    )
