"""``mode=supergcn``: pre/post/hybrid aggregated halo exchange with int2/4/8
stochastic quantization and label propagation (SuperGCN paper, §2 "Distributed-level Optimizations";
docs/design.md#supergcn).

Layout: 1D partition parallelism, one block of rows per rank (as in
``mode=partition``, whose exchange machinery this mode shares: ``halo.py``).
Per layer and rank i (SuperGCN §2, "Subgraph construction based on a hybrid of Pre- and
Post-aggregation";
docs/design.md#supergcn):

* local edges (both ends in block i) aggregate straight from i's rows;
* for every sender j the cut edges j→i are split by a vertex cover of their
  bipartite graph (``partition/cover.py``): sources in the cover travel raw
  and are *post*-aggregated by i, the other edges are *pre*-aggregated by j
  into one partial sum per destination. Rows per pair = |cover|.

The exchange starts asynchronously and the local aggregation runs while it
is in flight (``mode.overlap``, SuperGCN §2 "Overview of the SuperGCN", step 5); with it, backward's
exchange overlaps the local aggregation's backward too (an extension; docs/design.md#supergcn).

Both halves are sparse products: the sender builds its outgoing rows as
``S_j · H_j`` (S_j selects post rows and sums pre edges, each source row
scaled by its source factor), and the receiver adds a local adjacency over
``H_i`` to a remote one over the received rows, both scaled by the
destination factor. Edge weights are the model's global-degree weights
kept as factors (models/norm.py), so every product is an unweighted SpMM and
SAGE's mean is exactly "exchange partial sums, divide by the global
in-degree". Backward runs the same path in reverse.

On the CPU the received rows are post-aggregated into the local product by a sorted, clustered
index_add
(``models/post_aggregation.py``; SuperGCN §2, "Optimizing Index_add operator"), in the native C
build
where it loads, and coded and decoded by its one-pass quantiser (``models/_native_halo.c``); both
give the
torch formulas' bits.

With ``bits < 32`` the exchanged rows (and with ``quantize_backward`` their
gradients) are coded per row by ``comm/quantize.py`` (SuperGCN §2, "Quantization of communication to
Int2"). Label
propagation (SuperGCN §2, same part; analysed in §3, Lemma 3 and Eq. (5)) adds a learnable label
embedding to
the input features of
a fixed random subset of training nodes, which the loss then leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from gnntrain.comm.quantize import packed_row_bytes, param_row_bytes, quantizer_for
from gnntrain.config.schema import ModeConfig
from gnntrain.errors import PlanError
from gnntrain.metrics.clock import StageClock
from gnntrain.models import SparseAdjacency, source_scale
from gnntrain.models.post_aggregation import PostAggregation
from gnntrain.modes.base import CommEstimate, ModePlanner, Prepared, RankShard, ShardBuilder
from gnntrain.modes.cost import Work
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.modes.halo import ExchangeSpec, start_exchange
from gnntrain.modes.single import graph_tensors
from gnntrain.modes.spec import Capabilities, ModeSpec, register_mode
from gnntrain.partition.cover import pair_grid, rows_per_pair, split_cut_edges
from gnntrain.partition.store import store_record
from gnntrain.plan_types import RunSettings
from gnntrain.seeding import Stream, derive_seed
from gnntrain.sizing import DTYPE_BYTES, halo_rows

BITS = (2, 4, 8, 32)


class Aggregation(str, Enum):
    """Which side aggregates a cut edge (docs/design.md#supergcn)."""

    pre = "pre"
    post = "post"
    hybrid = "hybrid"


class ParamDType(str, Enum):
    """dtype of each quantized row's scale and zero point."""

    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


@dataclass
class SuperGCNConfig(ModeConfig):
    name: str = "supergcn"
    aggregation: Aggregation = Aggregation.hybrid
    bits: int = 2  # 32 | 8 | 4 | 2; 32 = unquantized (training dtype)
    quantize_backward: bool = True
    label_propagation: float = 0.0  # fraction of train nodes given a label embedding, in [0, 1)
    param_dtype: ParamDType = ParamDType.bfloat16  # scale/zero point dtype
    overlap: bool = True  # local aggregation runs while the halo exchange is in flight


def row_bytes(width: int, bits: int, dtype_bytes: int, param_dtype: str) -> int:
    """Wire bytes of one exchanged row (packed codes + scale/zero point, or the raw row)."""
    if bits >= 32:
        return width * dtype_bytes
    return packed_row_bytes(width, bits) + param_row_bytes(param_dtype)


def label_propagation_rows(train_mask: torch.Tensor, rate: float, seed: int) -> torch.Tensor:
    """The fixed random subset of *training* nodes whose labels become inputs (global mask)."""
    rows = train_mask.nonzero().flatten()
    take = int(round(rate * rows.numel()))
    gen = torch.Generator().manual_seed(derive_seed(seed, Stream.label_rows))
    mask = torch.zeros_like(train_mask)
    mask[rows[torch.randperm(rows.numel(), generator=gen)[:take]]] = True
    return mask


Edges = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (dst, src, weight)


@store_record
@dataclass
class SuperGCNPayload:
    """What a SuperGCN rank holds beyond its rows and local edges: the two sides of its
    exchanges."""

    recv_counts: List[int]  # rows arriving from each rank (post rows, then pre-aggregated sums)
    remote_edges: (
        Edges  # the arrived rows' edges into own rows (dst local, slot in the arrivals, weight)
    )
    send_slots: torch.Tensor  # S_rank's rows (the outgoing slots), ...
    send_cols: torch.Tensor  # ... its columns (own rows) ...
    send_weights: torch.Tensor  # ... and weights (source factor, destination factor)
    send_counts: List[int]  # rows leaving for each rank


class SuperGCNPlanner(ModePlanner):
    @property
    def bits(self) -> int:
        return int(self.options.bits)

    def is_exact(self) -> bool:
        return self.bits >= 32 and float(self.options.label_propagation) == 0

    def work(self, ctx) -> Work:
        """The row partition's compute, with the halo priced at its wire bytes (SuperGCN §4: codes
        plus a
        scale and zero point per row at bits < 32) and quantization as elementwise passes over the
        rows
        sent. Cover rows are bounded by the halo rows (hybrid's cover is at most pre's or
        post's)."""
        work = super().work(ctx)
        if ctx.world_size == 1:
            return work
        p = self.num_parts(ctx.world_size)
        rows = halo_rows(ctx, int(ctx.num_nodes / p), p)
        param = self.options.param_dtype.value
        moved = list(ctx.comm_widths) + list(ctx.grad_widths)
        wire = [rows * row_bytes(w, self.bits, ctx.dtype_bytes, param) for w in moved]
        work.collectives = [("alltoall", b) for b in wire] + [
            c for c in work.collectives if c[0] != "alltoall"
        ]
        if (
            self.bits < 32
        ):  # quantize at the sender, dequantize at the receiver: ~4 passes of the raw rows
            work.elementwise_bytes += 4 * sum(rows * w * ctx.dtype_bytes for w in moved)
        return work

    def validate(self, ctx) -> List[str]:
        o = self.options
        if self.bits not in BITS:
            raise PlanError(
                "mode.bits",
                f"bits={o.bits} is not a supported width.",
                "use one of 2, 4, 8 or 32 (32 = no quantization)",
            )
        rate = float(o.label_propagation)
        if not 0.0 <= rate < 1.0:
            raise PlanError(
                "mode.label_propagation",
                f"label_propagation={rate} is outside [0, 1): it is the "
                "fraction of training nodes whose labels become inputs.",
                "use a rate in [0, 1), e.g. 0.1; 0 turns it off",
            )
        self.require_rows_per_part(ctx)
        warnings = []
        if self.bits < 32 and ctx.dtype_bytes == 8:
            warnings.append(f"bits={self.bits} quantizes float64 rows; exactness needs bits=32")
        return warnings

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        params = ctx.param_bytes
        if (
            float(self.options.label_propagation) > 0
        ):  # the label embedding (classes x input width) is learnt too
            params += ctx.num_classes * ctx.feat_dim * ctx.dtype_bytes
        by_kind: Dict[str, int] = (
            {"allreduce": ctx.world_size * params} if ctx.world_size > 1 else {}
        )
        per_row = [
            row_bytes(w, self.bits, ctx.dtype_bytes, self.options.param_dtype.value)
            for w in ctx.comm_widths
        ]
        return CommEstimate(
            None,
            by_kind,
            f"halo = sum_l sum_pairs |cover_ji| * bytes_per_row(f_l) per direction; "
            f"bytes per row by layer {per_row} (bits={self.bits}); |cover| per pair needs the "
            "graph: see 'rows per pair' below or gnntrain partition",
        )

    def details(self, ctx) -> Dict[str, Any]:
        o = self.options
        return {
            "aggregation": o.aggregation.value,
            "bits": self.bits,
            "overlap": bool(o.overlap),
            "quantize_backward": bool(o.quantize_backward),
            "param_dtype": o.param_dtype.value,
            "label_propagation": float(o.label_propagation),
            "widths communicated": ctx.comm_widths,
        }

    def graph_report(self, data, part, plan) -> Dict[str, Any]:
        """Rows per (sender, receiver) pair under pre, post and hybrid, and the bytes they imply."""
        src, dst, _ = graph_tensors(data, self.settings)
        table = rows_per_pair(part.inverse[src.numpy()], part.inverse[dst.numpy()], part.offsets)
        widths = plan.mode_details["widths communicated"]
        per_row = sum(
            row_bytes(w, self.bits, DTYPE_BYTES[plan.dtype], self.options.param_dtype.value)
            for w in widths
        )
        report: Dict[str, Any] = {
            aggregation: {
                "rows": int(np.sum(grid)),
                "rows_per_pair": grid,
                "halo_fwd_bytes_per_epoch": int(np.sum(grid)) * per_row,
            }
            for aggregation, grid in table.items()
        }
        report["bytes per epoch"] = self._epoch_bytes(
            data, plan, int(np.sum(table[self.options.aggregation.value]))
        )
        return report

    def _epoch_bytes(self, data, plan, rows: int) -> Dict[str, int]:
        """Bytes per epoch by kind for this run's aggregation and bits (the volume table of
        docs/design.md#supergcn): codes and raw rows under halo_*, scale/zero points under
        quant_params;
        backward only for layers whose sent partial sums have a gradient (with label propagation the
        first layer's input has one: the label embedding)."""
        o, b = self.options, DTYPE_BYTES[plan.dtype]
        forward, backward = self.exchanged_widths(data)
        if float(o.label_propagation) > 0:
            backward = forward
        quantized = self.bits < 32

        def payload(widths, coded: bool) -> int:
            return sum(packed_row_bytes(w, self.bits) if coded else w * b for w in widths)

        params = param_row_bytes(o.param_dtype.value)
        coded_bwd = quantized and bool(o.quantize_backward)
        by_kind = {
            "halo_fwd": rows * payload(forward, quantized),
            "halo_bwd": rows * payload(backward, coded_bwd),
            "quant_params": rows
            * params
            * ((len(forward) if quantized else 0) + (len(backward) if coded_bwd else 0)),
            "allreduce": int(plan.comm_per_epoch["by_kind"].get("allreduce", 0)),
        }
        by_kind = {kind: v for kind, v in by_kind.items() if v}
        return {**by_kind, "total": sum(by_kind.values())}


def prepare(
    mode: SuperGCNPlanner, data, plan, part, ranks: Optional[Sequence[int]] = None
) -> Prepared:
    """Rank r: its block of rows, the local edges, and both sides of its halo exchange (§3.2)."""
    p = plan.world_size
    src, dst, w = graph_tensors(data, mode.settings)
    inverse = torch.from_numpy(part.inverse)
    perm = torch.from_numpy(part.perm)
    offsets = part.offsets.astype(np.int64)
    src_n, dst_n = inverse[src], inverse[dst]
    splits, pair_edges = split_cut_edges(
        src_n.numpy(), dst_n.numpy(), offsets, mode.options.aggregation.value
    )
    block_src = np.searchsorted(offsets, src_n.numpy(), side="right") - 1
    block_dst = np.searchsorted(offsets, dst_n.numpy(), side="right") - 1

    masks = dict(data.masks)
    rate = float(mode.options.label_propagation)
    label_rows = (
        label_propagation_rows(masks["train"], rate, int(mode.settings.train.seed))
        if rate > 0
        else None
    )
    if label_rows is not None:
        masks["train"] = masks["train"] & ~label_rows
    builder = ShardBuilder(data, p, masks)

    # per-node factors of the edge weights, for rows that travel (senders scale, receivers add the
    # dst factor)
    src_scale = source_scale(w, src_n, data.num_nodes)
    dst_scale = torch.zeros(data.num_nodes, dtype=w.dtype).index_put_((dst_n,), w[:, 1])
    shards = []
    for rank in range(p) if ranks is None else ranks:
        lo, hi = int(offsets[rank]), int(offsets[rank + 1])
        rows = perm[lo:hi]
        receive = _receiver_edges(
            rank, offsets, splits, pair_edges, src_n, dst_n, w, dst_scale, block_src, block_dst
        )
        send = _sender_matrix(rank, offsets, splits, pair_edges, src_n, dst_n, w, src_scale)
        payload = SuperGCNPayload(receive["counts"], receive["remote"], **send)
        shards.append(
            builder.shard(
                rank,
                rows,
                receive["local"],
                payload,
                label_input_mask=label_rows[rows] if label_rows is not None else None,
            )
        )
    grid = pair_grid(splits, p)
    return builder.prepared(
        shards,
        part,
        mode.settings.partitioner.name,
        num_parts=p,
        aggregation=mode.options.aggregation.value,
        halo_rows=int(np.sum(grid)),
        rows_per_pair=grid,
        label_propagation_nodes=int(label_rows.sum()) if label_rows is not None else 0,
    )


def _receiver_edges(
    rank, offsets, splits, pair_edges, src_n, dst_n, w, dst_scale, block_src, block_dst
) -> Dict[str, Any]:
    """Local edges (own rows → own rows), and edges from the rows received (by sender) → own rows.

    Weights stay factored (models/norm.py): senders apply the source factor, so every
    received column has factor 1 and every own row its destination factor."""
    lo = int(offsets[rank])
    local = torch.from_numpy(np.flatnonzero((block_dst == rank) & (block_src == rank)))
    dsts, cols, weights = [], [], []
    counts = [0] * (len(offsets) - 1)
    base = 0
    for j in range(len(offsets) - 1):
        split = splits.get((j, rank))
        if split is None:
            continue
        edges = torch.from_numpy(pair_edges[(j, rank)])
        post = torch.from_numpy(split.is_post_edge)
        post_rows, pre_rows = torch.from_numpy(split.post_rows), torch.from_numpy(split.pre_rows)
        pe = edges[post]  # source rows (sent src-scaled), aggregated here with their dst factor
        dsts.append(dst_n[pe] - lo)
        cols.append(base + torch.searchsorted(post_rows, src_n[pe] - int(offsets[j])))
        weights.append(torch.stack([torch.ones(pe.numel(), dtype=w.dtype), w[pe, 1]], dim=1))
        # one partial sum Σ src_scale[u]·h[u] per pre row, added with the row's dst factor
        dsts.append(pre_rows)
        cols.append(base + post_rows.numel() + torch.arange(pre_rows.numel()))
        weights.append(
            torch.stack(
                [torch.ones(pre_rows.numel(), dtype=w.dtype), dst_scale[pre_rows + lo]], dim=1
            )
        )
        counts[j] = split.rows
        base += split.rows
    empty = torch.zeros(0, dtype=torch.int64)
    remote = (
        (torch.cat(dsts), torch.cat(cols), torch.cat(weights))
        if dsts
        else (empty, empty, torch.zeros(0, 2, dtype=w.dtype))
    )
    return {
        "local": (dst_n[local] - lo, src_n[local] - lo, w[local]),
        "remote": remote,
        "counts": counts,
    }


def _sender_matrix(rank, offsets, splits, pair_edges, src_n, dst_n, w, src_scale) -> Dict[str, Any]:
    """S_rank: outgoing rows (grouped by receiver, post rows then pre sums) from own rows, each
    own row scaled by its source factor (the receiver applies the destination factor)."""
    slots, cols, weights = [], [], []
    counts = [0] * (len(offsets) - 1)
    base = 0
    lo = int(offsets[rank])
    for i in range(len(offsets) - 1):
        split = splits.get((rank, i))
        if split is None:
            continue
        post_rows, pre_rows = torch.from_numpy(split.post_rows), torch.from_numpy(split.pre_rows)
        slots.append(base + torch.arange(post_rows.numel()))
        cols.append(post_rows)
        weights.append(
            torch.stack(
                [src_scale[post_rows + lo], torch.ones(post_rows.numel(), dtype=w.dtype)], dim=1
            )
        )
        pre = torch.from_numpy(pair_edges[(rank, i)])[~torch.from_numpy(split.is_post_edge)]
        slots.append(
            base + post_rows.numel() + torch.searchsorted(pre_rows, dst_n[pre] - int(offsets[i]))
        )
        cols.append(src_n[pre] - lo)
        weights.append(torch.stack([w[pre, 0], torch.ones(pre.numel(), dtype=w.dtype)], dim=1))
        counts[i] = split.rows
        base += split.rows
    empty = torch.zeros(0, dtype=torch.int64)
    return {
        "send_slots": torch.cat(slots) if slots else empty,
        "send_cols": torch.cat(cols) if cols else empty,
        "send_weights": torch.cat(weights) if weights else torch.zeros(0, 2, dtype=w.dtype),
        "send_counts": counts,
    }


def strategy(mode: SuperGCNPlanner, shard: RankShard, ctx) -> "SuperGCNStrategy":
    return SuperGCNStrategy(shard, ctx, mode.settings, mode.options, mode.bits)


class SuperGCNStrategy(FullGraphStrategy):
    """A SuperGCN rank: post rows and pre-aggregated partial sums leave through one (quantized)
    all-to-all while the local product runs; the remote product adds what arrived."""

    def __init__(
        self, shard: RankShard, ctx, settings: RunSettings, options: "SuperGCNConfig", bits: int
    ):
        comm, info = ctx.comm, shard.payload  # a SuperGCNPayload
        n_own = shard.features.shape[0]
        send_counts, recv_counts = info.send_counts, info.recv_counts
        kernel, device = ctx.plan.kernel, ctx.device
        self.local = SparseAdjacency(*shard.edges, n_own, n_own, kernel=kernel, device=device)
        # the received rows' post-aggregation: on the CPU a sorted, clustered index_add into the
        # local product
        # (C build; torch's index_add_ in the same order without it); on a GPU the remote SpMM,
        # added after
        self.post = (
            PostAggregation(*info.remote_edges, n_own, sum(recv_counts))
            if device.type == "cpu"
            else None
        )
        self.remote = (
            None
            if self.post is not None
            else SparseAdjacency(
                *info.remote_edges, n_own, sum(recv_counts), kernel=kernel, device=device
            )
        )
        self.send = SparseAdjacency(
            info.send_slots,
            info.send_cols,
            info.send_weights,
            sum(send_counts),
            n_own,
            kernel=kernel,
            device=device,
        )
        self.clock = clock = StageClock(device)
        self.quantizer = quantizer_for(
            bits, int(settings.train.seed), comm.rank, options.param_dtype.value, clock
        )
        self.overlap = bool(options.overlap)
        self.exchange = ExchangeSpec(
            comm,
            send_counts,
            recv_counts,
            quantizer=self.quantizer,
            quantize_backward=bool(options.quantize_backward),
            overlap_backward=self.overlap,
            clock=clock,
        )
        super().__init__(shard, ctx, settings)

    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        clock = self.clock
        # post rows + pre-aggregated partial sums
        outgoing = clock.through("aggregation", self.send.spmm, h)
        pending = start_exchange(outgoing, self.exchange)
        received = None if self.overlap else pending.wait()
        z = clock.through("aggregation", self.local.spmm, h)  # in flight meanwhile when overlapping
        if received is None:
            received = pending.wait()
        if self.post is not None:
            return clock.through("aggregation", lambda rows: self.post(z, rows), received)
        return z + clock.through("aggregation", self.remote.spmm, received)

    def on_epoch(self, epoch: int, training: bool) -> None:
        if self.quantizer is not None:
            self.quantizer.begin(epoch, training)


SUPERGCN = register_mode(
    ModeSpec(
        name="supergcn",
        options=SuperGCNConfig,
        planner=SuperGCNPlanner,
        prepare=prepare,
        strategy=strategy,
        capabilities=Capabilities(
            needs_restructurable=False,  # exchanges whatever a layer hands its aggregation
            models_rule="SuperGCN pre-aggregates weighted sums of source rows at the sender; GAT's "
            "attention weights "
            "depend on both endpoints' features, so they cannot be summed before the exchange.",
            auto_variants=(
                {"aggregation": "hybrid", "bits": 32},
                {"aggregation": "pre", "bits": 32},
                {"aggregation": "hybrid", "bits": 8},
                {"aggregation": "hybrid", "bits": 2},
            ),
        ),
    )
)
