"""``mode=hongtu``: full-graph training with host-resident vertex data, chunked
layer-major execution, a recomputation–caching hybrid and deduplicated
transfers (papers/hongtu.txt; notes/hongtu.md).

Placement (§4). Each rank is one device with its host memory. The host holds,
for the rank's partition, every layer's input x^l, its gradient ∇x^l and the
cached aggregation outputs; the device (a GPU, or on CPU hosts an accounted
memory arena capped by ``mode.device_memory``) holds one chunk's working set
at a time. A row another rank's host owns reaches this device over
torch.distributed; it is still counted as ``h2d`` (on one node it would cross
PCIe from shared host memory), while device-to-device copies are ``peer``.

Schedule (Algorithm 1). Forward is layer-major: for each layer, for each
batch, gather x^l[N_ij], run the layer on chunk G_ij, write x^{l+1}[V_ij] (and
the aggregation a^l[V_ij]) back to the host. The loss is taken on the host;
backward runs the layers in reverse, each batch reloading ∇x^{l+1}[V_ij] and
recomputing from the cached a^l (GCN/SAGE/GIN: only the update is redone) or
from reloaded neighbours (GAT: the whole layer). ∇x^l[N_ij] is ⊕-added into
host memory. Parameter gradients are all-reduced once per epoch (SUM) by the
shared full-graph loop, which sees the whole schedule as one autograd node.

Deduplication (§5). ``p2p``: within a batch each row is loaded by its owner
only, others get it by peer exchange. ``reuse``: rows needed by the next batch
stay on the device; gradient rows still needed stay and keep accumulating.
Both follow one general keep/flush rule (keep D_t ∩ D_{t+1}, where D_t is
what the device holds at batch t), not the paper's reverse-order assumption.
"""
from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from gnntrain.config.schema import ModeConfig
from gnntrain.data import resolve_cache_dir
from gnntrain.errors import PlanError
from gnntrain.models import SparseAdjacency, transposed
from gnntrain.modes.base import CommEstimate, Mode, Prepared, RankShard, register_mode
from gnntrain.modes.fullgraph import SPLITS, train_full_graph
from gnntrain.modes.single import graph_tensors
from gnntrain.partition import partition_graph, partitioner_options
from gnntrain.plan import DTYPE_BYTES, param_bytes
from gnntrain.partition.cache import PartitionCache, cache_key
from gnntrain.partition.chunks import ChunkLayout, chunk_layout, identity_batches, reorganize, transfer_volumes
from gnntrain.runtime import StageClock

DEDUP = ("none", "p2p", "reuse", "p2p+reuse")
CACHED_MODELS = ("gcn", "sage", "gin")  # element-wise aggregation: cache a^l, recompute the update
SELF_ROW_MODELS = ("sage", "gin")  # the update reads the destination's own input row
REORGANIZE_VERSION = 3  # bump when Algorithm 4 changes: cached batch orders are keyed by it


