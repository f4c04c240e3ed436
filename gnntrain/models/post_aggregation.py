"""SuperGCN's post-aggregation (SuperGCN §2, "Optimizing Index_add operator";
docs/design.md#supergcn): the received halo rows added into the destination rows, ``out = base +
dst_scale ⊙ (A · received)``.

The contributions are sorted by destination, then by received row (the paper's sorted ``idx`` with
pointers into ``src``: no row is moved), so every destination row is a cluster summed in one fixed
order. The C build (:func:`gnntrain.models._native_halo.scatter_add`) writes each destination row
from one thread, no atomics, over row chunks balanced by flops times column blocks (its 2D dynamic
parallelism), adding into ``base`` in the same pass. Where it does not load
(``GNNTRAIN_NATIVE=numba``, no compiler), torch's ``index_add_`` runs the same order (on the CPU it
adds a destination's contributions in index order), so both give the same bits; and these are the
bits of ``base + SparseAdjacency(kernel="native").spmm(received)`` on the C build (CSR rows in
column order, the scale applied after the sum). The backward is the transpose product
``grad_received = Aᵀ (dst_scale ⊙ grad)``, in the same two forms. CPU only: on a GPU the caller
keeps its SpMM (torch's ``index_add_`` there adds with atomics, in no fixed order).
"""

from __future__ import annotations

from typing import Optional

import torch

from gnntrain.models import _native_c, _native_halo


def _sorted(rows: torch.Tensor, cols: torch.Tensor, num_rows: int, num_cols: int):
    """(indptr int64 numpy, cols sorted by (row, col) as int32/int64 numpy, the same as an int64
    tensor, the rows in that order as an int64 tensor)."""
    rows, cols = rows.long(), cols.long()
    order = torch.argsort(rows * max(1, num_cols) + cols, stable=True)
    indptr = torch.zeros(num_rows + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=indptr[1:])
    sorted_cols = cols[order].contiguous()
    index_dtype = torch.int32 if num_cols < 2**31 else torch.int64
    return (
        indptr.numpy(),
        sorted_cols.to(index_dtype).numpy(),
        sorted_cols,
        rows[order].contiguous(),
    )


class PostAggregation:
    """``base + dst_scale ⊙ (A · received)`` for the edges (dst, src) from ``num_src`` received rows
    to ``num_dst`` own rows. ``weight`` is (E, 2) factors (source, destination) as
    :class:`~gnntrain.models.SparseAdjacency` takes them; the received rows carry their source
    factor already, so the first column must be one and the second one value per destination row."""

    def __init__(
        self, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor, num_dst: int, num_src: int
    ):
        self.num_dst, self.num_src = int(num_dst), int(num_src)
        dst, src, weight = dst.cpu().long(), src.cpu().long(), weight.cpu()
        if weight.dim() != 2 or bool((weight[:, 0] != 1).any()):
            raise ValueError(
                "post-aggregation: the received rows must carry their source factor (first factor "
                "1)"
            )
        scale = None
        if not bool((weight[:, 1] == 1).all()):
            scale = torch.zeros(self.num_dst, dtype=weight.dtype).index_put_((dst,), weight[:, 1])
            if not torch.equal(scale[dst], weight[:, 1]):
                raise ValueError("post-aggregation: the destination factors differ within a row")
        self._scale = scale
        self._scales: dict = {}
        self.forward_csr = _sorted(dst, src, self.num_dst, self.num_src)
        self.backward_csr = _sorted(src, dst, self.num_src, self.num_dst)

    def scale(self, dtype: torch.dtype) -> Optional[torch.Tensor]:
        if self._scale is None:
            return None
        if dtype not in self._scales:
            self._scales[dtype] = self._scale.to(dtype)
        return self._scales[dtype]

    def __call__(self, base: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
        if received.shape[0] != self.num_src or base.shape[0] != self.num_dst:
            raise ValueError(
                f"post-aggregation expects {self.num_src} received and {self.num_dst} own rows, "
                "got "
                f"{received.shape[0]} and {base.shape[0]}"
            )
        return _PostAggregate.apply(base, received, self)


def scatter(
    csr: tuple,
    scale: Optional[torch.Tensor],
    base: torch.Tensor,
    src: torch.Tensor,
    native: Optional[bool] = None,
) -> torch.Tensor:
    """base + scale ⊙ (A · src) over a :func:`_sorted` CSR: the C build's pass, or torch's
    ``index_add_`` in the same order (``native`` forces one; None: C where it serves these
    tensors)."""
    indptr, cols, cols_t, rows_t = csr
    if native is None:
        native = _native_halo.available(base, src)
    if native:
        return _native_halo.scatter_add(indptr, cols, scale, base.detach(), src.detach())
    acc = torch.zeros_like(base).index_add_(
        0, rows_t.to(base.device), src.index_select(0, cols_t.to(src.device))
    )
    return base + (acc if scale is None else acc * scale.to(base.device).unsqueeze(1))


def gather(
    csr: tuple, scale: Optional[torch.Tensor], grad: torch.Tensor, native: Optional[bool] = None
) -> torch.Tensor:
    """Aᵀ (scale ⊙ grad) over the transpose CSR ``csr``: the C SpMM's loop (the native kernel's
    backward, its bits), or torch's ``index_add_`` in the same order."""
    indptr, cols, cols_t, rows_t = csr
    rows = indptr.shape[0] - 1
    if native is None:
        native = _native_halo.available(grad)
    if native:
        grad = grad.detach().contiguous()
        out = torch.empty((rows, grad.shape[1]), dtype=grad.dtype)
        ones = torch.ones(max(rows, grad.shape[0]), dtype=grad.dtype)
        col = (ones[: grad.shape[0]] if scale is None else scale).numpy()
        _native_c.scaled_spmm(indptr, cols, col, ones[:rows].numpy(), grad.numpy(), out.numpy())
        return out
    scaled = grad if scale is None else grad * scale.to(grad.device).unsqueeze(1)
    out = torch.zeros((rows, grad.shape[1]), dtype=grad.dtype, device=grad.device)
    return out.index_add_(0, rows_t.to(grad.device), scaled.index_select(0, cols_t.to(grad.device)))


class _PostAggregate(torch.autograd.Function):
    """out = base + d ⊙ (A · received); d(base) = grad, d(received) = Aᵀ (d ⊙ grad)."""

    @staticmethod
    def forward(
        ctx,
        base: torch.Tensor,
        received: torch.Tensor,
        op: PostAggregation,  # type: ignore[override]
    ) -> torch.Tensor:
        ctx.op = op
        return scatter(op.forward_csr, op.scale(base.dtype), base, received)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        op = ctx.op
        grad_received = (
            gather(op.backward_csr, op.scale(grad.dtype), grad) if ctx.needs_input_grad[1] else None
        )
        return grad if ctx.needs_input_grad[0] else None, grad_received, None
