"""Plan-time sizes: what a run needs from the config alone, before any data is loaded.

The lowest layer above the config schema. Modes, models and the plan builder read it;
it imports nothing else from gnntrain. The resolved :class:`RunPlan` record lives
here too, so that the modes can read it without importing the plan builder
(:mod:`gnntrain.plan`), which sits above them.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

DTYPE_BYTES = {"float32": 4, "float64": 8}
MODELS = ("gcn", "sage", "gin", "gat")
NARROWING_MODELS = ("gcn", "sage")  # linear layers whose aggregate/update order may swap


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated bytes per rank (see :func:`estimate_memory` for the model)."""

    graph_bytes: int
    feature_bytes: int
    activation_bytes: int
    process_bytes: int = 0  # the interpreter, torch and gnntrain before any data (PROCESS_BYTES)

    @property
    def total_bytes(self) -> int:
        return self.graph_bytes + self.feature_bytes + self.activation_bytes + self.process_bytes


@dataclass(frozen=True)
class PlanContext:
    """Sizes a mode may use to validate and estimate, before any data is loaded."""

    world_size: int
    num_nodes: int
    num_edges: int
    feat_dim: int
    num_classes: int
    dtype_bytes: int
    dims: Tuple[int, ...]
    comm_widths: Tuple[int, ...]  # width each layer hands to its aggregation (what a halo carries)
    param_bytes: int
    model: str
    train_nodes: int = 0  # expected training nodes when the config implies it (generated graphs), else 0
    # comm_widths of the layers whose communicated tensor has a gradient, i.e. that move data backward too:
    # every layer but a first one that aggregates the input features, which need none (grad_widths())
    grad_widths: Tuple[int, ...] = ()


