"""``mode=partition mode.comm=cagnet``: CAGNET's 1D algorithm, p broadcast stages per aggregation
(Tripathy, Yelick, Buluç, "Reducing Communication in Graph Neural Network Training", SC'20, §IV-A;
docs/design.md#partition).

Layout: the 1D block rows of ``mode=partition`` (c = 1): rank i owns rows [off_i, off_{i+1}) of the
relabelled graph, its in-edges (the block row A_{i,*}) and its out-edges (the block column A_{*,i}).

Forward, Z_i = Σ_s A_{i,s}·H_s: at stage s rank s broadcasts its block H_s (its rows × f) to every
rank, and every rank adds A_{i,s}·H_s. The broadcast of stage s+1 is started before the SpMM of
stage s, so it travels while that SpMM runs (two blocks in flight at most).

Backward, ∂L/∂H_i = Σ_s (A_{s,i})ᵀ·G_s with G = ∂L/∂Z: as in CAGNET's ``GCNFunc.backward`` (which
calls its broadcast SpMM again on the output gradient), stage s broadcasts rank s's block G_s of the
gradient of this aggregation's output, and every rank adds the transposed block (A_{s,i})ᵀ·G_s,
built from its out-edges; the same overlap. Only layers whose aggregated input has a gradient run it
(the input features need none). Exact for directed graphs: Aᵀ is built, not assumed equal to A.

Volume (accounting.py: a root counts its block once per destination): per aggregation of width f,
Σ_s (p−1)·|H_s|·f·b = (p−1)·N·f·b, recorded as ``bcast_fwd``; backward the same as ``bcast_bwd``.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from gnntrain.comm import Communicator
from gnntrain.models import SparseAdjacency
from gnntrain.modes.base import RankShard
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.plan_types import RunSettings

KINDS = ("bcast_fwd", "bcast_bwd")


def stage_blocks(
    rows: torch.Tensor,
    cols: torch.Tensor,
    weight: torch.Tensor,
    offsets: torch.Tensor,
    n_rows: int,
    kernel: str,
    device,
) -> List[Optional[SparseAdjacency]]:
    """One adjacency per stage s: the edges whose column (global id in ``cols``) lies in block s, as
    an n_rows × |block s| matrix (None where block s has no such edge)."""
    blocks: List[Optional[SparseAdjacency]] = []
    for s in range(offsets.numel() - 1):
        lo, hi = int(offsets[s]), int(offsets[s + 1])
        keep = (cols >= lo) & (cols < hi)
        blocks.append(
            SparseAdjacency(
                rows[keep],
                cols[keep] - lo,
                weight[keep],
                n_rows,
                hi - lo,
                kernel=kernel,
                device=device,
            )
            if bool(keep.any())
            else None
        )
    return blocks


class BroadcastStages:
    """The p stages of one rank: ``run(mine, blocks, kind)`` returns Σ_s blocks[s]·X_s, where X_s is
    rank s's ``mine`` broadcast at stage s; stage s+1's broadcast overlaps stage s's SpMM."""

    def __init__(
        self,
        comm: Communicator,
        block_sizes: Sequence[int],
        forward: Sequence[Optional[object]],
        backward: Sequence[Optional[object]],
    ):
        self.comm, self.block_sizes = comm, [int(n) for n in block_sizes]
        self.forward_blocks, self.backward_blocks = list(forward), list(backward)
        self.me = comm.rank

    def _start(self, s: int, mine: torch.Tensor, kind: str):
        buf = (
            mine if s == self.me else mine.new_empty((self.block_sizes[s],) + tuple(mine.shape[1:]))
        )
        return self.comm.broadcast_start(buf, s, kind)

    def run(
        self, mine: torch.Tensor, blocks: Sequence[Optional[object]], kind: str
    ) -> torch.Tensor:
        mine = mine.contiguous()
        out = mine.new_zeros((self.block_sizes[self.me],) + tuple(mine.shape[1:]))
        stages = len(self.block_sizes)
        pending = self._start(0, mine, kind)
        for s in range(stages):
            following = self._start(s + 1, mine, kind) if s + 1 < stages else None
            received = pending.wait()
            if blocks[s] is not None:
                out.add_(blocks[s].spmm(received))
            pending = following
        return out


class _StagedAggregate(torch.autograd.Function):
    """Z = A_{i,*}·H by forward stages; ∂L/∂H = (A_{*,i})ᵀ·∂L/∂Z by backward stages."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, stages: BroadcastStages):  # type: ignore[override]
        ctx.stages = stages
        return stages.run(h.detach(), stages.forward_blocks, KINDS[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        stages = ctx.stages
        return stages.run(grad, stages.backward_blocks, KINDS[1]), None


def staged_aggregate(h: torch.Tensor, stages: BroadcastStages) -> torch.Tensor:
    return _StagedAggregate.apply(h, stages)


class CagnetStrategy(FullGraphStrategy):
    """A rank of CAGNET's 1D algorithm: each aggregation is p broadcast stages (forward and
    backward)."""

    def __init__(self, shard: RankShard, ctx, settings: RunSettings, model, optimizer):
        offsets = shard.payload.offsets
        lo = int(offsets[shard.rank])
        n_own = int(offsets[shard.rank + 1]) - lo
        kernel, device = ctx.plan.kernel, ctx.device
        dst, src, w = shard.edges  # in-edges: dst local to this block, src global (relabelled)
        forward = stage_blocks(dst, src, w, offsets, n_own, kernel, device)
        # out-edges (dst global, src local): (A_{s,i})^T maps block s's gradient rows to this
        # block's rows; the edge weight's factors swap places with the roles of the two endpoints
        out_dst, out_src, out_w = shard.payload.out_edges
        out_w = out_w[:, [1, 0]] if out_w.dim() == 2 else out_w
        backward = stage_blocks(out_src, out_dst, out_w, offsets, n_own, kernel, device)
        sizes = (offsets[1:] - offsets[:-1]).tolist()
        self.stages = BroadcastStages(ctx.comm, sizes, forward, backward)
        super().__init__(shard, ctx, settings, model, optimizer)

    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        return staged_aggregate(h, self.stages)
