"""Predicted epoch time, memory and bytes: one footing for the five papers' cost models.

Each mode describes the work of its busiest rank in one epoch as a :class:`Work` record
(the rows, edges and widths its kernels touch, and the collectives it issues with their
bytes per rank); :func:`predict` prices it with the host's measured costs
(:class:`CostProfile`, written by ``gnntrain calibrate`` into the hardware profile).

* compute = SpMM edges × ``spmm_ns_per_edge`` + edge·columns × ``spmm_ns_per_edge_col``
  + GEMM multiply-adds / ``gemm_gflops`` (at the GEMM's narrow width)
  + hidden activations × ``activation_ns_per_element`` + rows moved by index ×
  ``gather_ns_per_element``
  + elementwise bytes / ``elementwise_gbps``
  + layers × ``op_overhead_us`` + steps × ``epoch_overhead_us``;
* the compute that grows with the graph is multiplied by the mode's ``mode_factor``: measured over
  modelled on a 20 000-node probe run of that mode (the papers' models give the structure, one
  constant per mode fitted on this host absorbs the implementation's efficiency: chunked kernels,
  relayouts);
* communication = Σ over collectives of latency + ``collective_overhead_us`` + bytes per rank /
  bandwidth, each kind with its own measured (latency, bandwidth); when the ranks span nodes, the
  profile's ``link_gbit_s`` shared by a node's ranks caps the bandwidth and ``link_latency_us`` adds
  to the latency.

The papers' own volume models give the bytes: sparsity-aware partition volume × f (Mukhopadhyay
et al., §4), MixGCN's N(m−1)/m·(d₀ + 4Σd) (§3.1), SuperGCN's cover rows × quantised width (§4),
HongTu's transfer volume (§5) and HyScale's T_load/T_trans/T_prop (§V).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gnntrain.config.schema import option_value
from gnntrain.errors import PlanError
from gnntrain.plan_types import MemoryEstimate, PlanContext

COLLECTIVES = ("alltoall", "allreduce", "allgather")
# a profile's counts (nodes, ranks, cores, GPUs) and its other figures (GB, GB/s, us, minutes) at
# most these: beyond them no host exists, and threads, bytes and times overflow what holds them
PROFILE_COUNTS = ("nodes", "ranks_per_node", "cores_per_node", "gpus_per_node")
MAX_PROFILE_COUNT = 1 << 20
MAX_PROFILE_FIGURE = 1e12
# reads+writes per layer output element besides the activation: bias add and its gradient
ELEMENTWISE_PASSES = 4


@dataclass(frozen=True)
class CostProfile:
    """The measured costs of one hardware profile (``hardware.cost``), at one thread count."""

    source: str
    kernel: str
    spmm_ns_per_edge: float
    spmm_ns_per_edge_col: float
    gemm_widths: Tuple[int, ...]
    gemm_gflops: Tuple[float, ...]  # at gemm_widths
    elementwise_gbps: float
    activation_s_per_element: float
    gather_s_per_element: float
    op_overhead_s: float
    epoch_overhead_s: float
    latency_s: Dict[str, float]
    bytes_per_s: Dict[str, float]
    h2d_bytes_per_s: float
    link_bytes_per_s: float  # between nodes; 0 = not stated
    collective_overhead_s: float = 0.0
    # per mode: measured / modelled scaling compute
    mode_factor: Dict[str, float] = field(default_factory=dict)
    link_latency_s: float = 0.0
    # set by the plan when the ranks span nodes: collectives then cross the profile's link, shared
    # by the ranks of a node (the measured probe is between two ranks of one host)
    ranks_per_link: int = 0

    def collective_s(self, kind: str, nbytes: float) -> float:
        bandwidth, latency = self.bytes_per_s[kind], self.latency_s[kind]
        if self.ranks_per_link and self.link_bytes_per_s:
            bandwidth = min(bandwidth, self.link_bytes_per_s / self.ranks_per_link)
            latency += self.link_latency_s
        return latency + self.collective_overhead_s + nbytes / bandwidth

    def gemm_s(self, macs: float, width: int) -> float:
        """Seconds of ``macs`` multiply-adds whose narrow dimension is ``width``: the measured rate,
        interpolated in log2(width) between the widths timed (GEMMs with a narrow side run far below
        peak)."""
        widths, rates = self.gemm_widths, self.gemm_gflops
        w = min(max(float(width), widths[0]), widths[-1])
        i = (
            max(0, min(len(widths) - 2, bisect.bisect_right(widths, w) - 1))
            if len(widths) > 1
            else 0
        )
        if len(widths) == 1:
            rate = rates[0]
        else:
            t = (math.log2(w) - math.log2(widths[i])) / (
                math.log2(widths[i + 1]) - math.log2(widths[i])
            )
            rate = rates[i] + t * (rates[i + 1] - rates[i])
        return macs / (rate * 1e9)


def _check_figures(hw, name: str) -> None:
    """Every number of the profile (calibrated costs aside) finite, >= 0 and at most its bound."""
    for key, value in hw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        high = MAX_PROFILE_COUNT if key in PROFILE_COUNTS else MAX_PROFILE_FIGURE
        if not 0 <= float(value) <= high:  # NaN too
            raise PlanError(
                f"hardware.{key}",
                f"profile '{name}' gives {key}={value}: it must be a number in 0..{high:,}.",
                f"set hardware.{key} to the real figure",
            )


def check_profile(hw) -> None:
    """A profile with a figure that is negative, not finite or past any host, a bandwidth that is
    zero, or calibrated figures missing or negative, fails with a PlanError naming the key and the
    fix."""
    name = str(hw.name)
    for key in (
        "h2d_gbps",
        "d2d_gbps",
        "host_mem_gbps",
        "core_gmacs",
        "device_mem_gbps",
        "device_gmacs",
    ):
        if hw.get(key) is None or float(hw.get(key)) <= 0:
            raise PlanError(
                f"hardware.{key}",
                f"profile '{name}' gives {key}={hw.get(key)}: a bandwidth or rate "
                "must be a positive number.",
                f"set hardware.{key} to the measured value, or run gnntrain calibrate "
                f"hardware={name}",
            )
    if float(hw.get("link_gbit_s", 0) or 0) < 0 or float(hw.get("link_latency_us", 0) or 0) < 0:
        raise PlanError(
            "hardware.link_gbit_s",
            f"profile '{name}' has a negative link bandwidth or latency.",
            "set link_gbit_s and link_latency_us to values >= 0 (0 = not stated)",
        )
    _check_figures(hw, name)
    cost = hw.get("cost")
    if cost is None or not cost.calibrated:
        return
    threads = list(cost.threads)
    lists = (
        "kernel",
        "spmm_ns_per_edge",
        "spmm_ns_per_edge_col",
        "gemm_gflops",
        "elementwise_gbps",
        "activation_ns_per_element",
        "gather_ns_per_element",
        "op_overhead_us",
        "epoch_overhead_us",
    )
    widths = list(cost.get("gemm_widths") or [])
    rates = cost.get("gemm_gflops") or []
    if not widths or any(int(w) < 1 for w in widths) or any(len(r) != len(widths) for r in rates):
        raise PlanError(
            "hardware.cost.gemm_widths",
            f"profile '{name}' is calibrated but its GEMM rates do not "
            f"match gemm_widths={widths}: the file is incomplete.",
            f"run gnntrain calibrate hardware={name} again",
        )
    for key in lists:
        values = list(cost.get(key) or [])
        if not threads or len(values) != len(threads):
            raise PlanError(
                f"hardware.cost.{key}",
                f"profile '{name}' is calibrated but {key} has {len(values)} "
                f"value(s) for {len(threads)} thread count(s): the file is incomplete.",
                f"run gnntrain calibrate hardware={name} again",
            )
        flat = [v for row in values for v in (row if key == "gemm_gflops" else [row])]
        if key != "kernel" and any(
            float(v) < 0 or (key in ("gemm_gflops", "elementwise_gbps") and float(v) == 0)
            for v in flat
        ):
            raise PlanError(
                f"hardware.cost.{key}",
                f"profile '{name}' has {key}={values}: costs and rates must be positive.",
                f"run gnntrain calibrate hardware={name} again",
            )
    bad = {k: v for k, v in (cost.get("mode_factor") or {}).items() if float(v) <= 0}
    if bad:
        raise PlanError(
            "hardware.cost.mode_factor",
            f"profile '{name}' has non-positive mode factors {bad}.",
            f"run gnntrain calibrate hardware={name} again",
        )
    for kind in COLLECTIVES:
        if float(cost.get(f"{kind}_gbps") or 0) <= 0:
            raise PlanError(
                f"hardware.cost.{kind}_gbps",
                f"profile '{name}' is calibrated but its {kind} "
                f"bandwidth is missing or not positive ({cost.get(f'{kind}_gbps')}).",
                f"run gnntrain calibrate hardware={name} again",
            )
        if float(cost.get(f"{kind}_latency_us") or 0) < 0:
            raise PlanError(
                f"hardware.cost.{kind}_latency_us",
                f"profile '{name}' has a negative {kind} latency.",
                f"run gnntrain calibrate hardware={name} again",
            )


def cost_profile(hw, threads: int) -> Optional[CostProfile]:
    """The profile's measured costs at the measured thread count nearest ``threads`` (at or below it
    where one exists); None when the profile is not calibrated."""
    cost = hw.get("cost")
    if cost is None or not cost.calibrated:
        return None
    measured = sorted(range(len(cost.threads)), key=lambda i: int(cost.threads[i]))
    counts = [int(cost.threads[i]) for i in measured]
    i = measured[max(0, bisect.bisect_right(counts, int(threads)) - 1)]
    return CostProfile(
        source=str(cost.calibrated),
        kernel=str(cost.kernel[i]),
        spmm_ns_per_edge=float(cost.spmm_ns_per_edge[i]),
        spmm_ns_per_edge_col=float(cost.spmm_ns_per_edge_col[i]),
        gemm_widths=tuple(int(w) for w in cost.gemm_widths),
        gemm_gflops=tuple(float(r) for r in cost.gemm_gflops[i]),
        elementwise_gbps=float(cost.elementwise_gbps[i]),
        activation_s_per_element=float(cost.activation_ns_per_element[i]) * 1e-9,
        gather_s_per_element=float(cost.gather_ns_per_element[i]) * 1e-9,
        op_overhead_s=float(cost.op_overhead_us[i]) * 1e-6,
        epoch_overhead_s=float(cost.epoch_overhead_us[i]) * 1e-6,
        latency_s={k: float(cost[f"{k}_latency_us"]) * 1e-6 for k in COLLECTIVES},
        bytes_per_s={k: float(cost[f"{k}_gbps"]) * 1e9 for k in COLLECTIVES},
        h2d_bytes_per_s=float(hw.h2d_gbps) * 1e9,
        link_bytes_per_s=float(hw.get("link_gbit_s", 0) or 0) * 1e9 / 8,
        link_latency_s=float(hw.get("link_latency_us", 0) or 0) * 1e-6,
        collective_overhead_s=float(cost.get("collective_overhead_us", 0) or 0) * 1e-6,
        mode_factor={str(k): float(v) for k, v in (cost.get("mode_factor") or {}).items()},
    )


@dataclass
class Work:
    """One epoch of training on the busiest rank, in the units the measured costs price."""

    spmm_edges: float = 0.0  # forward+backward SpMM edge passes (a forward-only SpMM counts half)
    spmm_edge_cols: float = 0.0  # the same, times the width aggregated
    # (multiply-adds, narrow dimension)
    gemms: List[Tuple[float, int]] = field(default_factory=list)
    elementwise_bytes: float = 0.0
    # hidden-layer outputs through relu and dropout, forward and backward
    activation_elements: float = 0.0
    layers: int = 0  # layer forward+backward passes (each costs op_overhead)
    steps: int = 1  # optimizer steps (each costs epoch_overhead: loss, backward start, step)
    copy_bytes: float = 0.0  # streaming host memory copies, priced at elementwise bandwidth
    # values picked or accumulated by row index (halo packing, chunk loads)
    gathered_elements: float = 0.0
    h2d_bytes: float = 0.0  # host→device transfers
    # (kind, bytes per rank) per call
    collectives: List[Tuple[str, float]] = field(default_factory=list)
    fixed_s: float = 0.0  # a mode's own modelled seconds (e.g. HyScale's §V pipeline)


@dataclass(frozen=True)
class Prediction:
    """Predicted epoch (training) time split into compute and communication, per-rank memory and
    bytes per epoch (all ranks)."""

    compute_s: float
    comm_s: float
    memory_bytes: int
    comm_bytes: Optional[int]
    basis: str  # the profile's calibration, for the printout
    collective_calls: int = 0
    # the part of compute_s that grows with the graph (mode_factor applied)
    scaling_compute_s: float = 0.0

    @property
    def epoch_s(self) -> float:
        return self.compute_s + self.comm_s

    def to_dict(self) -> Dict[str, object]:
        return {
            "epoch_s": self.epoch_s,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "memory_bytes": self.memory_bytes,
            "comm_bytes": self.comm_bytes,
            "calibration": self.basis,
            "collective_calls": self.collective_calls,
            "scaling_compute_s": self.scaling_compute_s,
        }


@dataclass(frozen=True)
class CommEstimate:
    """Bytes per epoch, all ranks: the total (None where it depends on the graph until it is
    partitioned), by ledger kind, and the formula as text."""

    per_epoch_bytes: Optional[int]
    by_kind: Dict[str, int]
    formula: str


@dataclass(frozen=True)
class Estimate:
    """Everything a mode predicts of a plan before it runs
    (:meth:`gnntrain.modes.ModePlanner.estimate`): the memory per rank, the busiest rank's epoch of
    work, the bytes by kind with their formula, and whether it trains exactly what ``mode=single``
    trains. :func:`price_estimate` turns it into seconds."""

    memory: MemoryEstimate
    work: Work
    comm: Optional[CommEstimate]
    exact: bool
    world_size: int

    @property
    def bytes_per_epoch(self) -> int:
        """All ranks' bytes per epoch: the closed form where the mode has one, else the work's
        collectives."""
        if self.comm is not None and self.comm.per_epoch_bytes is not None:
            return int(self.comm.per_epoch_bytes)
        return int(sum(b for _, b in self.work.collectives) * self.world_size)


# a Details field's metadata: its printed key where that is not the field's name with spaces for
# underscores, and whether the plan leaves it out where its value is None
DETAIL_LABEL, DETAIL_OPTIONAL = "label", "optional"


def detail(label: str = "", optional: bool = False, **kwargs) -> Any:
    """A :class:`Details` field printed under ``label`` (else its name, underscores as spaces) and,
    where ``optional``, left out of the plan while it is None; ``kwargs`` go to
    :func:`dataclasses.field` (``default``, ``default_factory``)."""
    metadata = {DETAIL_LABEL: label} if label else {}
    if optional:
        metadata[DETAIL_OPTIONAL] = True
    return field(metadata=metadata, **kwargs)


@dataclass(frozen=True)
class Details:
    """A mode's lines for the printed plan (:meth:`gnntrain.modes.ModePlanner.details`): each mode
    subclasses it with its own fields, in the order they print; the plan turns it into its mapping
    (:func:`gnntrain.plan.details_mapping`). Values are numbers, flags, labels, and lists and
    mappings of them: units are the printer's (bytes under a key that ends in " bytes", times under
    " ms")."""


def price_estimate(estimate: Estimate, cost: CostProfile, mode: str) -> Prediction:
    """The predicted epoch time (compute and communication), memory per rank and bytes per epoch of
    ``estimate`` at this host's measured ``cost`` (``mode``'s fitted factor applied)."""
    variable, fixed, comm = price(estimate.work, cost)
    variable *= cost.mode_factor.get(mode, 1.0)
    return Prediction(
        variable + fixed,
        comm,
        estimate.memory.total_bytes,
        estimate.bytes_per_epoch,
        cost.source,
        collective_calls=len(estimate.work.collectives),
        scaling_compute_s=variable,
    )


def price(work: Work, cost: CostProfile) -> Tuple[float, float, float]:
    """(compute seconds that scale with the graph, fixed compute seconds, communication seconds) of
    ``work`` at ``cost``: the first is what a mode's fitted factor (``mode_factor``) multiplies."""
    spmm_ns = (
        work.spmm_edges * cost.spmm_ns_per_edge + work.spmm_edge_cols * cost.spmm_ns_per_edge_col
    )
    variable = (
        spmm_ns * 1e-9
        + sum(cost.gemm_s(m, w) for m, w in work.gemms)
        + (work.elementwise_bytes + work.copy_bytes) / (cost.elementwise_gbps * 1e9)
        + work.activation_elements * cost.activation_s_per_element
        + work.gathered_elements * cost.gather_s_per_element
        + work.h2d_bytes / cost.h2d_bytes_per_s
        + work.fixed_s
    )
    fixed = work.layers * cost.op_overhead_s + work.steps * cost.epoch_overhead_s
    comm = sum(cost.collective_s(kind, nbytes) for kind, nbytes in work.collectives)
    return variable, fixed, comm


