"""MoP's fine-grained pipeline (MixGCN §3.1.3): the rows split into s chunks, each chunk's exchanges
asynchronous in both directions, forward and backward, as autograd Functions around the layout's
moves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import torch

from gnntrain.models import SparseAdjacency
from gnntrain.modes.mop.layout import MoPLayout, floor_splits


class _StartToRows(torch.autograd.Function):
    """Starts a chunk's column→row all-to-all (async) and passes its input through. In backward it
    waits for the chunk's gradient, which the finish node set travelling."""

    @staticmethod
    def forward(ctx, z_cols, layout, width: int, sizes, box: dict):  # type: ignore[override]
        ctx.layout, ctx.box = layout, box
        box["pending"] = layout.start_cols_to_rows(z_cols, width, sizes)
        return z_cols.view_as(z_cols)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        pending, shape = ctx.box.pop("grad_pending")  # the finish node handed zeros in its place
        return pending.wait().reshape(shape), None, None, None, None


class _FinishToRows(torch.autograd.Function):
    """Waits for the chunk's exchange. Backward starts the inverse (row→column) move and returns
    zeros: autograd then runs the earlier chunk's update backward (created after this chunk's start
    node) while the gradient travels, and the start node waits for it. The pipeline thus overlaps
    the exchange in backward as well; the sum is the same, so it stays exact."""

    @staticmethod
    def forward(ctx, token, layout, width: int, sizes, box: dict):  # type: ignore[override]
        ctx.layout, ctx.sizes, ctx.box, ctx.token_shape = layout, sizes, box, token.shape
        return layout.finish_cols_to_rows(box.pop("pending"), width, sizes)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        ctx.box["grad_pending"] = ctx.layout.start_rows_to_cols(grad, "all_to_all_bwd", ctx.sizes)
        return grad.new_zeros(ctx.token_shape), None, None, None, None


class _StartToCols(torch.autograd.Function):
    """Starts a chunk's row→column move of a layer's activated output (async) and passes it through.
    Backward adds the chunk's column gradient, which :class:`_FinishToCols` set travelling."""

    @staticmethod
    def forward(ctx, h_rows, layout, sizes, box: dict):  # type: ignore[override]
        ctx.layout, ctx.sizes, ctx.box = layout, sizes, box
        box["pending"] = layout.start_rows_to_cols(h_rows, "all_to_all_fwd", sizes)
        return h_rows.view_as(h_rows)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        from_cols = ctx.layout.finish_cols_to_rows(
            ctx.box.pop("grad_pending"), grad.shape[1], ctx.sizes
        )
        return grad + from_cols, None, None, None


class _FinishToCols(torch.autograd.Function):
    """Waits for every chunk's row→column move and assembles the next layer's column slice (N ×
    d_i). Backward starts each chunk's inverse move, the last chunk's first since its start node
    waits first, and hands zeros on: the update backward of chunk c-1 runs while chunk c's gradient
    travels."""

    @staticmethod
    def forward(ctx, layout, width: int, returns, *tokens):  # type: ignore[override]
        ctx.layout, ctx.width, ctx.returns = layout, width, returns
        ctx.token_shapes = [t.shape for t in tokens]
        cols = layout.cols(width)
        out = tokens[0].new_empty((layout.num_nodes, cols[layout.rank + 1] - cols[layout.rank]))
        for chunk, box in returns:
            pending, shape = box.pop("pending")
            out[chunk.rows] = pending.wait().reshape(shape)
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        for chunk, box in reversed(ctx.returns):
            box["grad_pending"] = ctx.layout.start_cols_to_rows(
                grad[chunk.rows], ctx.width, chunk.sizes, "all_to_all_bwd"
            )
        return (None, None, None) + tuple(grad.new_zeros(shape) for shape in ctx.token_shapes)


@dataclass
class PipelineChunk:
    """Chunk c of the fine-grained pipeline: the c-th floor slice of every rank's rows."""

    rows: torch.Tensor  # global (relabelled) rows, grouped by owning rank
    sizes: List[int]  # rows of each rank in this chunk
    own: slice  # this rank's rows of the chunk, relative to its row block
    adjacency: SparseAdjacency  # Â restricted to the chunk's destination rows


def pipeline_chunks(
    layout: MoPLayout, s: int, dst, src, w, kernel: str, device
) -> List[PipelineChunk]:
    chunks = []
    n = layout.num_nodes
    position = torch.empty(n, dtype=torch.int64)
    chunk_of = torch.empty(n, dtype=torch.int64)
    bounds = [
        [layout.rows[j] + b for b in floor_splits(layout.sizes[j], s)] for j in range(layout.m)
    ]
    for c in range(s):
        rows = torch.cat([torch.arange(bounds[j][c], bounds[j][c + 1]) for j in range(layout.m)])
        position[rows] = torch.arange(rows.numel())
        chunk_of[rows] = c
    for c in range(s):
        rows = torch.cat([torch.arange(bounds[j][c], bounds[j][c + 1]) for j in range(layout.m)])
        keep = chunk_of[dst] == c
        adjacency = SparseAdjacency(
            position[dst[keep]], src[keep], w[keep], rows.numel(), n, kernel=kernel, device=device
        )
        me = layout.rank
        own = slice(bounds[me][c] - layout.rows[me], bounds[me][c + 1] - layout.rows[me])
        chunks.append(
            PipelineChunk(
                rows=rows.to(device),
                sizes=[bounds[j][c + 1] - bounds[j][c] for j in range(layout.m)],
                own=own,
                adjacency=adjacency,
            )
        )
    return chunks
