"""Halo exchange shared by the partition-parallel modes (partition, supergcn).

Sparsity-aware preprocessing (Sparsity-Aware Communication for Distributed Graph Neural Network
Training, §4.1 and Algorithm 1; docs/design.md#partition): each process finds NnzCols(A_ij), the
distinct source rows of every off-diagonal block, exchanges the counts and then the index lists, so
each owner knows exactly which of its rows every peer needs. Per aggregation, one
``all_to_all_single`` with split sizes moves them; backward sends the halo gradients back to their
owners, which sum them (so directed graphs need nothing extra). The oblivious baseline is the same
machinery with *every* row of each block requested, i.e. CAGNET's all-gather.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch

from gnntrain.comm import Communicator, Phase
from gnntrain.metrics.clock import StageClock


@dataclass
class HaloPlan:
    """Who sends which rows to whom, from this rank's point of view."""

    send_index: torch.Tensor  # local rows to send, grouped by destination rank (ascending)
    send_counts: List[int]  # rows to each rank
    recv_counts: List[int]  # rows from each rank
    needed: List[Optional[torch.Tensor]]  # per source block: local indices (in that block) received
    kind_fwd: str
    kind_bwd: str

    @property
    def halo_rows(self) -> int:
        return int(sum(self.recv_counts))


def build_halo_plan(
    comm: Communicator,
    src_global: torch.Tensor,
    offsets: torch.Tensor,
    own_block: int,
    group_blocks: Sequence[int],
    block_rank: Sequence[int],
    sparse: bool,
    kinds=("halo_fwd", "halo_bwd"),
) -> HaloPlan:
    """Exchange NnzCols counts and index lists (setup phase of the ledger).

    ``src_global`` are the (relabelled) source ids of this rank's edges;
    ``group_blocks`` the blocks this rank aggregates from; ``block_rank[j]``
    the rank that sends block j to this rank.
    """
    p = comm.world_size
    request_counts = [0] * p
    needed: List[Optional[torch.Tensor]] = [None] * (offsets.numel() - 1)
    for j in group_blocks:
        if j == own_block:
            continue
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        if sparse:
            in_block = src_global[(src_global >= lo) & (src_global < hi)]
            rows = torch.unique(in_block) - lo
        else:
            rows = torch.arange(hi - lo, dtype=torch.int64)
        needed[j] = rows
        request_counts[block_rank[j]] = int(rows.numel())
    # requests go out in rank order
    order = sorted((block_rank[j], j) for j in group_blocks if j != own_block)
    requests = [needed[j] for _, j in order]
    with comm.ledger.in_phase(Phase.setup):
        send_counts = comm.exchange_counts(request_counts, kind="setup")
        flat = torch.cat(requests) if requests else torch.zeros(0, dtype=torch.int64)
        send_index = comm.all_to_all(flat, request_counts, send_counts, kind="setup")
    return HaloPlan(
        send_index=send_index.to(torch.int64),
        send_counts=send_counts,
        recv_counts=request_counts,
        needed=needed,
        kind_fwd=kinds[0],
        kind_bwd=kinds[1],
    )


def local_source_index(
    src_global: torch.Tensor,
    offsets: torch.Tensor,
    own_block: int,
    own_included: bool,
    plan: HaloPlan,
    block_rank: Sequence[int],
) -> torch.Tensor:
    """Map global source ids to columns of [own rows | halo rows (by sender rank)]."""
    out = torch.full_like(src_global, -1)
    base = int(offsets[own_block + 1] - offsets[own_block]) if own_included else 0
    if own_included:
        lo, hi = int(offsets[own_block]), int(offsets[own_block + 1])
        mask = (src_global >= lo) & (src_global < hi)
        out[mask] = src_global[mask] - lo
    start = base
    for j in sorted(
        range(len(plan.needed)), key=lambda b: block_rank[b] if plan.needed[b] is not None else -1
    ):
        rows = plan.needed[j]
        if rows is None:
            continue
        lo, hi = int(offsets[j]), int(offsets[j + 1])
        mask = (src_global >= lo) & (src_global < hi)
        out[mask] = start + torch.searchsorted(rows, src_global[mask] - lo)
        start += int(rows.numel())
    if bool((out < 0).any()):
        raise RuntimeError("an edge's source row is neither owned nor in the halo plan")
    return out


def _start(
    comm: Communicator,
    send: torch.Tensor,
    send_counts,
    recv_counts,
    kind: str,
    quantizer,
    direction: str,
):
    if quantizer is None:
        return comm.all_to_all_start(send, send_counts, recv_counts, kind)
    return comm.all_to_all_quantized_start(
        send, send_counts, recv_counts, kind, quantizer, direction
    )


def _wait(spec: "ExchangeSpec", pending) -> torch.Tensor:
    """Block until the rows are here (and decoded); the time goes to stage ``sync`` when timed."""
    if spec.clock is None:
        return pending.wait()
    with spec.clock.span("sync"):
        return pending.wait()


