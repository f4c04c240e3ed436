"""``mode=supergcn``'s cost model: the row partition's work with the halo at its quantized wire
bytes, the checks, the bytes per epoch and the rows per pair a partition implies (SuperGCN §2-§4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from gnntrain.comm.quantize import packed_row_bytes, param_row_bytes
from gnntrain.errors import PlanError
from gnntrain.models.registry import exchanged_widths
from gnntrain.modes.cost import CommEstimate, Details, Work, detail
from gnntrain.modes.row_edges import graph_tensors, row_edges
from gnntrain.modes.saved_tier import SavedTierPlanner
from gnntrain.modes.supergcn.config import BITS, row_bytes
from gnntrain.partition.cover import rows_per_pair
from gnntrain.plan_types import KNOWN_HALO
from gnntrain.sizing import DTYPE_BYTES, halo_rows, with_measured_halo


@dataclass(frozen=True)
class SuperGCNDetails(Details):
    aggregation: str
    bits: int
    overlap: bool
    # printed under the option's own name
    quantize_backward: bool = detail("quantize_backward")
    param_dtype: str = detail("param_dtype")
    label_propagation: float = detail("label_propagation")
    widths_communicated: Sequence[int]


class SuperGCNPlanner(SavedTierPlanner):
    # building a part from the mapped CSR, per in-edge of the part: its rows' in-edges and, block by
    # block, the other rows' in-edges from its rows, split pair by pair (§3.2) (197-200 B measured
    # as sizing.PART_LOAD_BYTES_PER_NODE says)
    PART_BUILD_BYTES_PER_EDGE = 200

    @property
    def bits(self) -> int:
        return int(self.options.bits)

    def is_exact(self) -> bool:
        return self.bits >= 32 and float(self.options.label_propagation) == 0

    def streams_parts(self, data) -> bool:
        """From an ingested graph's CSR: each rank reads the edges that touch it
        (:func:`~gnntrain.modes.supergcn.prepare.prepare`)."""
        return row_edges(data, self.settings) is not None

    def work(self, ctx) -> Work:
        """The row partition's compute, with the halo priced at its wire bytes (SuperGCN §4: codes
        plus a scale and zero point per row at bits < 32) and quantization as elementwise passes
        over the rows sent. Cover rows are bounded by the halo rows (hybrid's cover is at most pre's
        or post's)."""
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
        # quantize at the sender, dequantize at the receiver: ~4 passes of the raw rows
        if self.bits < 32:
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
        task = str((self.settings.task or {}).get("name", "node_classification"))
        if rate > 0 and task != "node_classification":
            raise PlanError(
                "mode.label_propagation",
                f"label propagation feeds class labels in as inputs; task '{task}' has no classes "
                "to feed.",
                "set mode.label_propagation=0",
            )
        self.require_rows_per_part(ctx)
        warnings = []
        if self.bits < 32 and ctx.dtype_bytes == 8:
            warnings.append(f"bits={self.bits} quantizes float64 rows; exactness needs bits=32")
        return warnings

    def estimate_comm(self, ctx) -> Optional[CommEstimate]:
        params = ctx.param_bytes
        # the label embedding (classes x input width) is learnt too
        if float(self.options.label_propagation) > 0:
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

    def details(self, ctx) -> SuperGCNDetails:
        o = self.options
        return SuperGCNDetails(
            aggregation=o.aggregation.value,
            bits=self.bits,
            overlap=bool(o.overlap),
            quantize_backward=bool(o.quantize_backward),
            param_dtype=o.param_dtype.value,
            label_propagation=float(o.label_propagation),
            widths_communicated=ctx.comm_widths,
        )

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
        grid = np.asarray(table[self.options.aggregation.value])
        report["bytes per epoch"] = self._epoch_bytes(data, plan, int(np.sum(grid)))
        # what the busiest receiver takes in per layer under this run's aggregation
        report["memory per rank with this partition's halo bytes"] = with_measured_halo(
            plan.memory_per_rank,
            data.num_nodes,
            data.num_edges,
            self.num_parts(plan.world_size),
            int(grid.sum(axis=0).max()),
            widths,
            DTYPE_BYTES[plan.dtype],
            assumed_rows=plan.mode_details.get(KNOWN_HALO),
        ).total_bytes
        return report

    def _epoch_bytes(self, data, plan, rows: int) -> Dict[str, int]:
        """Bytes per epoch by kind for this run's aggregation and bits (the volume table of
        docs/design.md#supergcn): codes and raw rows under halo_*, scale/zero points under
        quant_params; backward only for layers whose sent partial sums have a gradient (with label
        propagation the first layer's input has one: the label embedding)."""
        o, b = self.options, DTYPE_BYTES[plan.dtype]
        forward, backward = exchanged_widths(self.settings, data, self.aggregate_first)
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