@dataclass(frozen=True)
class RunPlan:
    """The resolved, validated run plan (built by :func:`gnntrain.plan.build_plan`)."""

    mode: str
    dataset: str
    model: str
    partitioner: str
    hardware: str
    world_size: int
    nodes: int
    ranks_per_node: int
    backend: str  # gloo (CPU) | nccl (CUDA)
    device: str  # cpu | cuda
    rank_devices: Tuple[str, ...]
    threads_per_rank: int
    kernel: str  # dgl | torch (kernel=auto resolved)
    kernel_note: str  # why: "set by kernel=..." or the measured times behind auto
    dtype: str
    epochs: int
    num_parts: int
    memory_per_rank: MemoryEstimate
    comm_per_epoch: Optional[Dict[str, Any]]
    mode_details: Dict[str, Any]
    warnings: Tuple[str, ...]
    config: Dict[str, Any] = field(repr=False)
    rank_threads: Tuple[int, ...] = ()  # per rank, where the mode does not share cores evenly (HyScale on GPUs)
    reader: str = ""  # dataset.reader resolved for Planetoid/Reddit: "dgl", "pyg (auto)", ...; "" for others
    # predicted epoch time, memory and bytes (Mode.predict) where the hardware profile is calibrated
    prediction: Optional[Dict[str, Any]] = None
    auto: Optional[Dict[str, Any]] = None  # mode=auto: the ranked candidates and why others were dropped

    @cached_property
    def config_obj(self) -> DictConfig:
        """The composed config as one read-only DictConfig, built once per plan object."""
        cfg = OmegaConf.create(self.config)
        OmegaConf.set_readonly(cfg, True)
        return cfg

    def threads_of(self, rank: int) -> int:
        """Intra-op threads of ``rank``."""
        return int(self.rank_threads[rank]) if self.rank_threads else int(self.threads_per_rank)

    @property
    def plan_hash(self) -> str:
        keys = {k: self.config[k] for k in ("dataset", "model", "mode", "partitioner")}
        # dropout may change on a resume (gnntrain.checkpoint.RESUMABLE_SETTINGS); the rest of the model is pinned
        keys["model"] = {k: v for k, v in keys["model"].items() if k != "dropout"}
        keys.update(world_size=self.world_size, dtype=self.dtype, seed=self.config["train"]["seed"])
        return hashlib.sha1(json.dumps(keys, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["memory_per_rank"]["total_bytes"] = self.memory_per_rank.total_bytes
        d["rank_devices"] = list(self.rank_devices)
        d["rank_threads"] = list(self.rank_threads)
        d["warnings"] = list(self.warnings)
        d["plan_hash"] = self.plan_hash
        return d

    def write_yaml(self, path: Path) -> Path:
        path = Path(path)
        path.write_text(OmegaConf.to_yaml(OmegaConf.create(self.to_dict())))
        return path


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
def dataset_sizes(ds) -> Tuple[int, int, int, int]:
    """(nodes, directed edges incl. reverse, features, classes) from the config alone."""
    n, f, c = int(ds.num_nodes), int(ds.feat_dim), int(ds.num_classes)
    if ds.source == "generated" and ds.name == "csbm":
        e = int(round(n * float(ds.avg_degree)))
    elif ds.source == "generated":
        e = int(ds.num_edges) * (2 if ds.symmetrize else 1)
    else:
        e = int(ds.num_edges)
    return n, e, f, c


# ----------------------------------------------------------------- model
def model_dims(in_dim: int, hidden: int, out_dim: int, layers: int) -> List[int]:
    """Feature width before each layer and after the last: [F, h, ..., h, C]."""
    return [int(in_dim)] + [int(hidden)] * (int(layers) - 1) + [int(out_dim)]


def aggregates_first(model: str, d_in: int, d_out: int, preference: Optional[bool] = None) -> bool:
    """Whether a layer aggregates its input (width d_in) before its weights apply.

    GCN and SAGE are linear, so the order may swap; ``preference`` None is DGL's rule
    (aggregate unless the layer narrows). GIN and GAT always aggregate their input.
    """
    if model not in NARROWING_MODELS:
        return True
    return (d_in <= d_out) if preference is None else bool(preference)


def layer_widths(model: str, dims: Sequence[int], preference: Optional[bool] = None) -> List[int]:
    """Width each layer hands to its aggregation (``GNN.comm_widths`` of the built model)."""
    return [d_in if aggregates_first(model, d_in, d_out, preference) else d_out
            for d_in, d_out in zip(dims[:-1], dims[1:])]


def grad_widths(model: str, dims: Sequence[int], preference: Optional[bool] = None) -> List[int]:
    """The :func:`layer_widths` that are exchanged backward as well: a layer's communicated tensor has
    a gradient unless it is layer 0's input features (aggregated first), which need none."""
    widths = layer_widths(model, dims, preference)
    first = not aggregates_first(model, dims[0], dims[1], preference)
    return [w for layer, w in enumerate(widths) if layer > 0 or first]


def param_bytes(model: str, dims: Sequence[int], dtype_bytes: int, norm: str = "none") -> int:
    count = sum(2 * d for d in dims[1:-1]) if norm == "layer" else 0  # LayerNorm's weight and bias
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        if model == "gcn":
            count += d_in * d_out + d_out
        elif model == "sage":
            count += 2 * d_in * d_out + d_out
        elif model == "gin":
            count += 1 + d_in * d_out + d_out + d_out * d_out + d_out
        else:  # gat: W, attn_l, attn_r, bias (heads=1)
            count += d_in * d_out + 3 * d_out
    return count * dtype_bytes


# ---------------------------------------------------------------- memory
EDGE_BYTES = 48  # src, dst, float64 weight factors and the kernel's index structure


# Calibrated against measured per-rank peaks (VmHWM): `python scripts/bench.py memory`, csbm 1M nodes,
# average degree 20, f=128, 3-layer GCN hidden 128, float32 (docs/BENCHMARKS.md, "memory").
PROCESS_BYTES = 450 * 2**20  # a rank with an 8 MiB part of Cora peaks at 454 MiB: the process itself
ACTIVATION_FACTOR = 1.4  # bytes kept per (row x layer width) in training, relative to one copy
HALO_FACTOR = 0.77  # received source rows held per layer, relative to one copy of them


def halo_rows(ctx: PlanContext, rows: int, num_parts: int) -> int:
    """Source rows a rank receives per layer, before the partition is known: every remote in-neighbour
    distinct, at most all the rows it does not own (what a random-like graph such as csbm reaches)."""
    if num_parts <= 1:
        return 0
    return int(min(ctx.num_nodes - rows, rows * ctx.num_edges / max(1, ctx.num_nodes)))


def estimate_memory(ctx: PlanContext, num_parts: int, gather_all: bool = False,
                    replicated_graph: bool = False, activation_factor: float = ACTIVATION_FACTOR,
                    receives_halo: bool = True) -> MemoryEstimate:
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
    received = ctx.num_nodes if gather_all else halo_rows(ctx, rows, num_parts) if receives_halo else 0
    act = 0.0
    for (d_in, d_out), w in zip(zip(ctx.dims[:-1], ctx.dims[1:]), ctx.comm_widths):
        act += activation_factor * rows * (d_in + w + d_out) * ctx.dtype_bytes
        act += HALO_FACTOR * received * w * ctx.dtype_bytes
    return MemoryEstimate(graph_bytes=int(edges * EDGE_BYTES), feature_bytes=int(features),
                          activation_bytes=int(act), process_bytes=PROCESS_BYTES)
