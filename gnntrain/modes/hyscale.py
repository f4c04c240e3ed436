"""``mode=hyscale``: hybrid CPU + accelerator mini-batch training with
two-stage prefetch and dynamic resource management (papers/hyscale-gnn.txt,
notes/hyscale.md).

* **Trainers** (§III-B): ``cpu_trainers`` then ``accel_trainers`` ranks in one
  gloo group. Every rank holds the whole graph and the features in host
  memory. An accelerator trainer computes on its GPU on a CUDA host; on a
  CPU-only host it is a CPU process that still runs every protocol stage (its
  "transfer" is a host copy, counted as ``h2d``).
* **Batches**: ``mode.batch_size`` is the *global* batch; each iteration one
  global batch of training nodes (a seeded permutation per epoch) is cut into
  contiguous slices by the current shares (:func:`split_batch`). Each trainer
  samples its slice with DGL's ``NeighborSampler`` (``mode.fanouts``,
  -1 = every in-neighbour) and aggregates with the global-degree edge weights
  rescaled by deg/sampled-deg, the usual unbiased estimator; with fanout -1 it
  is exactly full-graph aggregation.
* **Pipeline** (§IV-B): sample+gather in one background thread, transfer in a
  second, training in the main thread, with depth-2 queues: batch i+2 is
  gathered while i+1 is transferred and i trains (pinned memory and
  ``non_blocking`` copies on a side stream on CUDA). ``prefetch=false`` runs
  the same stages serially.
* **Gradient sync** (§III-B): synchronous. Loss = Σ CE over a trainer's slice
  / global batch size, and gradients are all-reduced with SUM, so trainer i's
  mean gradient enters with weight b_i/B (unbiased for uneven shares).
* **DRM** (§IV-A, Algorithm 1): :func:`drm_step`, a pure function of the
  per-trainer stage times; balance_work is the damped proportional rule of
  :func:`rebalance`. A decision made after iteration t applies to batch t+3
  (the prefetch queue), in both pipeline settings, so that prefetch never
  changes which batches are drawn.
* **Performance model** (§V): :func:`predict_times`, printed by ``gnntrain
  plan`` and set against the measured stage times in summary.json.

DGL's sampler draws from per-thread engines; :class:`NeighborSampler` runs
every draw on one dedicated thread, reseeded per (trainer, batch), so that
prefetch on and off draw the same batches.
"""
from __future__ import annotations

import copy
import math
import queue
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from gnntrain.checkpoint import preemption_boundary, resume_requested, run_checkpointer
from gnntrain.comm.accounting import Phase
from gnntrain.config.schema import ModeConfig
from gnntrain.errors import PlanError
from gnntrain.models import SparseAdjacency, build_model
from gnntrain.modes.base import CommEstimate, Mode, Prepared, RankShard, register_mode
from gnntrain.modes.fullgraph import (SPLITS, epoch_record, inject_fault, model_spec, run_totals,
                                      sync_gradients)
from gnntrain.modes.single import graph_tensors
from gnntrain.plan import host_cores

DRM_LAG = 3  # a decision after iteration t applies to batch t + DRM_LAG (depth-2 queue + the batch in flight)
DRM_WARMUP = 1  # the run's first iterations pay one-time costs (allocations, lazy init): DRM ignores them


@dataclass
class HyScaleConfig(ModeConfig):
    name: str = "hyscale"
    cpu_trainers: int = 1
    accel_trainers: int = 1
    fanouts: List[int] = field(default_factory=lambda: [25, 10])  # per layer, input side first; -1 = all
    batch_size: int = 1024  # global: split across the trainers by their shares
    prefetch: bool = True  # depth-2 two-stage prefetch (§IV-B); false = serial stages
    drm: bool = True  # dynamic resource management (§IV-A)
    shares: List[float] = field(default_factory=list)  # initial share per trainer; empty = equal
    drm_min_share: float = 0.05  # no trainer's share falls below this fraction of the batch
    drm_ema: float = 0.5  # weight of the newest throughput sample in the EMA
    slowdown: List[float] = field(default_factory=list)  # per trainer >= 1: emulate a slower device (tests)


# ------------------------------------------------------------ batch split
def initial_shares(options, trainers: int) -> Tuple[float, ...]:
    given = [float(s) for s in options.shares]
    if not given:
        return tuple([1.0 / trainers] * trainers)
    total = sum(given)
    return tuple(s / total for s in given)