@dataclass
class HongTuConfig(ModeConfig):
    name: str = "hongtu"
    chunks: int = 4  # n chunks per partition; 0 = the smallest n whose device working set fits device_memory
    dedup: str = "p2p+reuse"  # none | p2p | reuse | p2p+reuse
    reorganize: bool = True  # greedy chunk-to-batch assignment and batch order (Algorithm 4), cached
    device_memory: Optional[str] = None  # e.g. "1GiB"; null = the hardware profile's device_memory_gb (0 = no cap)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: Any) -> int:
    """'1GiB', '512MiB', '2GB', '1e9' or a number → bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise PlanError("mode.device_memory", f"cannot read {text!r} as a size.", "write e.g. 1GiB, 512MiB or 2GB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3f} GiB" if nbytes >= 2**27 else f"{nbytes / 2**20:.2f} MiB"


# ------------------------------------------------------------- device memory
class DeviceMemoryExceeded(RuntimeError):
    pass


class DeviceArena:
    """Bytes one rank holds on its device, by purpose, with the peak; capped.

    On CUDA the tensors really live on the GPU (and ``torch.cuda`` reports its
    own peak too); on CPU hosts the same code path runs and this ledger is the
    device. The recompute working set is measured from autograd's saved
    tensors (:meth:`saved_tensors`).
    """

    def __init__(self, cap: int):
        self.cap = int(cap)
        self.held: Dict[str, int] = {}
        self.now = 0
        self.peak = 0

    def hold(self, tag: str, nbytes: int) -> None:
        self.now += int(nbytes) - self.held.get(tag, 0)
        self.held[tag] = int(nbytes)
        if self.now > self.peak:
            self.peak = self.now
            if self.cap and self.peak > self.cap:
                parts = ", ".join(f"{k} {_gib(v)}" for k, v in self.held.items() if v)
                raise DeviceMemoryExceeded(
                    f"device working set {_gib(self.peak)} exceeds mode.device_memory {_gib(self.cap)} ({parts}); "
                    "raise mode.device_memory or mode.chunks (chunks=0 picks the smallest n that fits)")

    def hold_tensors(self, tag: str, *tensors: Optional[torch.Tensor]) -> None:
        self.hold(tag, tensor_bytes(*tensors))

    def rename(self, old: str, new: str) -> None:
        """The bytes held as ``old`` are now held as ``new`` (e.g. this batch's rows become the previous)."""
        self.drop(new)
        self.held[new] = self.held.pop(old, 0)

    def drop(self, *tags: str) -> None:
        for tag in tags:
            self.now -= self.held.pop(tag, 0)

    @contextmanager
    def saved_tensors(self, tag: str, exclude: Sequence[torch.Tensor] = ()) -> Iterator[None]:
        """Count what autograd saves for backward inside the block (each storage once)."""
        seen = {t.data_ptr() for t in exclude}
        total = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total[0] += t.numel() * t.element_size()
                self.hold(tag, total[0])
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield


def tensor_bytes(*tensors: Optional[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


# ------------------------------------------------------------------ schedule
def _as_index(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def _positions(sorted_ids: np.ndarray, ids: np.ndarray) -> torch.Tensor:
    return _as_index(np.searchsorted(sorted_ids, ids))


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.int64)


@dataclass
class Step:
    """What one rank does at one position of a sweep over the batches.

    ``resident`` is D_t, the sorted rows the device holds (own or foreign);
    ``kept_*`` are the rows of D_{t−1} ∩ D_t that stay (reuse). Forward
    sweeps use the *arrival* fields (rows that come in: own host loads, and
    rows from other ranks), backward sweeps the *eviction* fields (rows that
    leave: own rows to the host, foreign rows to their owner).
    """

    chunk: int
    resident: np.ndarray
    need_pos: Optional[torch.Tensor]  # N_t within D_t (None when D_t == N_t)
    kept_prev: torch.Tensor
    kept_now: torch.Tensor
    # arrivals
    load_rows: torch.Tensor  # own host rows loaded (local index)
    load_pos: torch.Tensor
    give_counts: List[int]  # rows this rank hands each rank (from its device with p2p, else its host)
    give_index: torch.Tensor  # positions in D_t (p2p) or own host rows (no p2p), by destination
    take_counts: List[int]
    take_pos: torch.Tensor  # positions in D_t of rows from other ranks, by source
    # evictions
    flush_pos: torch.Tensor  # own rows leaving the device → own host (⊕-add)
    flush_rows: torch.Tensor
    send_counts: List[int]  # foreign rows leaving the device, by owner
    send_pos: torch.Tensor
    recv_counts: List[int]
    recv_index: torch.Tensor  # positions in D_t (p2p) or own host rows (no p2p), by source


@dataclass
class Sweep:
    steps: List[Step]
    p2p: bool
    needs_exchange: bool  # some rank moves rows between ranks during this sweep


def build_sweep(layout: ChunkLayout, order: np.ndarray, rank: int, dedup: str) -> Sweep:
    """Rank ``rank``'s steps over the batches in ``order`` (rows of chunk indices per partition)."""
    m = layout.num_parts
    p2p, reuse = "p2p" in dedup, "reuse" in dedup
    po = layout.part_offsets
    lo = int(po[rank])
    need = [[layout.neighbours[layout.chunk(k, int(row[k]))] for k in range(m)] for row in order]

    def split_by_owner(rows: np.ndarray) -> List[np.ndarray]:
        cuts = np.searchsorted(rows, po)
        return [rows[cuts[k]:cuts[k + 1]] for k in range(m)]

    resident: List[List[np.ndarray]] = []  # D[t][k]
    for t, sets in enumerate(need):
        if p2p:
            union = np.unique(np.concatenate(sets))
            owned = split_by_owner(union)  # L_k,t = U_t ∩ own_k
            resident.append([np.union1d(sets[k], owned[k]) for k in range(m)])
        else:
            resident.append(list(sets))
    steps_t = len(order)

    def kept(k: int, t: int) -> np.ndarray:
        if not reuse or t == 0:
            return _empty()
        return np.intersect1d(resident[t - 1][k], resident[t][k], assume_unique=True)

    def arrivals(k: int, t: int) -> List[np.ndarray]:
        return split_by_owner(np.setdiff1d(resident[t][k], kept(k, t), assume_unique=True))

    def evictions(k: int, t: int) -> List[np.ndarray]:
        if reuse and t + 1 < steps_t:
            return split_by_owner(np.setdiff1d(resident[t][k], resident[t + 1][k], assume_unique=True))
        return split_by_owner(resident[t][k])

    # every rank takes part in an exchange if any rank holds a row it does not own
    moves = m > 1 and any(np.any((d < po[k]) | (d >= po[k + 1])) for sets in resident for k, d in enumerate(sets))
    steps = []
    for t in range(steps_t):
        d_t = resident[t][rank]
        mine = need[t][rank]
        kept_rows = kept(rank, t)
        prev = resident[t - 1][rank] if t else _empty()
        arrive = arrivals(rank, t)
        others_arrive = [arrivals(k, t)[rank] if k != rank else _empty() for k in range(m)]
        evict = evictions(rank, t)
        others_evict = [evictions(k, t)[rank] if k != rank else _empty() for k in range(m)]
        give = [others_arrive[k] for k in range(m)]
        take = [arrive[k] if k != rank else _empty() for k in range(m)]
        send = [evict[k] if k != rank else _empty() for k in range(m)]
        recv = others_evict
        give_all = np.concatenate(give)
        recv_all = np.concatenate(recv)
        steps.append(Step(
            chunk=layout.chunk(rank, int(order[t][rank])), resident=d_t,
            need_pos=None if d_t.size == mine.size else _positions(d_t, mine),
            kept_prev=_positions(prev, kept_rows), kept_now=_positions(d_t, kept_rows),
            load_rows=_as_index(arrive[rank] - lo), load_pos=_positions(d_t, arrive[rank]),
            give_counts=[x.size for x in give],
            give_index=_positions(d_t, give_all) if p2p else _as_index(give_all - lo),
            take_counts=[x.size for x in take], take_pos=_positions(d_t, np.concatenate(take)),
            flush_pos=_positions(d_t, evict[rank]), flush_rows=_as_index(evict[rank] - lo),
            send_counts=[x.size for x in send], send_pos=_positions(d_t, np.concatenate(send)),
            recv_counts=[x.size for x in recv],
            recv_index=_positions(d_t, recv_all) if p2p else _as_index(recv_all - lo),
        ))
    return Sweep(steps=steps, p2p=p2p, needs_exchange=bool(moves))


# ------------------------------------------------------------- cost and size
def bandwidths(hardware) -> Dict[str, float]:
    """Bytes/s for the cost model: host→device, device↔device, on-device reuse."""
    return {"h2d": float(hardware.h2d_gbps) * 1e9, "d2d": float(hardware.d2d_gbps) * 1e9,
            "reuse": float(hardware.device_mem_gbps) * 1e9}


def cost_model(volumes: Dict[str, int], row_bytes: int, bw: Dict[str, float]) -> Dict[str, float]:
    """C = V_ru/T_hd + (V_ori − V_p2p)/T_dd + (V_p2p − V_ru)/T_ru (§5.3), seconds for rows of ``row_bytes``."""
    terms = {"host_to_device_s": volumes["ru"] * row_bytes / bw["h2d"],
             "peer_s": (volumes["ori"] - volumes["p2p"]) * row_bytes / bw["d2d"],
             "reuse_s": (volumes["p2p"] - volumes["ru"]) * row_bytes / bw["reuse"]}
    terms["C_s"] = sum(terms.values())
    return terms


def chunk_working_bytes(layout: ChunkLayout, model: str, dims: Sequence[int], dtype_bytes: int,
                        param_bytes: int, dedup: str) -> int:
    """Upper estimate of the peak device bytes of any rank, any layer, any batch.

    Mirrors what :class:`HongTuEngine` holds: parameters and their gradient
    sums; the resident rows of two consecutive batches while one is assembled
    (forward inputs, or backward gradient sums); the chunk's topology (both
    directions); the chunk's aggregation, output and loaded gradient rows;
    and the recompute's saved tensors (a bound per model).
    """
    b = dtype_bytes
    peak = 0
    for c, rows in enumerate(layout.neighbours):
        v = int(layout.offsets[c + 1] - layout.offsets[c])
        e = int(layout.edge_bounds[c + 1] - layout.edge_bounds[c])
        nb = rows.size
        # with p2p a device also holds the rows it loads for others: at most the union of the batch
        resident = nb if "p2p" not in dedup else nb + (layout.num_parts - 1) * v
        topo = 2 * e * (16 + b)
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            common = 5 * param_bytes + topo + 2 * resident * d_in * b
            fwd = v * (d_in + 2 * d_out) * b
            bwd = nb * d_in * b + v * (3 * d_in + 2 * d_out) * b
            if model == "gat":
                saved = (resident * d_in + nb * (d_in + 2 * d_out + 4) + e * (d_out + 8)) * b
            else:
                saved = v * (3 * d_in + 6 * d_out) * b
            peak = max(peak, common + max(fwd, bwd + saved))
    return int(peak)


# ------------------------------------------------------------------- engine
class HongTuEngine:
    """One rank's host store, device arena and the layer-major schedule."""

    def __init__(self, shard: RankShard, ctx, model_name: str, dedup: str, cap: int):
        info = shard.info
        self.layout: ChunkLayout = info["layout"]
        self.batches: np.ndarray = info["batches"]
        self.ctx, self.comm, self.device, self.dtype = ctx, ctx.comm, ctx.device, ctx.dtype
        self.value_bytes = DTYPE_BYTES[ctx.plan.dtype]
        self.model_name, self.dedup = model_name, dedup
        self.rank = shard.rank
        self.lo = int(self.layout.part_offsets[self.rank])
        self.arena = DeviceArena(cap)
        self.clock = StageClock()
        self.pin = self.device.type == "cuda"
        self.fwd = build_sweep(self.layout, self.batches, self.rank, dedup)
        self.bwd = build_sweep(self.layout, self.batches[::-1], self.rank, dedup)
        dst, src, w = shard.edges  # relabelled ids, dst-sorted, dst within this part
        self.topology: Dict[int, Tuple[SparseAdjacency, SparseAdjacency, torch.Tensor, torch.Tensor]] = {}
        kernel = ctx.plan.kernel
        for step in self.fwd.steps:
            c = step.chunk
            v_lo, v_hi = self.layout.rows(c)
            e_lo, e_hi = (int(x) for x in torch.searchsorted(dst, torch.tensor([v_lo, v_hi])))
            rows = self.layout.neighbours[c]
            d_local = dst[e_lo:e_hi] - v_lo
            s_local = _positions(rows, src[e_lo:e_hi].numpy())
            v_pos = _positions(rows, np.arange(v_lo, v_hi))
            fwd = SparseAdjacency(d_local, s_local, w[e_lo:e_hi], v_hi - v_lo, rows.size, kernel=kernel)
            bwd = SparseAdjacency(s_local, d_local, transposed(w[e_lo:e_hi]), rows.size, v_hi - v_lo, kernel=kernel)
            self.topology[c] = (fwd, bwd, v_pos, torch.stack([d_local, s_local]))
        self.rows: Dict[Tuple[str, str], int] = {}  # (direction, kind) → rows of the current pass
        self.rows_last: Dict[Tuple[str, str], int] = {}  # ... of the last training epoch (forward + backward)
        self.p = 0.0
        self._cuda_adj: Dict[int, SparseAdjacency] = {}
        self.acts: List[torch.Tensor] = []
        self.cache: List[Optional[torch.Tensor]] = []
        self.masks: List[Optional[torch.Tensor]] = []

    # ---------------------------------------------------------- host memory
    def _host(self, shape, like: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(shape, dtype=like.dtype)
        return out.pin_memory() if self.pin else out

    def _local(self, c: int) -> slice:
        v_lo, v_hi = self.layout.rows(c)
        return slice(v_lo - self.lo, v_hi - self.lo)

    # ------------------------------------------------------------ transfers
    def _count(self, direction: str, kind: str, rows: int, width: int, seconds: float = 0.0,
               record: bool = True) -> None:
        self.rows[(direction, kind)] = self.rows.get((direction, kind), 0) + int(rows)
        if record and rows:
            self.comm.record_copy(kind, rows * width * self.value_bytes, seconds)

    def to_device(self, host: torch.Tensor, index, direction: str) -> torch.Tensor:
        """Load ``host[index]`` onto the device; the gather is part of the transfer's time (on a CPU
        arena it is the whole of it: the device copy itself is free)."""
        start = time.perf_counter()
        rows = host[index]
        out = rows.to(self.device, non_blocking=self.pin)
        self._count(direction, "h2d", rows.shape[0], rows.shape[1], time.perf_counter() - start)
        return out

    def to_host(self, host: torch.Tensor, index, rows: torch.Tensor, direction: str, add: bool) -> None:
        """Write (or ⊕-add) device rows into host memory; a plain write is part of the transfer's
        time, the ⊕-add is host accumulation."""
        start = time.perf_counter()
        moved = rows.to("cpu")
        if not add:
            host[index] = moved
        self._count(direction, "d2h", rows.shape[0], rows.shape[1], time.perf_counter() - start)
        if add:
            with self.clock.span("host_accumulate"):
                host.index_add_(0, index, moved) if isinstance(index, torch.Tensor) else host[index].add_(moved)

    def _carry(self, step: Step, prev: Optional[torch.Tensor], make, width: int, dtype: torch.dtype, tag: str,
               direction: str) -> torch.Tensor:
        """D_t's device buffer with the rows kept from D_{t−1} (reuse) copied in; the previous
        buffer is released once they are."""
        out = make((step.resident.size, width), dtype=dtype, device=self.device)
        self.arena.hold_tensors(tag, out)
        if prev is not None and step.kept_now.numel():
            out[step.kept_now.to(self.device)] = prev[step.kept_prev.to(self.device)]
        self._count(direction, "reused", step.kept_now.numel(), width)
        self.arena.drop(f"{tag}_prev")
        return out

    def gather(self, step: Step, sweep: Sweep, host: torch.Tensor, prev: Optional[torch.Tensor],
               direction: str) -> torch.Tensor:
        """Assemble D_t on the device: kept rows, own host loads, rows from other ranks."""
        width = host.shape[1]
        resident = self._carry(step, prev, torch.empty, width, host.dtype, f"{direction}_resident", direction)
        if step.load_rows.numel():
            resident[step.load_pos.to(self.device)] = self.to_device(host, step.load_rows, direction)
        if sweep.needs_exchange:
            if sweep.p2p:  # the owner loaded the rows; hand them over device to device
                outgoing = resident[step.give_index.to(self.device)]
                kind = "peer"
            else:  # rows straight from the owner's host
                outgoing = host[step.give_index].to(self.device)
                kind = "h2d"
            incoming = self.comm.all_to_all(outgoing, step.give_counts, step.take_counts, kind)
            self._count(direction, kind, step.take_pos.numel(), width, record=False)
            resident[step.take_pos.to(self.device)] = incoming.to(self.device)
        return resident

    def scatter_add(self, step: Step, sweep: Sweep, host: torch.Tensor, block: torch.Tensor,
                    prev: Optional[torch.Tensor], direction: str) -> torch.Tensor:
        """Accumulate the chunk's gradient rows into D_t; flush the rows leaving the device."""
        width = block.shape[1]
        acc = self._carry(step, prev, torch.zeros, width, block.dtype, f"{direction}_grad_sums", direction)
        if step.need_pos is None:
            acc += block
        else:
            acc.index_add_(0, step.need_pos.to(self.device), block)
        if sweep.needs_exchange:
            outgoing = acc[step.send_pos.to(self.device)]
            kind = "peer" if sweep.p2p else "d2h"
            incoming = self.comm.all_to_all(outgoing, step.send_counts, step.recv_counts, kind)
            self._count(direction, kind, step.send_pos.numel(), width, record=False)
            if sweep.p2p:
                acc.index_add_(0, step.recv_index.to(self.device), incoming.to(self.device))
            else:
                with self.clock.span("host_accumulate"):
                    host.index_add_(0, step.recv_index, incoming.to("cpu"))
        if step.flush_rows.numel():
            self.to_host(host, step.flush_rows, acc[step.flush_pos.to(self.device)], direction, add=True)
        return acc

    # --------------------------------------------------------------- layers
    def _activation(self, out: torch.Tensor, layer: int, c: int, last: bool) -> torch.Tensor:
        """relu then the replayed dropout mask of the next layer's input (GNN.forward's order)."""
        if last:
            return out
        out = torch.relu(out)
        mask = self.masks[layer + 1]
        if mask is not None:
            out = out * mask[self._local(c)].to(device=self.device, dtype=out.dtype) / (1.0 - self.p)
        return out

    def _layer_forward(self, layer_mod, layer: int, c: int, h_n: torch.Tensor, cache: bool
                       ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        fwd_adj, _, v_pos, edges = self.topology[c]
        v_pos = v_pos.to(self.device)
        if self.model_name == "gat":
            edges = edges.to(self.device)
            return layer_mod.update(None, layer_mod.attend(h_n, edges[0], edges[1], v_pos)), None
        agg = self._device_adj(fwd_adj).spmm(h_n)
        h_v = h_n[v_pos]
        return layer_mod.update(h_v, layer_mod.aggregate(h_v, lambda _: agg)), (agg if cache else None)

    def _device_adj(self, adj: SparseAdjacency) -> SparseAdjacency:
        if self.device.type == "cpu":
            return adj
        key = id(adj)
        if key not in self._cuda_adj:
            self._cuda_adj[key] = adj.to(self.device, kernel="torch")
        return self._cuda_adj[key]

    def _topology_bytes(self, c: int) -> int:
        fwd_adj, _, _, edges = self.topology[c]
        return 2 * tensor_bytes(edges) + 2 * fwd_adj.num_edges * self.value_bytes

    def run_forward(self, model, x: torch.Tensor, dropout, training: bool) -> torch.Tensor:
        """Layer-major forward over all batches; returns the host logits of this rank's rows."""
        self.rows = {}
        self.p = dropout.p if (training and dropout is not None) else 0.0
        layers = list(model.layers)
        self.masks = [None] * (len(layers) + 1)
        if self.p > 0:
            for i in range(1, len(layers)):
                self.masks[i] = dropout.keep_mask(model.spec.dims[i], i)
        if self.pin and not x.is_pinned():
            x = x.pin_memory()
        self.acts = [x]
        self.cache = []
        for layer, layer_mod in enumerate(layers):
            last = layer == len(layers) - 1
            d_out = model.spec.dims[layer + 1]
            out_host = self._host((x.shape[0], d_out), x)
            cache_host = (self._host((x.shape[0], model.spec.dims[layer]), x)
                          if training and self.model_name in CACHED_MODELS else None)
            prev = None
            for step in self.fwd.steps:
                c = step.chunk
                self.arena.hold("topology", self._topology_bytes(c))
                resident = self.gather(step, self.fwd, self.acts[layer], prev, "fwd")
                h_n = resident if step.need_pos is None else resident[step.need_pos.to(self.device)]
                with self.clock.span("device_compute"):
                    out, agg = self._layer_forward(layer_mod, layer, c, h_n, cache_host is not None)
                    y = self._activation(out, layer, c, last)
                self.arena.hold_tensors("chunk", h_n if step.need_pos is not None else None, out, y, agg)
                local = self._local(c)
                self.to_host(out_host, local, y, "fwd", add=False)
                if cache_host is not None:
                    self.to_host(cache_host, local, agg, "fwd", add=False)
                self.arena.drop("chunk")
                prev = resident
                self.arena.rename("fwd_resident", "fwd_resident_prev")
            self.arena.drop("fwd_resident_prev", "topology")
            self.acts.append(out_host)
            self.cache.append(cache_host)
        return self.acts[-1]

    def run_backward(self, model, grad_logits: torch.Tensor) -> List[torch.Tensor]:
        """Layer-major backward (Algorithm 1, lines 9–16); returns the parameter gradients."""
        layers = list(model.layers)
        params = list(model.parameters())
        sums = [torch.zeros_like(p) for p in params]
        grad_next = grad_logits.contiguous()
        for layer in range(len(layers) - 1, -1, -1):
            layer_mod = layers[layer]
            last = layer == len(layers) - 1
            want_input_grad = layer > 0
            grad_host = self._host(self.acts[layer].shape, grad_next) if want_input_grad else None
            layer_params = list(layer_mod.parameters())
            index = {id(p): i for i, p in enumerate(params)}
            prev_inputs = prev_sums = None
            for step in self.bwd.steps:
                c = step.chunk
                local = self._local(c)
                _, bwd_adj, v_pos, _ = self.topology[c]
                self.arena.hold("topology", self._topology_bytes(c))
                g = self.to_device(grad_next, local, "bwd")
                with torch.enable_grad():
                    if self.model_name in CACHED_MODELS:
                        agg = self.to_device(self.cache[layer], local, "bwd").requires_grad_(True)
                        h_v = (self.to_device(self.acts[layer], local, "bwd")
                               if self.model_name in SELF_ROW_MODELS else None)
                        if h_v is not None and want_input_grad:
                            h_v.requires_grad_(True)
                        inputs = [agg] + ([h_v] if h_v is not None and want_input_grad else [])
                        self.arena.hold_tensors("chunk", g, agg, h_v)
                        with self.clock.span("device_compute"):
                            with self.arena.saved_tensors("recompute", exclude=params + inputs + [g]):
                                out = layer_mod.update(h_v, layer_mod.aggregate(h_v, lambda _: agg))
                                y = self._activation(out, layer, c, last)
                            grads = torch.autograd.grad(y, layer_params + inputs, g, allow_unused=True)
                            block = None
                            if want_input_grad:
                                block = self._device_adj(bwd_adj).spmm(grads[len(layer_params)])
                                if h_v is not None:
                                    block.index_add_(0, v_pos.to(self.device), grads[len(layer_params) + 1])
                    else:  # GAT: recompute the whole layer from reloaded neighbour rows
                        resident = self.gather(step, self.bwd, self.acts[layer], prev_inputs, "bwd")
                        prev_inputs = resident
                        self.arena.rename("bwd_resident", "bwd_resident_prev")
                        h_n = resident if step.need_pos is None else resident[step.need_pos.to(self.device)]
                        h_n = h_n.detach().requires_grad_(want_input_grad)
                        self.arena.hold_tensors("chunk", g)
                        with self.clock.span("device_compute"):
                            with self.arena.saved_tensors("recompute", exclude=params + [h_n, resident, g]):
                                out, _ = self._layer_forward(layer_mod, layer, c, h_n, False)
                                y = self._activation(out, layer, c, last)
                            inputs = [h_n] if want_input_grad else []
                            grads = torch.autograd.grad(y, layer_params + inputs, g, allow_unused=True)
                            block = grads[len(layer_params)] if want_input_grad else None
                for p, gp in zip(layer_params, grads[:len(layer_params)]):
                    if gp is not None:
                        sums[index[id(p)]] += gp
                self.arena.drop("recompute")
                if block is not None:
                    self.arena.hold_tensors("grad_block", block)
                    prev_sums = self.scatter_add(step, self.bwd, grad_host, block, prev_sums, "bwd")
                    self.arena.rename("bwd_grad_sums", "bwd_grad_sums_prev")
                self.arena.drop("chunk", "grad_block")
            self.arena.drop("bwd_resident_prev", "bwd_grad_sums_prev", "topology")
            grad_next = grad_host
        self.rows_last = dict(self.rows)
        return sums


class _HongTuEpoch(torch.autograd.Function):
    """The whole layer-major schedule as one autograd node: the shared loop's
    ``loss.backward()`` calls :meth:`HongTuEngine.run_backward`."""

    @staticmethod
    def forward(ctx, engine, model, x, dropout, *params):  # type: ignore[override]
        ctx.engine, ctx.model = engine, model
        return engine.run_forward(model, x, dropout, training=True)

    @staticmethod
    def backward(ctx, grad_logits):  # type: ignore[override]
        sums = ctx.engine.run_backward(ctx.model, grad_logits)
        return (None, None, None, None, *sums)


# --------------------------------------------------------------------- mode
@register_mode
class HongTuMode(Mode):
    name = "hongtu"
    config_class = HongTuConfig
    models = ("gcn", "sage", "gin", "gat")

    @property
    def dedup(self) -> str:
        return str(self.options.dedup)

    def device_cap(self) -> int:
        """mode.device_memory, else the hardware profile's device memory; 0 = no cap."""
        if self.options.device_memory not in (None, "", 0):
            return parse_bytes(self.options.device_memory)
        return int(float(self.cfg.hardware.get("device_memory_gb", 0) or 0) * 2**30)

    def validate(self, ctx) -> List[str]:
        if self.dedup not in DEDUP:
            raise PlanError("mode.dedup", f"unknown deduplication '{self.dedup}'.", f"use one of {', '.join(DEDUP)}")
        n = int(self.options.chunks)
        if n < 0:
            raise PlanError("mode.chunks", f"{n} chunks per partition.", "use n >= 1, or 0 to pick n automatically")
        self.require_rows_per_part(ctx)
        rows_per_part = ctx.num_nodes // ctx.world_size
        if n > rows_per_part:
            raise PlanError("mode.chunks", f"{n} chunks per partition, but a partition has about {rows_per_part} "
                            "rows and every chunk needs one.", f"use mode.chunks <= {rows_per_part}")
        cap = self.device_cap()
        floor = 5 * ctx.param_bytes + 4 * max(ctx.dims) * ctx.dtype_bytes
        if cap and cap < floor:
            raise PlanError("mode.device_memory", f"{_gib(cap)} cannot hold even the parameters and one row of the "
                            f"widest layer ({_gib(floor)} at the least).",
                            f"set mode.device_memory to at least {_gib(floor)}")
        return []

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        by_kind = {"allreduce": ctx.world_size * ctx.param_bytes} if ctx.world_size > 1 else {}
        return CommEstimate(None, by_kind, "h2d/peer rows = V_ru/V_p2p/V_ori per layer and direction x width x "
                            "bytes; known after chunking (gnntrain plan prints them)")

    def details(self, ctx) -> Dict[str, Any]:
        cap = self.device_cap()
        return {"chunks per partition": int(self.options.chunks) or "auto (smallest n that fits)",
                "dedup": self.dedup, "reorganize": bool(self.options.reorganize),
                "device memory": _gib(cap) if cap else "no cap (accounted only)",
                "recompute": "whole layer (GAT)" if ctx.model == "gat" else "update only; aggregation cached on host"}

    # ------------------------------------------------------------ layout
    def _edges(self, data, part):
        src, dst, w = graph_tensors(data, self.cfg)
        inverse = torch.from_numpy(part.inverse)
        src_n, dst_n = inverse[src], inverse[dst]
        order = torch.argsort(dst_n * data.num_nodes + src_n)
        return src_n[order], dst_n[order], w[order]

    def choose_layout(self, data, part, plan) -> Dict[str, Any]:
        """Chunks (given or automatic), batches (reorganized or identity) and their figures."""
        src_n, dst_n, weights = self._edges(data, part)
        src_np, dst_np = src_n.numpy(), dst_n.numpy()
        ctx_dims = self._dims(data)
        b = DTYPE_BYTES[plan.dtype]
        pbytes = param_bytes(plan.model, ctx_dims, b)
        cap = self.device_cap()
        max_n = int(np.diff(part.offsets).min())
        n = int(self.options.chunks)
        tried: List[Tuple[int, int]] = []
        if n == 0:
            n = 1
            while True:
                layout = chunk_layout(src_np, dst_np, part.offsets, n)
                need = chunk_working_bytes(layout, plan.model, ctx_dims, b, pbytes, self.dedup)
                tried.append((n, need))
                if not cap or need <= cap or n >= max_n:
                    break
                n = min(max_n, n * 2)
        else:
            if n > max_n:
                raise PlanError("mode.chunks", f"{n} chunks per partition, but the smallest partition has {max_n} "
                                "rows and every chunk needs one.", f"use mode.chunks <= {max_n}")
            layout = chunk_layout(src_np, dst_np, part.offsets, n)
            need = chunk_working_bytes(layout, plan.model, ctx_dims, b, pbytes, self.dedup)
        if cap and need > cap:
            floor_layout = layout if layout.chunks_per_part == max_n else chunk_layout(src_np, dst_np, part.offsets,
                                                                                      max_n)
            floor = chunk_working_bytes(floor_layout, plan.model, ctx_dims, b, pbytes, self.dedup)
            if floor > cap:
                raise PlanError("mode.device_memory", f"{_gib(cap)} is too small for even one chunk of the largest "
                                f"layer: the smallest working set ({max_n} chunks per partition) needs {_gib(floor)}.",
                                f"set mode.device_memory to at least {_gib(floor)}, or use more ranks")
            raise PlanError("mode.chunks", f"{n} chunks per partition need about {_gib(need)} of device memory, "
                            f"over mode.device_memory {_gib(cap)}.", "use more chunks, or mode.chunks=0 to pick n")
        identity = identity_batches(layout.num_parts, layout.chunks_per_part)
        batches, hit = identity, None
        if bool(self.options.reorganize):
            batches, hit = self._reorganized(layout, data, part, plan)
        return {"layout": layout, "batches": batches, "identity": identity, "device_bytes": need, "cap": cap,
                "tried": tried, "dims": ctx_dims, "dtype_bytes": b, "reorganize_cache_hit": hit,
                "edges": (src_n, dst_n, weights)}

    def _dims(self, data) -> List[int]:
        m = self.cfg.model
        return [data.features.shape[1]] + [int(m.hidden)] * (int(m.layers) - 1) + [data.num_classes]

    def _reorganized(self, layout: ChunkLayout, data, part, plan) -> Tuple[np.ndarray, bool]:
        """Algorithm 4 once per graph, partitioning and n: cached beside the partition."""
        options = {"partitioner": partitioner_options(self.cfg.partitioner),
                   "hongtu_batches": int(layout.chunks_per_part), "self_loop": bool(self.cfg.model.self_loop),
                   "algorithm": REORGANIZE_VERSION}
        key = cache_key(data.content_hash, options, layout.num_parts)
        arrays, _, hit = PartitionCache(resolve_cache_dir(self.cfg), arrays=("batches",)).get_or_build(
            key, lambda: ({"batches": reorganize(layout)}, {"k": layout.num_parts}))
        return arrays["batches"].astype(np.int64), hit

    def figures(self, chosen: Dict[str, Any]) -> Dict[str, Any]:
        """Volumes, cost model and memory for the plan printout and the run summary."""
        layout, batches = chosen["layout"], chosen["batches"]
        volumes = transfer_volumes(layout, batches)
        row_bytes = sum(chosen["dims"][:-1]) * chosen["dtype_bytes"]  # one row through every layer
        bw = bandwidths(self.cfg.hardware)
        out = {"chunks_per_part": layout.chunks_per_part, "batches": int(batches.shape[0]),
               "chunk_offsets": layout.offsets.tolist(), "batch_order": batches.tolist(),
               "dedup": self.dedup, "rows_per_layer": volumes,
               "cost_model_fwd": cost_model(volumes, row_bytes, bw),
               "estimated_device_bytes": int(chosen["device_bytes"]), "device_memory_cap": int(chosen["cap"])}
        if bool(self.options.reorganize):
            out["rows_per_layer_identity_order"] = transfer_volumes(layout, chosen["identity"])
        if chosen["tried"]:
            out["auto_chunks_tried"] = [{"chunks": n, "device_bytes": int(b)} for n, b in chosen["tried"]]
        return out

    def graph_report(self, data, part, plan) -> Optional[Dict[str, Any]]:
        figures = self.figures(self.choose_layout(data, part, plan))
        v = figures["rows_per_layer"]
        report: Dict[str, Any] = {
            "chunks per partition": figures["chunks_per_part"],
            "V_ori / V_p2p / V_ru rows per layer": f"{v['ori']} / {v['p2p']} / {v['ru']}",
            "host->device rows per layer (this dedup)": _rows_for(self.dedup, v),
            "peer rows per layer (measured form)": v["peer_p2p_reuse" if self.dedup == "p2p+reuse" else "peer_p2p"]
            if "p2p" in self.dedup else 0,
        }
        if "rows_per_layer_identity_order" in figures:
            ident = figures["rows_per_layer_identity_order"]
            report["identity order V_ori / V_p2p / V_ru"] = f"{ident['ori']} / {ident['p2p']} / {ident['ru']}"
        c = figures["cost_model_fwd"]
        report["cost model C (one forward pass)"] = (
            f"{c['C_s'] * 1e3:.3f} ms = V_ru/T_hd {c['host_to_device_s'] * 1e3:.3f} + (V_ori-V_p2p)/T_dd "
            f"{c['peer_s'] * 1e3:.3f} + (V_p2p-V_ru)/T_ru {c['reuse_s'] * 1e3:.3f}")
        cap = figures["device_memory_cap"]
        report["estimated peak device bytes"] = (f"{_gib(figures['estimated_device_bytes'])} of "
                                                 f"{_gib(cap) if cap else 'no cap'}")
        if "auto_chunks_tried" in figures:
            report["auto chunks tried"] = ", ".join(f"n={t['chunks']}: {_gib(t['device_bytes'])}"
                                                    for t in figures["auto_chunks_tried"])
        return report

    # ------------------------------------------------------------ prepare
    def prepare(self, data, plan, ranks: Optional[Sequence[int]] = None) -> Prepared:
        start = time.perf_counter()
        cfg = self.cfg
        part, hit = partition_graph(data.src.numpy(), data.dst.numpy(), data.num_nodes, plan.world_size,
                                    cfg.partitioner, data.content_hash, resolve_cache_dir(cfg))
        chosen = self.choose_layout(data, part, plan)
        src_n, dst_n, w = chosen["edges"]
        layout: ChunkLayout = chosen["layout"]
        perm = torch.from_numpy(part.perm)
        offsets = part.offsets
        masks = data.masks
        counts = {s: int(masks[s].sum()) for s in SPLITS}
        figures = self.figures(chosen)
        shards = []
        for rank in (range(plan.world_size) if ranks is None else ranks):
            lo, hi = int(offsets[rank]), int(offsets[rank + 1])
            e_lo, e_hi = (int(x) for x in torch.searchsorted(dst_n, torch.tensor([lo, hi])))
            rows = perm[lo:hi]
            shards.append(RankShard(
                rank=rank, world_size=plan.world_size, num_global_nodes=data.num_nodes,
                num_classes=data.num_classes, features=data.features[rows], labels=data.labels[rows],
                count_masks={sp: masks[sp][rows] for sp in SPLITS}, global_counts=counts, global_ids=rows,
                edges=(dst_n[e_lo:e_hi], src_n[e_lo:e_hi], w[e_lo:e_hi]),
                info={"layout": layout, "batches": chosen["batches"], "figures": figures},
            ))
        m = part.metrics
        summary = {"num_parts": plan.world_size, "edge_cut": m.edge_cut, "total_volume": m.total_volume,
                   "max_send_volume": m.max_send_volume, "partitioner": cfg.partitioner.name, "cache_hit": hit,
                   "chunks_per_part": layout.chunks_per_part, "reorganize_cache_hit": chosen["reorganize_cache_hit"],
                   "num_edges": int(src_n.numel())}
        return Prepared(shards=shards, partition=summary, preprocess_s=time.perf_counter() - start,
                        notes=["partition cache hit" if hit else "partition built and cached"])

    # -------------------------------------------------------------- train
    def train_rank(self, shard: RankShard, ctx) -> Dict[str, Any]:
        start = time.perf_counter()
        engine = HongTuEngine(shard, ctx, str(self.cfg.model.name), self.dedup,
                              int(shard.info["figures"]["device_memory_cap"]))
        params_holder: Dict[str, Any] = {}

        def forward(model, x, dropout):
            if "params" not in params_holder:
                params_holder["params"] = list(model.parameters())
                engine.arena.hold("parameters", 5 * tensor_bytes(*params_holder["params"]))
            if torch.is_grad_enabled():
                return _HongTuEpoch.apply(engine, model, x, dropout, *params_holder["params"])
            return engine.run_forward(model, x, None, training=False)

        result = train_full_graph(shard, ctx, aggregate=None, aggregate_first=True,
                                  setup_s=time.perf_counter() - start, forward=forward, clock=engine.clock,
                                  inputs_on_host=True)
        comm = ctx.comm
        keys = [(d, k) for d in ("fwd", "bwd") for k in ("h2d", "d2h", "peer", "reused")]
        totals = comm.reduce_stats([float(engine.rows_last.get(key, 0)) for key in keys])
        peaks = comm.reduce_stats([float(engine.arena.peak)], op="max")
        layers = len(result["model"].layers)
        rows = {d: {k: int(v) for (dd, k), v in zip(keys, totals) if dd == d} for d in ("fwd", "bwd")}
        report = dict(shard.info["figures"])
        report.update({
            "rows_per_epoch": rows,
            "measured_gather_rows_per_layer": {k: rows["fwd"][k] // layers for k in ("h2d", "peer", "reused")},
            "peak_device_arena_bytes": int(peaks[0]),
        })
        result["mode_report"] = report
        result["peak_memory_bytes"]["device_arena_max_rank"] = int(peaks[0])
        return result


def _rows_for(dedup: str, volumes: Dict[str, int]) -> int:
    return {"none": volumes["ori"], "p2p": volumes["p2p"], "reuse": volumes["reuse"], "p2p+reuse": volumes["ru"]}[dedup]
