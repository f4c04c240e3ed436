"""The run plan: one frozen dataclass resolved from the composed config and
the hardware profile, validated before any process starts."""
from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from gnntrain.errors import PlanError

DTYPE_BYTES = {"float32": 4, "float64": 8}
MODELS = ("gcn", "sage", "gin", "gat")


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated bytes per rank (see :func:`estimate_memory` for the model)."""

    graph_bytes: int
    feature_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.graph_bytes + self.feature_bytes + self.activation_bytes


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
    comm_widths: Tuple[int, ...]
    agg_out_widths: Tuple[int, ...]
    param_bytes: int
    model: str
    train_nodes: int = 0  # expected training nodes when the config implies it (generated graphs), else 0


@dataclass(frozen=True)
class RunPlan:
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

    @property
    def config_obj(self) -> DictConfig:
        return OmegaConf.create(self.config)

    @property
    def plan_hash(self) -> str:
        keys = {k: self.config[k] for k in ("dataset", "model", "mode", "partitioner")}
        keys.update(world_size=self.world_size, dtype=self.dtype, seed=self.config["train"]["seed"])
        return hashlib.sha1(json.dumps(keys, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["memory_per_rank"]["total_bytes"] = self.memory_per_rank.total_bytes
        d["rank_devices"] = list(self.rank_devices)
        d["warnings"] = list(self.warnings)
        d["plan_hash"] = self.plan_hash
        return d

    def write_yaml(self, path: Path) -> Path:
        path = Path(path)
        path.write_text(OmegaConf.to_yaml(OmegaConf.create(self.to_dict())))
        return path


# ----------------------------------------------------------------- helpers
def _value(x):
    return x.value if isinstance(x, Enum) else x


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


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


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


def resolve_kernel(cfg, device: str, dtype: str, threads: int, avg_degree: float, width: int) -> Tuple[str, str]:
    """(kernel, note): ``kernel=dgl|torch`` checked against this install, ``auto`` measured
    (:func:`gnntrain.models.kernels.choose_kernel`, cached per host in the cache dir)."""
    import torch

    from gnntrain.data import resolve_cache_dir
    from gnntrain.models.kernels import choose_kernel, kernel_problem

    kernel = _value(cfg.kernel)
    if kernel != "auto":
        problem = kernel_problem(kernel, device, getattr(torch, dtype))
        if problem is not None:
            others = [k for k in ("auto", "torch", "dgl") if k != kernel]
            raise PlanError("kernel", f"kernel={kernel}: {problem}.", f"use kernel={' or kernel='.join(others)}")
        return kernel, f"set by kernel={kernel}"
    try:
        choice = choose_kernel(device, dtype, threads, avg_degree, width, resolve_cache_dir(cfg))
    except ValueError as exc:
        raise PlanError("kernel", f"{exc}.", "use train.dtype=float32 or float64") from None
    return choice.kernel, choice.describe()


def layer_widths(model: str, dims: List[int], aggregate_first: Optional[bool]) -> List[int]:
    """Width each layer hands to its aggregation (mirrors gnntrain.models.gnn)."""
    widths = []
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        if model in ("gcn", "sage"):
            first = (d_in <= d_out) if aggregate_first is None else aggregate_first
            widths.append(d_in if first else d_out)
        else:
            widths.append(d_in)
    return widths


def param_bytes(model: str, dims: List[int], dtype_bytes: int) -> int:
    count = 0
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


def estimate_memory(ctx: PlanContext, num_parts: int, gather_all: bool) -> MemoryEstimate:
    """Per-rank bytes for a rank holding 1/num_parts of the rows.

    graph: its in-edges (+ self-loops) × 48 B (src, dst, float64 weight and
    kernel structure); features: rows × F × dtype; activations: per layer,
    input, aggregate and output rows kept for backward and their gradients
    (×2), plus the received source rows (all N rows for the oblivious
    all-gather, about as many as owned otherwise).
    """
    rows = -(-ctx.num_nodes // num_parts)
    edges = -(-(ctx.num_edges + ctx.num_nodes) // num_parts)
    graph = edges * 48
    features = rows * ctx.feat_dim * ctx.dtype_bytes
    act = 0
    for (d_in, d_out), w in zip(zip(ctx.dims[:-1], ctx.dims[1:]), ctx.comm_widths):
        act += 2 * rows * (d_in + w + d_out) * ctx.dtype_bytes
        src_rows = ctx.num_nodes if gather_all else rows
        act += 2 * (src_rows if num_parts > 1 else 0) * w * ctx.dtype_bytes
    return MemoryEstimate(graph_bytes=int(graph), feature_bytes=int(features), activation_bytes=int(act))


# ------------------------------------------------------------------- build
def build_plan(cfg: DictConfig) -> RunPlan:
    """Resolve and validate; raises PlanError with the offending option."""
    from gnntrain.modes import get_mode

    t, m, hw, ds = cfg.train, cfg.model, cfg.hardware, cfg.dataset
    warnings: List[str] = []
    if int(t.epochs) < 1:
        raise PlanError("train.epochs", f"must be at least 1 (got {t.epochs}).", "set train.epochs=N with N >= 1")
    if float(t.lr) <= 0:
        raise PlanError("train.lr", f"learning rate must be > 0 (got {t.lr}).", "set train.lr to a positive value")
    if float(t.weight_decay) < 0:
        raise PlanError("train.weight_decay", f"must be >= 0 (got {t.weight_decay}).")
    if int(t.eval_every) < 1:
        raise PlanError("train.eval_every", f"must be at least 1 (got {t.eval_every}).")
    if int(t.checkpoint_every) < 0:
        raise PlanError("train.checkpoint_every", f"must be >= 0 (got {t.checkpoint_every}).")
    if m.name not in MODELS:
        raise PlanError("model", f"unknown model '{m.name}'.", f"use one of {', '.join(MODELS)}")
    if m.name == "gat" and int(m.get("gat_heads", 1)) != 1:
        raise PlanError("model.gat_heads", f"{m.gat_heads} heads asked for; the GAT layer here has one head.",
                        "use model.gat_heads=1")
    if int(m.layers) < 1 or int(m.hidden) < 1:
        raise PlanError("model.layers/model.hidden", "must both be at least 1.")
    if not 0.0 <= float(m.dropout) < 1.0:
        raise PlanError("model.dropout", f"must lie in [0, 1) (got {m.dropout}).")
    if not 0 <= int(cfg.port) <= 65535:
        raise PlanError("port", f"{cfg.port} is outside 0..65535.", "use port=0 to pick a free port")
    if int(cfg.port) and port_in_use(int(cfg.port)):
        raise PlanError("port", f"port {cfg.port} is already in use on this host.",
                        "use port=0 to pick a free port, or free that port")
    if float(cfg.comm_timeout_s) <= 0:
        raise PlanError("comm_timeout_s", "must be > 0 seconds.")
    if int(hw.nodes) < 1 or int(hw.ranks_per_node) < 1:
        raise PlanError("hardware.nodes/hardware.ranks_per_node",
                        f"world size must be at least 1 (got {hw.nodes} x {hw.ranks_per_node}).",
                        "set hardware.ranks_per_node=N with N >= 1")

    mode_cls = get_mode(cfg.mode.name)
    if not mode_cls.implemented:
        raise PlanError("mode", f"mode '{mode_cls.name}' is not implemented yet (issue {mode_cls.issue}); "
                        "its options exist as schema only.", "use mode=single or mode=partition")
    mode = mode_cls(cfg)
    if m.name not in mode_cls.models:
        rule = f" {mode_cls.models_rule}" if mode_cls.models_rule else ""
        raise PlanError("model", f"mode '{mode_cls.name}' does not support model '{m.name}'.{rule}",
                        f"use one of {', '.join(mode_cls.models)}")

    device = _value(hw.device)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise PlanError("hardware.device", "the profile asks for CUDA but no CUDA device is available here.",
                            "use hardware=local-cpu, or run on a CUDA host")
    world = mode.world_size(int(hw.nodes) * int(hw.ranks_per_node))
    n, e, f, c = dataset_sizes(ds)
    if world > n:
        raise PlanError("world size", f"{world} ranks for a graph of {n} nodes: every rank must own rows.",
                        "lower hardware.ranks_per_node")
    num_parts = mode.num_parts(world)
    requested_parts = int(cfg.partitioner.get("num_parts", 0) or 0)
    if requested_parts and requested_parts != num_parts:
        raise PlanError("partitioner.num_parts", f"{requested_parts} parts do not match the {num_parts} that "
                        f"mode '{mode_cls.name}' needs at world size {world}.",
                        "drop partitioner.num_parts or change the world size")

    dtype = _value(t.dtype)
    dims = [f] + [int(m.hidden)] * (int(m.layers) - 1) + [c]
    agg_first = cfg.mode.get("aggregate_first", None)
    widths = layer_widths(m.name, dims, agg_first)
    ctx = PlanContext(world_size=world, num_nodes=n, num_edges=e, feat_dim=f, num_classes=c,
                      dtype_bytes=DTYPE_BYTES[dtype], dims=tuple(dims), comm_widths=tuple(widths),
                      agg_out_widths=tuple(widths), param_bytes=param_bytes(m.name, dims, DTYPE_BYTES[dtype]),
                      model=m.name, train_nodes=int(round(n * float(ds.train_fraction)))
                      if ds.source == "generated" else 0)
    warnings += mode.validate(ctx)

    ranks_per_node = min(world, int(hw.ranks_per_node))
    cores = host_cores(hw)
    threads = max(1, cores // ranks_per_node)
    if world > cores * float(hw.oversubscribe) and int(hw.nodes) == 1:
        warnings.append(f"{world} ranks on {cores} cores exceeds the oversubscription limit "
                        f"(x{hw.oversubscribe}); expect slow collectives")
    kernel, kernel_note = resolve_kernel(cfg, device, dtype, threads, e / max(n, 1), max(widths))
    comm_mode = str(_value(cfg.mode.get("comm", "")))
    memory = estimate_memory(ctx, num_parts, gather_all=comm_mode == "oblivious")
    host_mem = host_memory_bytes(hw)
    if memory.total_bytes * ranks_per_node > host_mem:
        raise PlanError("dataset/hardware", f"estimated {memory.total_bytes * ranks_per_node / 2**30:.2f} GiB per "
                        f"node for {ds.name} does not fit the profile's {host_mem / 2**30:.2f} GiB host memory.",
                        "use more nodes, a smaller dataset, or a profile with more memory")
    estimate = mode.estimate_comm(ctx)
    comm = None
    if estimate is not None:
        comm = {"per_epoch_bytes": estimate.per_epoch_bytes, "by_kind": dict(estimate.by_kind),
                "formula": estimate.formula}

    rank_devices = mode.rank_devices(device, world, ranks_per_node)
    backend = "nccl" if all(d.startswith("cuda") for d in rank_devices) else "gloo"  # gloo once a CPU rank joins
    return RunPlan(
        mode=mode_cls.name, dataset=str(ds.name), model=str(m.name), partitioner=str(cfg.partitioner.name),
        hardware=str(hw.name), world_size=world, nodes=int(hw.nodes) if world > 1 else 1,
        ranks_per_node=ranks_per_node, backend=backend, device=device,
        rank_devices=rank_devices, threads_per_rank=threads, kernel=kernel, kernel_note=kernel_note, dtype=dtype,
        epochs=int(t.epochs), num_parts=num_parts, memory_per_rank=memory, comm_per_epoch=comm,
        mode_details=mode.details(ctx), warnings=tuple(warnings),
        config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    )