def split_batch(total: int, shares: Sequence[float]) -> List[int]:
    """Integer batch sizes ∝ ``shares`` summing to ``total`` (largest remainder),
    at least one seed each whenever ``total`` allows."""
    n = len(shares)
    floor_each = 1 if total >= n else 0
    spare = total - floor_each * n
    exact = [spare * s / sum(shares) for s in shares]
    sizes = [int(math.floor(e)) for e in exact]
    order = sorted(range(n), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[:spare - sum(sizes)]:
        sizes[i] += 1
    return [floor_each + s for s in sizes]


def global_batches(train_ids: torch.Tensor, batch_size: int, seed: int, epoch: int) -> List[torch.Tensor]:
    """The epoch's global batches: a permutation seeded by (seed, epoch), cut every ``batch_size``."""
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    perm = train_ids[torch.randperm(train_ids.numel(), generator=gen)]
    return list(torch.split(perm, int(batch_size)))


def trainer_slice(batch: torch.Tensor, shares: Sequence[float], rank: int) -> Tuple[torch.Tensor, List[int]]:
    sizes = split_batch(batch.numel(), shares)
    start = sum(sizes[:rank])
    return batch[start:start + sizes[rank]], sizes


# ---------------------------------------------------------------- sampler
@dataclass
class Block:
    """One sampled layer: edges (dst, src) in local ids, src rows = dst rows first."""

    dst: torch.Tensor
    src: torch.Tensor
    weight: torch.Tensor
    num_dst: int
    num_src: int


class NeighborSampler:
    """DGL's ``dgl.dataloading.NeighborSampler`` (uniform, without replacement, at most
    ``fanout`` in-edges per node, -1 = all), turned into :class:`Block` s whose edge weights
    are the global-degree weights rescaled by deg / sampled-deg (the unbiased estimate of
    the full aggregation; exact with fanout -1).

    Reproducibility (checked with DGL 2.1): DGL draws from a per-OS-thread engine whose
    stream depends on ``dgl.seed`` *and* on which thread draws (engines are numbered in
    the order threads first use one), and its OpenMP workers race for those numbers. So
    every draw in the process runs on one dedicated thread (:func:`_sampling_thread`) with
    one OpenMP thread, reseeded per batch: the serial loop and the prefetch thread of a
    trainer process, and a resumed run, get the same batches.

    The thread count is set again before every draw. DGL and torch share one OpenMP
    runtime, and torch's first parallel op on a thread resets that thread's count to
    ``torch.set_num_threads``'s value; with 2 threads DGL's NeighborSampler switches to its
    fused kernel, which draws differently, and OpenMP workers join the engine race. (That
    made a run's first batch differ from every later run's in the same process.) ``fused``
    is off for the same reason.
    """

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor, num_nodes: int,
                 fanouts: Sequence[int]):
        import dgl

        self._dgl = dgl
        self.graph = dgl.graph((src, dst), num_nodes=num_nodes)  # edge id = position in (dst, src, weight)
        self.weight = weight
        self.deg = self.graph.in_degrees().to(torch.float64)
        self.fanouts = [int(f) for f in fanouts]
        self._sampler = dgl.dataloading.NeighborSampler(self.fanouts, fused=False)

    def sample(self, seeds: torch.Tensor, seed: int) -> Tuple[torch.Tensor, List[Block]]:
        """(input nodes, blocks input side first) for ``seeds``, drawn with DGL seed ``seed``;
        the last block's dst rows are ``seeds``."""
        return _sampling_thread().submit(self._draw, seeds, seed).result()

    def _draw(self, seeds: torch.Tensor, seed: int) -> Tuple[torch.Tensor, List[Block]]:
        dgl = self._dgl
        dgl.utils.set_num_threads(1)
        dgl.seed(seed)
        input_nodes, _, blocks = self._sampler.sample_blocks(self.graph, seeds)
        out = []
        for block in blocks:
            src_local, dst_local = block.edges()
            dst_global = block.dstdata[dgl.NID]
            sampled = block.in_degrees().to(torch.float64).clamp(min=1)
            scale = self.deg[dst_global] / sampled
            weight = self.weight[block.edata[dgl.EID]].clone()  # (src, dst) factors; the dst one rescales
            weight[:, 1] *= scale[dst_local].to(weight.dtype)
            out.append(Block(dst_local, src_local, weight, block.num_dst_nodes(), block.num_src_nodes()))
        return input_nodes, out


_SAMPLING_THREAD: Optional[ThreadPoolExecutor] = None
_SAMPLING_LOCK = threading.Lock()


def _sampling_thread() -> ThreadPoolExecutor:
    """The process's one DGL sampling thread (DGL's engine numbering makes a second one draw
    a different stream from the same seed)."""
    global _SAMPLING_THREAD
    with _SAMPLING_LOCK:
        if _SAMPLING_THREAD is None:
            # no thread-count initializer: each draw sets one OpenMP thread itself (see NeighborSampler)
            _SAMPLING_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hyscale-dgl-sampler")
        return _SAMPLING_THREAD


def batch_seed(seed: int, rank: int, k: int) -> int:
    """The DGL sampling seed of trainer ``rank``'s slice of global batch ``k`` (fits DGL's int32)."""
    return (seed * 1_000_003 + rank * 7_919 + k * 104_729) % (2**31 - 1)


