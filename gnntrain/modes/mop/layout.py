"""MoP's layouts (MixGCN §3.1.2): floor splits of node rows and feature columns over the m ranks,
and the column-split ↔ row-split all-to-all moves between them."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch


def stage_count(num_nodes: int, bandwidth: int) -> int:
    """MixGCN Proposition 3.5: with RCM bandwidth b, pipeline idleness vanishes once (n - b)/(2n) >=
    1/s, so s = ceil(2n / (n - b)) stages; without a usable bandwidth (b >= n) there is nothing to
    overlap."""
    if bandwidth >= num_nodes:
        return 1
    return -(-2 * num_nodes // (num_nodes - bandwidth))


def floor_splits(total: int, parts: int) -> List[int]:
    """Boundaries ⌊total·i/parts⌋ for i = 0..parts."""
    return [total * i // parts for i in range(parts + 1)]


def row_splits(n: int, m: int, aggregation_ranks: int = 0) -> List[int]:
    """Row boundaries of the m ranks: floor splits over all of them (MoP), or over the update ranks
    only (MoA: the first ``aggregation_ranks`` ranks own no rows)."""
    a = aggregation_ranks
    return floor_splits(n, m) if a == 0 else [0] * a + floor_splits(n, m - a)


def col_splits(d: int, m: int, aggregation_ranks: int = 0) -> List[int]:
    """Column boundaries of the m ranks: floor splits over all of them (MoP), or over the
    aggregation ranks only (MoA: the update ranks own no columns)."""
    a = aggregation_ranks
    return floor_splits(d, m) if a == 0 else floor_splits(d, a) + [d] * (m - a)


def exchanged_elements(n: int, d: int, m: int, aggregation_ranks: int = 0) -> int:
    """Elements one all-to-all moves between col- and row-split (N·d − Σ n_i·d_i): with MoA's
    disjoint groups no rank keeps anything, so all N·d move."""
    rows, cols = row_splits(n, m, aggregation_ranks), col_splits(d, m, aggregation_ranks)
    return n * d - sum((rows[i + 1] - rows[i]) * (cols[i + 1] - cols[i]) for i in range(m))


class _Relayout(torch.autograd.Function):
    """Column-split ↔ row-split all-to-all; its backward is the inverse move."""

    @staticmethod
    def forward(ctx, x, layout, to_rows: bool, width: int):  # type: ignore[override]
        ctx.layout, ctx.to_rows, ctx.width = layout, to_rows, width
        if to_rows:
            return layout.cols_to_rows(x, width, "all_to_all_fwd")
        return layout.rows_to_cols(x, "all_to_all_fwd")

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        if ctx.to_rows:
            return ctx.layout.rows_to_cols(grad, "all_to_all_bwd"), None, None, None
        return ctx.layout.cols_to_rows(grad, ctx.width, "all_to_all_bwd"), None, None, None


class MoPLayout:
    """Row and column ownership of the m ranks, and the two all-to-all moves.

    A move covers, for every rank j, ``sizes[j]`` of its rows (all of them by
    default; one pipeline chunk of them with ``mode.pipeline_chunks``).
    """

    def __init__(self, comm, num_nodes: int, aggregation_ranks: int = 0):
        self.comm, self.m, self.rank = comm, comm.world_size, comm.rank
        self.num_nodes, self.aggregation_ranks = num_nodes, aggregation_ranks
        self.rows = row_splits(num_nodes, self.m, aggregation_ranks)
        self.sizes = [self.rows[j + 1] - self.rows[j] for j in range(self.m)]
        self.n_own = self.sizes[self.rank]

    def _counts(self, d: int, sizes: Sequence[int]) -> Tuple[List[int], List[int]]:
        """Elements this rank holds per peer in row layout and in column layout."""
        cols = self.cols(d)
        me = self.rank
        row_layout = [sizes[me] * (cols[j + 1] - cols[j]) for j in range(self.m)]
        col_layout = [sizes[j] * (cols[me + 1] - cols[me]) for j in range(self.m)]
        return row_layout, col_layout

    def _assemble(
        self, recv: torch.Tensor, row_counts: List[int], n_rows: int, d: int
    ) -> torch.Tensor:
        cols = self.cols(d)
        return torch.cat(
            [
                part.reshape(n_rows, cols[j + 1] - cols[j])
                for j, part in enumerate(torch.split(recv, row_counts))
            ],
            dim=1,
        )

    def cols_to_rows(self, z_cols: torch.Tensor, d: int, kind: str) -> torch.Tensor:
        """(N × d_i) column slice → (n_i × d) row block."""
        row_counts, col_counts = self._counts(d, self.sizes)
        # the rows of rank j form a contiguous block of z_cols, so the flat tensor is already in
        # peer order
        recv = self.comm.all_to_all(z_cols.contiguous().reshape(-1), col_counts, row_counts, kind)
        return self._assemble(recv, row_counts, self.n_own, d)

    def start_cols_to_rows(
        self, z_cols: torch.Tensor, d: int, sizes: Sequence[int], kind: str = "all_to_all_fwd"
    ):
        row_counts, col_counts = self._counts(d, sizes)
        return self.comm.all_to_all_start(
            z_cols.contiguous().reshape(-1), col_counts, row_counts, kind
        )

    def finish_cols_to_rows(self, pending, d: int, sizes: Sequence[int]) -> torch.Tensor:
        row_counts, _ = self._counts(d, sizes)
        return self._assemble(pending.wait(), row_counts, sizes[self.rank], d)

    def rows_to_cols(
        self, h_rows: torch.Tensor, kind: str, sizes: Optional[Sequence[int]] = None
    ) -> torch.Tensor:
        """(n_i × d) row block → (Σ sizes × d_i) column slice."""
        sizes = self.sizes if sizes is None else sizes
        send, row_counts, col_counts, shape = self._row_layout(h_rows, sizes)
        return self.comm.all_to_all(send, row_counts, col_counts, kind).reshape(shape)

    def start_rows_to_cols(self, h_rows: torch.Tensor, kind: str, sizes: Sequence[int]):
        """:meth:`rows_to_cols`, asynchronous: (pending, shape);
        ``pending.wait().reshape(shape)``."""
        send, row_counts, col_counts, shape = self._row_layout(h_rows, sizes)
        return self.comm.all_to_all_start(send, row_counts, col_counts, kind), shape

    def _row_layout(self, h_rows: torch.Tensor, sizes: Sequence[int]):
        d = h_rows.shape[1]
        cols = self.cols(d)
        row_counts, col_counts = self._counts(d, sizes)
        send = torch.cat([h_rows[:, cols[j] : cols[j + 1]].reshape(-1) for j in range(self.m)])
        return (
            send,
            row_counts,
            col_counts,
            (int(sum(sizes)), cols[self.rank + 1] - cols[self.rank]),
        )

    def cols(self, d: int) -> List[int]:
        return col_splits(d, self.m, self.aggregation_ranks)

    def to_rows(self, z_cols: torch.Tensor, d: int) -> torch.Tensor:
        return _Relayout.apply(z_cols, self, True, d)

    def to_cols(self, h_rows: torch.Tensor) -> torch.Tensor:
        return _Relayout.apply(h_rows, self, False, h_rows.shape[1])