class _StartExchange(torch.autograd.Function):
    """Starts the row all-to-all (async) and passes its input through as a token. With
    ``overlap_backward`` its backward is where the gradients sent back by the peers are awaited."""

    @staticmethod
    def forward(ctx, send: torch.Tensor, spec: "ExchangeSpec", box: dict):  # type: ignore[override]
        ctx.spec, ctx.box = spec, box
        box["pending"] = _start(
            spec.comm,
            send,
            spec.send_counts,
            spec.recv_counts,
            spec.kinds[0],
            spec.quantizer,
            "fwd",
        )
        return send.view_as(send)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if "grad_pending" in ctx.box:  # the token's only use is the finish node, which sent zeros
            return _wait(ctx.spec, ctx.box.pop("grad_pending")), None, None
        return grad, None, None


class _FinishExchange(torch.autograd.Function):
    """Waits for the rows; backward sends their gradients back to the senders. With
    ``overlap_backward`` it only starts that exchange and hands back zeros: autograd then runs the
    work it has ready (the local aggregation's backward, created after the start node) before the
    start node's backward waits for the real gradient."""

    @staticmethod
    # type: ignore[override]
    def forward(ctx, token: torch.Tensor, spec: "ExchangeSpec", box: dict):
        ctx.spec, ctx.box, ctx.send_shape = spec, box, token.shape
        return _wait(spec, box.pop("pending"))

    @staticmethod
    def backward(ctx, grad_recv: torch.Tensor):  # type: ignore[override]
        spec = ctx.spec
        quantizer = spec.quantizer if spec.quantize_backward else None
        pending = _start(
            spec.comm,
            grad_recv.contiguous(),
            spec.recv_counts,
            spec.send_counts,
            spec.kinds[1],
            quantizer,
            "bwd",
        )
        if spec.overlap_backward:
            ctx.box["grad_pending"] = pending
            return grad_recv.new_zeros(ctx.send_shape), None, None
        return _wait(spec, pending), None, None


@dataclass
class ExchangeSpec:
    """One row all-to-all: counts per peer, ledger kinds, and optional quantization (SuperGCN §2,
    "Quantization of communication to Int2"; docs/design.md#supergcn)."""

    comm: Communicator
    send_counts: Sequence[int]
    recv_counts: Sequence[int]
    kinds: Sequence[str] = ("halo_fwd", "halo_bwd")
    quantizer: Optional[object] = None  # gnntrain.comm.quantize.RowQuantizer
    quantize_backward: bool = False
    # backward's exchange runs while autograd does the ready local work
    overlap_backward: bool = False
    clock: Optional[StageClock] = None  # gets the time blocked waiting for rows as stage "sync"


class PendingRows:
    """Rows on their way (from :func:`start_exchange`); ``wait()`` returns them, autograd-aware."""

    def __init__(self, token: torch.Tensor, spec: ExchangeSpec, box: dict):
        self.token, self.spec, self.box = token, spec, box

    def wait(self) -> torch.Tensor:
        return _FinishExchange.apply(self.token, self.spec, self.box)


def start_exchange(send: torch.Tensor, spec: ExchangeSpec) -> PendingRows:
    """Rows for each rank (grouped by destination, ascending) start travelling; work placed between
    this call and ``wait()`` overlaps the exchange (backward waits synchronously)."""
    box: dict = {}
    return PendingRows(_StartExchange.apply(send, spec, box), spec, box)


def exchange_rows(send: torch.Tensor, spec: ExchangeSpec) -> torch.Tensor:
    """Rows for each rank → rows from each rank, in rank order (autograd-aware)."""
    return start_exchange(send, spec).wait()


def halo_exchange(h: torch.Tensor, plan: HaloPlan, comm: Communicator) -> torch.Tensor:
    """Rows of other ranks this rank needs, ordered by sender rank (autograd-aware)."""
    spec = ExchangeSpec(comm, plan.send_counts, plan.recv_counts, (plan.kind_fwd, plan.kind_bwd))
    return exchange_rows(h.index_select(0, plan.send_index), spec)


class _GroupAllReduce(torch.autograd.Function):
    """Sum of partial results over a process group, with the sum again in backward."""

    @staticmethod
    # type: ignore[override]
    def forward(ctx, z: torch.Tensor, comm: Communicator, group, size: int, kind: str):
        ctx.comm, ctx.group, ctx.size, ctx.kind = comm, group, size, kind
        out = z.clone()
        return comm.all_reduce(out, kind, group=group, group_size=size)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        g = grad.clone()
        ctx.comm.all_reduce(g, ctx.kind, group=ctx.group, group_size=ctx.size)
        return g, None, None, None, None


def group_all_reduce(
    z: torch.Tensor, comm: Communicator, group, size: int, kind: str
) -> torch.Tensor:
    return _GroupAllReduce.apply(z, comm, group, size, kind)