def block_forward(model, adjs: Sequence[SparseAdjacency], x: torch.Tensor,
                  dropout: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> torch.Tensor:
    """The model's aggregate/update layers over sampled blocks (dst rows are the first src rows)."""
    h = x
    for i, (layer, adj) in enumerate(zip(model.layers, adjs)):
        if i > 0:
            h = torch.relu(h)
            if dropout is not None and model.training:
                h = dropout(h)
        rows = torch.arange(adj.num_dst, device=h.device)
        h = layer.update(h[:adj.num_dst], layer.aggregate(h, adj.spmm, rows))
    return h


# -------------------------------------------------------------------- DRM
STAGES = ("sample", "load", "transfer", "train")


@dataclass(frozen=True)
class DRMState:
    """What DRM carries between iterations: shares, EMA throughputs per balanced
    pair (seeds/s per trainer), and the threads of the CPU tasks."""

    shares: Tuple[float, ...]
    rates: Dict[str, Tuple[float, ...]] = field(default_factory=dict)  # "train" | "sample"
    threads: Dict[str, int] = field(default_factory=dict)  # "T_SC" | "T_Load" | "T_TC"
    bottleneck: str = ""
    action: str = ""


def algorithm1(stages: Dict[str, float], threads: Dict[str, int]) -> Tuple[str, str, Optional[str]]:
    """HyScale-GNN §IV-A, Algorithm 1: (bottleneck, action, pair or thread donor).

    ``stages`` holds T_SC, T_SA, T_Load, T_TC and T_Accel = max(T_Tran, T_TA)
    for the sides present. Actions: ``balance_work`` with pair ``sample``
    (T_SC↔T_SA) or ``train`` (T_TC↔T_Accel), or ``balance_thread`` with the
    donating CPU task. A thread move needs a donor with more than one thread;
    where there is none, and the bottleneck is a CPU sampler or trainer, the
    rule falls back to balance_work on that pair (the paper leaves this open).
    """
    ranked = sorted(stages, key=lambda k: (-stages[k], k))
    bottleneck, fastest = ranked[0], ranked[-1]
    second = ranked[-2] if len(ranked) > 1 else fastest
    cpu = [k for k in ("T_SC", "T_Load", "T_TC") if k in stages]
    fastest_cpu = min(cpu, key=lambda k: (stages[k], k)) if cpu else fastest
    if bottleneck == "T_SA":
        return bottleneck, "balance_work", "sample"
    if bottleneck == "T_Accel":
        return bottleneck, "balance_work", "train"
    donor = fastest_cpu if bottleneck == "T_Load" else fastest
    pair = {"T_SC": "sample", "T_TC": "train"}.get(bottleneck)
    if bottleneck == "T_SC" and (fastest == "T_SA" or (fastest == "T_Accel" and second == "T_SA")):
        return bottleneck, "balance_work", "sample"
    if bottleneck == "T_TC" and (fastest == "T_Accel" or (fastest == "T_SA" and second == "T_Accel")):
        return bottleneck, "balance_work", "train"
    if donor != bottleneck and threads.get(donor, 1) > 1:
        return bottleneck, "balance_thread", donor
    if pair is not None:
        return bottleneck, "balance_work", pair
    return bottleneck, "none", None


def rebalance(shares: Sequence[float], rates: Sequence[float], batch: Sequence[int], seconds: Sequence[float],
              ema: float, min_share: float) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """Damped proportional rule: shares ∝ EMA of measured throughput b_i/t_i, floored at
    ``min_share``; the shares sum to 1, so the global batch stays fixed."""
    new_rates = []
    for old, b, t in zip(rates, batch, seconds):
        if b <= 0 or t <= 0:
            new_rates.append(old)  # nothing measured this time
            continue
        sample = b / t
        new_rates.append(sample if old <= 0 else ema * sample + (1 - ema) * old)
    if not all(r > 0 for r in new_rates):
        return tuple(shares), tuple(new_rates)
    target = [r / sum(new_rates) for r in new_rates]
    return floor_shares(target, min_share), tuple(new_rates)


def floor_shares(shares: Sequence[float], min_share: float) -> Tuple[float, ...]:
    """Raise shares below ``min_share`` to it and scale the others down to keep the sum at 1."""
    out = list(shares)
    fixed: set = set()
    while True:
        low = [i for i, s in enumerate(out) if i not in fixed and s < min_share]
        if not low:
            return tuple(out)
        fixed.update(low)
        free = [i for i in range(len(out)) if i not in fixed]
        rest = 1.0 - min_share * len(fixed)
        free_total = sum(out[i] for i in free)
        for i in range(len(out)):
            out[i] = min_share if i in fixed else out[i] * rest / free_total


def side_stages(times: Sequence[Dict[str, float]], accel: Sequence[bool]) -> Dict[str, float]:
    """Per-trainer stage seconds → Algorithm 1's inputs (the slowest trainer of each side)."""
    cpu = [t for t, a in zip(times, accel) if not a]
    acc = [t for t, a in zip(times, accel) if a]
    stages = {"T_Load": max(t["load"] for t in times)}
    if cpu:
        stages["T_SC"] = max(t["sample"] for t in cpu)
        stages["T_TC"] = max(t["train"] for t in cpu)
    if acc:
        stages["T_SA"] = max(t["sample"] for t in acc)
        stages["T_Accel"] = max(max(t["transfer"], t["train"]) for t in acc)
    return stages


def drm_step(state: DRMState, times: Sequence[Dict[str, float]], batch: Sequence[int], accel: Sequence[bool],
             ema: float, min_share: float) -> DRMState:
    """One DRM decision from one iteration's per-trainer stage times (pure: no clocks)."""
    bottleneck, action, arg = algorithm1(side_stages(times, accel), state.threads)
    rates, shares, threads = dict(state.rates), state.shares, dict(state.threads)
    if action == "balance_work":
        if arg == "train":  # an accelerator trainer's work includes its transfer
            seconds = [t["train"] + (t["transfer"] if a else 0.0) for t, a in zip(times, accel)]
        else:
            seconds = [t["sample"] for t in times]
        shares, rates[arg] = rebalance(shares, rates.get(arg, (0.0,) * len(shares)), batch, seconds, ema,
                                       min_share)
    elif action == "balance_thread":
        threads[arg] -= 1
        threads[bottleneck] = threads.get(bottleneck, 1) + 1
    return DRMState(shares=tuple(shares), rates=rates, threads=threads, bottleneck=bottleneck,
                    action=f"{action}({arg})" if arg else action)


class ShareSchedule:
    """Shares per global iteration; the sampler of batch k waits until they are decided."""

    def __init__(self) -> None:
        self._shares: Dict[int, Tuple[float, ...]] = {}
        self._cond = threading.Condition()

    def set(self, k: int, shares: Sequence[float]) -> None:
        with self._cond:
            self._shares[k] = tuple(shares)
            self._cond.notify_all()

    def get(self, k: int) -> Tuple[float, ...]:
        with self._cond:
            self._cond.wait_for(lambda: k in self._shares)
            return self._shares[k]


# ------------------------------------------------------- performance model
def frontier_sizes(batch: float, fanouts: Sequence[int], num_nodes: int,
                   avg_degree: float) -> List[Tuple[float, float]]:
    """Expected (src rows, edges) per layer, input side first, for ``batch`` seeds:
    k_eff = min(fanout, d̄) edges per row; new rows as balls into N bins."""
    out = []
    n = float(batch)
    for fanout in reversed(list(fanouts)):
        k = avg_degree if fanout < 0 else min(float(fanout), avg_degree)
        edges = n * k
        src = n + (num_nodes - n) * (1.0 - math.exp(-edges / max(1, num_nodes)))
        out.append((min(float(num_nodes), src), edges))
        n = min(float(num_nodes), src)
    return out[::-1]


def predict_times(ctx, hw, options, threads: int) -> Dict[str, Any]:
    """HyScale-GNN §V, eqs. 6–13, per iteration, from the hardware profile.

    T_load = Σ_i |V0_i|·f0·S / BW_mem; T_trans = max over accelerators |V0_i|·f0·S / BW_pcie;
    T_sync = 2·(model bytes) / BW_pcie; T_prop = max_i T_trainer,i + T_sync with eqs. 10–12
    (⊕ = sum); T_exec = max(T_load, T_trans, T_prop). T_samp is measured, not modelled (the
    paper profiles it offline), so it is left out of the predicted T_exec.
    """
    cpu, acc = int(options.cpu_trainers), int(options.accel_trainers)
    trainers = cpu + acc
    shares = initial_shares(options, trainers)
    batch = min(int(options.batch_size), ctx.train_nodes or int(options.batch_size))
    s = ctx.dtype_bytes
    avg_degree = (ctx.num_edges + ctx.num_nodes) / max(1, ctx.num_nodes)
    on_gpu = str(getattr(hw.device, "value", hw.device)) == "cuda"
    v0, t_load, t_trans, trainer_s = [], 0.0, 0.0, []
    for i, share in enumerate(shares):
        layers = frontier_sizes(batch * share, options.fanouts, ctx.num_nodes, avg_degree)
        rows0 = layers[0][0]
        v0.append(rows0)
        t_load += rows0 * ctx.feat_dim * s / (float(hw.host_mem_gbps) * 1e9)
        gpu = on_gpu and i >= cpu
        if i >= cpu:
            t_trans = max(t_trans, rows0 * ctx.feat_dim * s / (float(hw.h2d_gbps) * 1e9))
        bw = float(hw.device_mem_gbps if gpu else hw.host_mem_gbps) * 1e9
        macs = float(hw.device_gmacs if gpu else hw.core_gmacs * threads) * 1e9
        dst_rows = [r for r, _ in layers[1:]] + [batch * share]
        agg = [e * d_in * s / bw for (_, e), d_in in zip(layers, ctx.comm_widths)]
        upd = [n * a * b / macs for n, a, b in zip(dst_rows, ctx.dims[:-1], ctx.dims[1:])]
        forward = sum(agg) + sum(upd)
        backward = upd[0] + sum(agg[1:]) + sum(upd[1:])
        trainer_s.append(forward + backward)
    t_sync = 2 * ctx.param_bytes / (float(hw.h2d_gbps) * 1e9)
    t_prop = max(trainer_s) + t_sync
    return {"T_load_s": t_load, "T_trans_s": t_trans, "T_sync_s": t_sync, "T_prop_s": t_prop,
            "T_exec_s": max(t_load, t_trans, t_prop), "V0_per_trainer": [round(v, 1) for v in v0]}


# --------------------------------------------------------------- pipeline
@dataclass
class Batch:
    k: int  # global iteration
    seeds: torch.Tensor
    sizes: List[int]
    shares: Tuple[float, ...]
    input_nodes: torch.Tensor
    blocks: List[Block]
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    ready: Optional[Any] = None  # CUDA event the trainer waits on
    seconds: Dict[str, float] = field(default_factory=dict)


class BatchPipeline:
    """HyScale-GNN §IV-B: sample+gather (thread 1) → transfer (thread 2) → train (caller).

    The share gate keeps sampling at most two batches ahead of training; with
    ``prefetch=False`` the caller runs the three stages itself, in order.
    """

    def __init__(self, sample_load: Callable[[int], Batch], transfer: Callable[[Batch], Batch],
                 ks: Sequence[int], prefetch: bool):
        self.sample_load, self.transfer, self.ks, self.prefetch = sample_load, transfer, list(ks), prefetch
        self._out: "queue.Queue" = queue.Queue(maxsize=1)
        if prefetch:
            loaded: "queue.Queue" = queue.Queue(maxsize=1)
            threading.Thread(target=self._run, args=(lambda k: self.sample_load(k), None, loaded),
                             daemon=True, name="hyscale-load").start()
            threading.Thread(target=self._run, args=(lambda b: self.transfer(b), loaded, self._out),
                             daemon=True, name="hyscale-transfer").start()

    def _run(self, fn, inbox, outbox) -> None:
        for k in self.ks:
            try:
                item = inbox.get() if inbox is not None else k
                if isinstance(item, BaseException):
                    raise item
                outbox.put(fn(item))
            except BaseException as exc:  # hand it to the trainer, which raises it
                outbox.put(exc)
                return

    def __iter__(self):
        for k in self.ks:
            if self.prefetch:
                item = self._out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
            else:
                yield self.transfer(self.sample_load(k))


# ------------------------------------------------------------------- mode
@register_mode
class HyScaleMode(Mode):
    name = "hyscale"
    config_class = HyScaleConfig
    exact = False  # mini-batch training; one step with fanout -1 equals the union-batch step
    models = ("gcn", "sage", "gin")
    models_rule = "HyScale trains the aggregate/update models on sampled blocks; GAT is not wired to blocks here."

    @property
    def trainers(self) -> int:
        return int(self.options.cpu_trainers) + int(self.options.accel_trainers)

    def world_size(self, hardware_world_size: int) -> int:
        return max(0, self.trainers)  # one rank per trainer, whatever hardware.ranks_per_node says

    def num_parts(self, world_size: int) -> int:
        return 1  # no partitioning: every trainer reads the whole graph from host memory

    def rank_devices(self, device: str, world_size: int, ranks_per_node: int) -> Tuple[str, ...]:
        cpu = int(self.options.cpu_trainers)
        gpus = max(1, int(self.cfg.hardware.gpus_per_node or 1))
        return tuple("cpu" if r < cpu or device != "cuda" else f"cuda:{(r - cpu) % gpus}"
                     for r in range(world_size))

    def validate(self, ctx) -> List[str]:
        o, cfg = self.options, self.cfg
        cpu, acc = int(o.cpu_trainers), int(o.accel_trainers)
        if cpu < 0 or acc < 0 or cpu + acc == 0:
            raise PlanError("mode.cpu_trainers/mode.accel_trainers", f"{cpu} CPU + {acc} accelerator trainers: "
                            "at least one trainer is needed and neither count may be negative.",
                            "set mode.cpu_trainers=1 mode.accel_trainers=1")
        fanouts = [int(f) for f in o.fanouts]
        if len(fanouts) != int(cfg.model.layers):
            raise PlanError("mode.fanouts", f"{len(fanouts)} fanouts for a {cfg.model.layers}-layer model: one "
                            "fanout per layer is needed.", f"give {cfg.model.layers} fanouts, or set model.layers="
                            f"{len(fanouts)}")
        if any(f == 0 or f < -1 for f in fanouts):
            raise PlanError("mode.fanouts", f"fanouts {fanouts}: each must be a positive count or -1 (all "
                            "neighbours).", "use e.g. mode.fanouts=[25,10] or [-1,-1]")
        if int(o.batch_size) < cpu + acc:
            raise PlanError("mode.batch_size", f"a global batch of {o.batch_size} cannot give each of the "
                            f"{cpu + acc} trainers a seed.", f"use mode.batch_size >= {cpu + acc}")
        if acc > 0 and str(getattr(cfg.hardware.device, "value", cfg.hardware.device)) == "cuda" \
                and not torch.cuda.is_available():
            raise PlanError("mode.accel_trainers", f"{acc} accelerator trainers on a CUDA profile, but no CUDA "
                            "device is available here.", "use hardware=local-cpu (accelerator trainers then run "
                            "as CPU processes), or mode.accel_trainers=0")
        for key, values in (("mode.shares", o.shares), ("mode.slowdown", o.slowdown)):
            if values and len(values) != cpu + acc:
                raise PlanError(key, f"{len(values)} values for {cpu + acc} trainers.",
                                f"give one value per trainer, or leave {key} empty")
        if o.shares and any(float(s) <= 0 for s in o.shares):
            raise PlanError("mode.shares", f"shares {list(o.shares)} must all be positive.",
                            "use positive fractions, e.g. [0.3, 0.7]")
        if any(float(s) < 1 for s in o.slowdown):
            raise PlanError("mode.slowdown", "a slowdown factor below 1 would speed a trainer up.",
                            "use factors >= 1 (1 = as fast as the hardware)")
        if not 0.0 <= float(o.drm_min_share) <= 1.0 / (cpu + acc):
            raise PlanError("mode.drm_min_share", f"{o.drm_min_share} is outside [0, 1/{cpu + acc}]: the floors "
                            "could not sum to at most the whole batch.", "use e.g. mode.drm_min_share=0.05")
        if not 0.0 < float(o.drm_ema) <= 1.0:
            raise PlanError("mode.drm_ema", f"{o.drm_ema} is outside (0, 1].", "use e.g. mode.drm_ema=0.5")
        warnings = []
        if acc and str(getattr(cfg.hardware.device, "value", cfg.hardware.device)) == "cpu":
            warnings.append(f"CPU-only profile: the {acc} accelerator trainer(s) run as CPU processes")
        return warnings

    def _threads(self) -> int:
        hw = self.cfg.hardware
        return max(1, host_cores(hw) // max(1, min(self.trainers, int(hw.ranks_per_node))))

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        model = predict_times(ctx, self.cfg.hardware, self.options, self._threads())
        acc = int(self.options.accel_trainers)
        by_kind = {"allreduce": ctx.world_size * ctx.param_bytes} if ctx.world_size > 1 else {}
        if acc:
            rows = sum(model["V0_per_trainer"][int(self.options.cpu_trainers):])
            by_kind["h2d"] = int(rows * ctx.feat_dim * ctx.dtype_bytes)
        return CommEstimate(None, by_kind, "per iteration (x ceil(train nodes / batch_size) per epoch): allreduce = "
                            "trainers x model bytes; h2d = sum over accelerator trainers |V0_i| x f0 x dtype bytes "
                            "(features; + the sampled topology)")

    def details(self, ctx) -> Dict[str, Any]:
        o = self.options
        model = predict_times(ctx, self.cfg.hardware, o, self._threads())
        ms = {k[:-2] + " ms": round(v * 1e3, 4) for k, v in model.items() if k.endswith("_s")}
        return {"trainers": f"{o.cpu_trainers} CPU + {o.accel_trainers} accelerator", "fanouts": list(o.fanouts),
                "global batch": int(o.batch_size), "initial shares": [round(s, 4) for s in
                                                                      initial_shares(o, self.trainers)],
                "prefetch": bool(o.prefetch), "drm": bool(o.drm), "performance model (per iteration)": ms,
                "predicted |V0| per trainer": model["V0_per_trainer"]}

    # ------------------------------------------------------------- prepare
    def prepare(self, data, plan, ranks: Optional[Sequence[int]] = None) -> Prepared:
        start = time.perf_counter()
        src, dst, w = graph_tensors(data, self.cfg)
        masks = data.masks
        counts = {s: int(masks[s].sum()) for s in SPLITS}
        shards = [RankShard(rank=r, world_size=plan.world_size, num_global_nodes=data.num_nodes,
                            num_classes=data.num_classes, features=data.features, labels=data.labels,
                            count_masks=dict(masks), global_counts=counts, global_ids=torch.arange(data.num_nodes),
                            edges=(dst, src, w))
                  for r in (range(plan.world_size) if ranks is None else ranks)]
        return Prepared(shards=shards, partition={"num_parts": 1, "edge_cut": 0, "total_volume": 0,
                                                  "max_send_volume": 0, "replicated": "whole graph per trainer"},
                        preprocess_s=time.perf_counter() - start)

    # ---------------------------------------------------------------- train
    def train_rank(self, shard: RankShard, ctx) -> Dict[str, Any]:
        return HyScaleTrainer(self, shard, ctx).run()


class HyScaleTrainer:
    """One trainer rank's loop (§III-B): pipeline, weighted sync, DRM, evaluation."""

    def __init__(self, mode: HyScaleMode, shard: RankShard, ctx):
        self.o, self.shard, self.ctx = mode.options, shard, ctx
        self.cfg = ctx.plan.config_obj
        self.comm, self.device, self.dtype = ctx.comm, ctx.device, ctx.dtype
        self.rank, self.world = ctx.comm.rank, ctx.comm.world_size
        cpu = int(self.o.cpu_trainers)
        self.accel = [r >= cpu for r in range(self.world)]
        self.is_accel = self.accel[self.rank]
        self.gpu = self.device.type == "cuda"
        self.seed = int(self.cfg.train.seed)
        dst, src, w = shard.edges
        self.sampler = NeighborSampler(dst, src, w, shard.num_global_nodes, self.o.fanouts)
        self.drop_gen = torch.Generator(device=self.device)  # reseeded per global batch (see step)
        self.features = shard.features.to(self.dtype)  # host memory only (§III-B)
        if self.gpu:
            self.stream = torch.cuda.Stream(self.device)  # transfers overlap compute on a side stream
        self.through_host = ctx.plan.backend == "gloo"  # gloo reduces host buffers: stage GPU gradients
        self.train_ids = shard.count_masks["train"].nonzero().flatten()
        self.schedule = ShareSchedule()
        slow = [float(s) for s in self.o.slowdown]
        self.slowdown = slow[self.rank] if slow else 1.0

    # ---- stages
    def sample_load(self, k: int, batches: Dict[int, torch.Tensor]) -> Batch:
        shares = self.schedule.get(k)
        t0 = time.perf_counter()
        seeds, sizes = trainer_slice(batches[k], shares, self.rank)
        input_nodes, blocks = self.sampler.sample(seeds, batch_seed(self.seed, self.rank, k))
        t1 = time.perf_counter()
        if self.gpu:  # gather straight into pinned memory so that the copy can be asynchronous
            x = torch.empty((input_nodes.numel(), self.features.shape[1]), dtype=self.dtype, pin_memory=True)
            torch.index_select(self.features, 0, input_nodes, out=x)
        else:
            x = self.features[input_nodes]
        y = self.shard.labels[seeds]
        t2 = time.perf_counter()
        return Batch(k, seeds, sizes, shares, input_nodes, blocks, x, y,
                     seconds={"sample": t1 - t0, "load": t2 - t1})

    def transfer(self, b: Batch) -> Batch:
        """Host → accelerator: features and topology (``h2d``); CPU trainers skip it."""
        t0 = time.perf_counter()
        if self.is_accel:
            to = self.comm.to_device
            if self.gpu:
                with torch.cuda.stream(self.stream):
                    b.x, b.y = to(b.x, self.device), to(b.y, self.device)
                    b.blocks = [Block(to(bl.dst, self.device), to(bl.src, self.device), to(bl.weight, self.device),
                                      bl.num_dst, bl.num_src) for bl in b.blocks]
                    b.ready = torch.cuda.Event()
                    b.ready.record(self.stream)
                b.ready.synchronize()  # the transfer stage ends when its bytes have landed
            else:
                b.x = to(b.x, self.device)
                b.blocks = [Block(to(bl.dst, self.device), to(bl.src, self.device), to(bl.weight, self.device),
                                  bl.num_dst, bl.num_src) for bl in b.blocks]
        b.seconds["transfer"] = time.perf_counter() - t0
        return b

    def dropout(self, h: torch.Tensor) -> torch.Tensor:
        p = float(self.cfg.model.dropout)
        if p <= 0:
            return h
        keep = torch.rand(h.shape, generator=self.drop_gen, device=h.device, dtype=h.dtype) >= p
        return h * keep / (1.0 - p)

    def step(self, b: Batch, model, optimizer, params) -> Tuple[float, float, float]:
        """Forward/backward on this trainer's slice, weighted SUM all-reduce, update:
        (Σ CE, train seconds, sync seconds)."""
        t0 = time.perf_counter()
        total = sum(b.sizes)
        optimizer.zero_grad(set_to_none=False)
        ce = 0.0
        if b.ready is not None:  # made on the side stream: keep the allocator from reusing them too early
            for t in [b.x, b.y] + [t for bl in b.blocks for t in (bl.dst, bl.src, bl.weight)]:
                t.record_stream(torch.cuda.current_stream(self.device))
        if b.seeds.numel():
            # dropout masks depend on (seed, trainer, global batch) only, so a resumed run replays them
            self.drop_gen.manual_seed(batch_seed(self.seed * 31 + 1, self.rank, b.k))
            kernel = self.ctx.plan.kernel
            adjs = [SparseAdjacency(bl.dst, bl.src, bl.weight, bl.num_dst, bl.num_src, kernel=kernel,
                                    device=self.device) for bl in b.blocks]
            x = b.x.to(self.device, non_blocking=True)
            y = b.y.to(self.device)
            logits = block_forward(model, adjs, x, self.dropout)
            loss_sum = F.cross_entropy(logits, y, reduction="sum")
            (loss_sum / total).backward()  # weight b_i/B on this trainer's mean gradient
            ce = float(loss_sum.detach())
        if self.gpu:
            torch.cuda.synchronize(self.device)
        train_s = time.perf_counter() - t0
        if self.slowdown > 1:  # emulate a slower device: the same work takes slowdown x as long
            time.sleep((self.slowdown - 1.0) * train_s)
            train_s *= self.slowdown
        t1 = time.perf_counter()
        sync_gradients(params, self.comm, through_host=self.through_host)
        sync_s = time.perf_counter() - t1
        optimizer.step()
        return ce, train_s, sync_s

    # ---- loop
    def run(self) -> Dict[str, Any]:
        cfg, comm, ledger, o = self.cfg, self.comm, self.comm.ledger, self.o
        setup_start = time.perf_counter()
        spec = model_spec(cfg, self.features.shape[1], self.shard.num_classes)
        model = build_model(spec, self.seed, self.dtype).to(self.device)
        params = list(model.parameters())
        optimizer = torch.optim.Adam(params, lr=float(cfg.train.lr), weight_decay=float(cfg.train.weight_decay))
        epochs, batch_size = int(cfg.train.epochs), int(o.batch_size)
        per_epoch = math.ceil(self.train_ids.numel() / batch_size)
        n_train = max(1, self.shard.global_counts["train"])
        threads = {"T_SC": 1, "T_Load": 1, "T_TC": int(self.ctx.plan.threads_per_rank)}
        state = DRMState(shares=initial_shares(o, self.world), threads=threads)
        history: List[Dict[str, Any]] = []
        accuracy: Dict[str, float] = {}
        start_epoch = 0
        checkpointer = run_checkpointer(cfg, self.ctx.run_dir, self.ctx.plan.plan_hash)
        if checkpointer is not None and resume_requested(cfg):
            saved = checkpointer.load_latest()
            if saved is not None:
                model.load_state_dict(saved["model"])
                optimizer.load_state_dict(saved["optimizer"])
                history, start_epoch = list(saved["history"]), int(saved["epoch"])
                state = DRMState(shares=tuple(history[-1]["hyscale"]["shares"]), threads=threads)
        first = start_epoch * per_epoch
        for k in range(first, first + DRM_LAG):
            self.schedule.set(k, state.shares)
        evaluator = Evaluator(self, model) if self.rank == 0 else None
        recorder = self.ctx.recorder
        if recorder is not None:
            recorder.start(epochs, resumed=history)
        boundary = preemption_boundary(checkpointer, self.rank)
        setup_s = time.perf_counter() - setup_start
        for epoch in range(start_epoch, epochs):
            ledger.reset(Phase.train)
            inject_fault(self.rank, epoch)
            model.train()
            first_k = epoch * per_epoch
            batches = {first_k + j: b for j, b in enumerate(global_batches(self.train_ids, batch_size, self.seed,
                                                                            epoch))}
            iterations, ce_sum, t_epoch = [], 0.0, time.perf_counter()
            stage_tot = dict.fromkeys(STAGES + ("sync", "wait"), 0.0)
            with ledger.in_phase(Phase.train):
                pipeline = BatchPipeline(lambda k: self.sample_load(k, batches), self.transfer, sorted(batches),
                                         bool(o.prefetch))
                t_wait = time.perf_counter()
                for b in pipeline:
                    wait_s = time.perf_counter() - t_wait
                    t_iter = time.perf_counter() - wait_s
                    ce, train_s, sync_s = self.step(b, model, optimizer, params)
                    ce_sum += ce
                    mine = dict(b.seconds, train=train_s, sync=sync_s, wait=wait_s)
                    for key in stage_tot:
                        stage_tot[key] += mine.get(key, 0.0)
                    # every trainer's stage times, for DRM and the log (bookkeeping, not training traffic)
                    slots = [0.0] * (len(STAGES) + 1) * self.world
                    base = self.rank * (len(STAGES) + 1)
                    slots[base:base + len(STAGES) + 1] = [mine[s] for s in STAGES] + [sync_s]
                    gathered = comm.reduce_stats(slots)
                    times = [dict(zip(STAGES + ("sync",), gathered[r * 5:(r + 1) * 5])) for r in range(self.world)]
                    iter_s = time.perf_counter() - t_iter
                    decision = ""
                    if o.drm and b.k >= DRM_WARMUP:
                        state = drm_step(state, times, b.sizes, self.accel, float(o.drm_ema),
                                         float(o.drm_min_share))
                        decision = f"{state.bottleneck}: {state.action}"
                    self.schedule.set(b.k + DRM_LAG, state.shares)
                    iterations.append({"iter": b.k, "shares": [round(s, 5) for s in b.shares], "batch": b.sizes,
                                       "input_rows": int(b.input_nodes.numel()),
                                       "stage_s": {s: [round(t[s], 6) for t in times] for s in STAGES + ("sync",)},
                                       "iter_s": round(iter_s, 6), "drm": decision})
                    t_wait = time.perf_counter()
            epoch_s = time.perf_counter() - t_epoch
            record = self._epoch_record(epoch, ce_sum, n_train, epoch_s, stage_tot, iterations, state, evaluator)
            if "train_acc" in record:
                accuracy = {s: record[f"{s}_acc"] for s in SPLITS}
            history.append(record)
            if boundary is not None:  # before the metrics line: an epoch shown there survives preemption
                boundary.update(epoch + 1, model, optimizer, history)
            if recorder is not None:
                recorder.epoch(record)
            every = int(cfg.train.checkpoint_every)
            if checkpointer is not None and every and (epoch + 1) % every == 0 and self.rank == 0:
                checkpointer.save(epoch + 1, model, optimizer, history)
        if boundary is not None:
            boundary.close()
        return {"history": history, "accuracy": accuracy, **run_totals(self.ctx, setup_s), "model": model,
                "mode_report": self._report(history) if self.rank == 0 else None}

    def _epoch_record(self, epoch, ce_sum, n_train, epoch_s, stage_tot, iterations, state, evaluator):
        comm, ledger = self.comm, self.comm.ledger
        evaluate = (epoch + 1) % int(self.cfg.train.eval_every) == 0 or epoch + 1 == int(self.cfg.train.epochs)
        correct = [0.0, 0.0, 0.0]
        if evaluate and evaluator is not None:
            with ledger.in_phase(Phase.eval):
                correct = evaluator.correct()
        record = epoch_record(comm, epoch, ce_sum, correct if evaluate else None, epoch_s, stage_tot,
                              self.shard.global_counts, loss_divisor=n_train, other_stage=False)
        record["hyscale"] = {"shares": list(state.shares), "threads": dict(state.threads), "iterations": iterations}
        return record

    def _report(self, history: List[Dict[str, Any]]) -> Dict[str, Any]:
        """summary.json ``mode_report``: shares and stage times per trainer, predicted vs measured."""
        its = [it for h in history for it in h["hyscale"]["iterations"]]
        med = statistics.median
        per_trainer = {s: [med(it["stage_s"][s][r] for it in its) for r in range(self.world)]
                       for s in STAGES + ("sync",)}
        accel = self.accel

        def measured(it) -> Dict[str, float]:
            st = it["stage_s"]
            trans = [t for t, a in zip(st["transfer"], accel) if a]
            sync = max(st["sync"])
            return {"T_samp_s": max(st["sample"]), "T_load_s": sum(st["load"]), "T_trans_s": max(trans or [0.0]),
                    "T_sync_s": sync, "T_prop_s": max(st["train"]) + sync, "T_exec_s": it["iter_s"]}

        rows = [measured(it) for it in its]
        got = {k: med(r[k] for r in rows) for k in rows[0]} if rows else {}
        details = self.ctx.plan.mode_details
        predicted = {k[:-3] + "_s": v / 1e3 for k, v in details["performance model (per iteration)"].items()}
        predicted["V0_per_trainer"] = details["predicted |V0| per trainer"]
        return {
            "trainers": [("accel" if a else "cpu") + f":{d}" for a, d in zip(accel, self.ctx.plan.rank_devices)],
            "shares_final": [round(s, 5) for s in history[-1]["hyscale"]["shares"]],
            "shares_per_iteration": [it["shares"] for it in its],
            "batch_per_iteration": [it["batch"] for it in its],
            "stage_time_median_s": per_trainer,
            "predicted_vs_measured_s": {k: {"predicted": predicted.get(k), "measured": got.get(k)}
                                        for k in ("T_samp_s", "T_load_s", "T_trans_s", "T_sync_s", "T_prop_s",
                                                  "T_exec_s")},
            "input_rows_rank0_median": med(it["input_rows"] for it in its) if its else None,
            "predicted_V0_per_trainer": predicted.get("V0_per_trainer"),
            "iterations": len(its), "prefetch": bool(self.o.prefetch), "drm": bool(self.o.drm),
            "table": [["final shares", " / ".join(f"{s:.3f}" for s in history[-1]["hyscale"]["shares"])]]
            + [[f"{k[:-2]} predicted / measured", f"{_ms(predicted.get(k))} / {_ms(got.get(k))}"]
               for k in ("T_samp_s", "T_load_s", "T_trans_s", "T_sync_s", "T_prop_s", "T_exec_s")],
        }


def _ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


class Evaluator:
    """Full-neighbour inference on rank 0 (fanout -1 everywhere = the whole graph,
    layer by layer, with the global-degree weights) on the host."""

    def __init__(self, trainer: HyScaleTrainer, model):
        self.trainer, self.model = trainer, model
        dst, src, w = trainer.shard.edges
        n = trainer.shard.num_global_nodes
        self.adj = SparseAdjacency(dst, src, w, n, n, kernel=trainer.ctx.plan.kernel)
        self.masks = trainer.shard.count_masks

    def correct(self) -> List[float]:
        model = self.model
        if next(model.parameters()).device.type != "cpu":
            model = copy.deepcopy(model).cpu()
        model.eval()
        with torch.no_grad():
            pred = model(self.trainer.features.cpu(), self.adj.spmm).argmax(dim=1)
        self.model.train()
        labels = self.trainer.shard.labels
        return [float(((pred == labels) & self.masks[s]).sum()) for s in SPLITS]