def local_work(
    ctx: PlanContext,
    rows: float,
    edges: float,
    agg_rows: Optional[float] = None,
    width_share: float = 1.0,
    update_rows: Optional[float] = None,
) -> Work:
    """The compute of a rank that aggregates ``edges`` (over ``agg_rows`` source rows) at
    ``width_share`` of each layer's width and updates ``update_rows`` rows, forward and backward.

    Backward: the first layer computes no input gradient, so its SpMM runs forward only when it
    aggregates the input features and its GEMM does the weight gradient only."""
    update_rows = rows if update_rows is None else update_rows
    work = Work(layers=len(ctx.dims) - 1)
    grads = list(ctx.grad_widths)
    for layer, ((d_in, d_out), w) in enumerate(
        zip(zip(ctx.dims[:-1], ctx.dims[1:]), ctx.comm_widths)
    ):
        backward = layer > 0 or len(grads) == len(ctx.comm_widths)
        width = w * width_share
        work.spmm_edges += edges * (1.0 if backward else 0.5)
        work.spmm_edge_cols += edges * width * (1.0 if backward else 0.5)
        if not ctx.elementwise:  # attention
            # per-edge scores, softmax and its gradient
            work.elementwise_bytes += 6 * edges * ctx.dtype_bytes
        # the model's own weights (gnntrain.models.registry)
        macs = update_rows * ctx.update_macs[layer]
        work.gemms.append((macs * (3 if layer > 0 else 2), min(d_in, d_out)))
        work.elementwise_bytes += ELEMENTWISE_PASSES * update_rows * d_out * ctx.dtype_bytes
        if layer > 0:
            work.activation_elements += update_rows * d_in
    return work


def nearest_cost(hw, threads: int) -> CostProfile:
    """:func:`cost_profile`, or a PlanError telling the user to calibrate."""
    cost = cost_profile(hw, threads)
    if cost is None:
        name = option_value(hw.name)
        raise PlanError(
            "hardware.cost",
            f"profile '{name}' has no measured costs, so nothing can be predicted.",
            f"run gnntrain calibrate hardware={name} and use the profile it writes",
        )
    return cost
