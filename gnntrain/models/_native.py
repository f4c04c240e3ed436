"""The native CPU kernel: scale → unweighted SpMM → scale in one pass, compiled with numba.

out[v] = dst_scale[v] · Σ_{u→v} src_scale[u] · h[u] over a CSR of the destination rows; its
backward is the same kernel over the prebuilt transpose with the two scales swapped,
grad_h[u] = src_scale[u] · Σ_{u→v} dst_scale[v] · grad_out[v]. Fusing the two row scales saves the
two passes over the features that DGL's GraphConv pays around ``copy_u_sum`` (the ``kernels``
suite, docs/BENCHMARKS.md). Each destination row is summed in CSR order into a per-thread
accumulator, four edges per step in a fixed order, so a run is deterministic at any thread count.
The loops (``_native_loops``) are compiled on first use and cached on disk by numba; numba is
imported only when ``kernel=native`` runs.

Why numba rather than a C++/OpenMP extension: a wheel with no compiler at install, the same
speed in the ``kernels`` suite (it vectorizes the feature loop like -O3 does), and two short source files.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional, Tuple

import torch

SUPPORTED_DTYPES = (torch.float32, torch.float64)


@functools.lru_cache(maxsize=None)
def _kernels(parallel: bool = True):
    """(numba, scaled loop, weighted loop), threaded or serial; numba is imported on the first call.
    The serial pair serves one-thread ranks: no thread pool that could spin beside the other ranks'
    threads."""
    import os

    # numba's pool is sized once, at import: no larger than this process's torch threads
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(1, torch.get_num_threads())))
    import numba

    from gnntrain.models import _native_loops as loops

    return (numba, loops.compile_loop(loops.scaled_spmm, parallel),
            loops.compile_loop(loops.weighted_spmm, parallel))


def native_version() -> str:
    """numba's version (without importing it; "none" where it is not installed) and a digest of the
    kernel's two files, so kernel=auto's cached choice is re-measured when the kernel's code changes."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    try:
        numba_version = version("numba")
    except PackageNotFoundError:
        numba_version = "none"
    code = hashlib.sha256()
    for source in (Path(__file__), Path(__file__).with_name("_native_loops.py")):
        code.update(source.read_bytes())
    return f"{numba_version}+{code.hexdigest()[:8]}"


def native_problem() -> Optional[str]:
    """Why the native kernel cannot run here (None: numba imports)."""
    try:
        _kernels()
    except Exception as exc:  # ImportError, or a numba built for another numpy
        return f"numba does not import ({type(exc).__name__}: {exc})"
    return None


class NativeCsr:
    """A CSR pair for the native kernel: destination rows → source columns, and its transpose.

    Indices are int32 where the column count fits (half the index traffic), row pointers int64.
    ``values`` (one weight per edge) is None for the unweighted product between row scales."""

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, num_dst: int, num_src: int,
                 values: Optional[torch.Tensor] = None):
        self.num_dst, self.num_src = int(num_dst), int(num_src)
        self.forward_csr = _csr(dst.cpu(), src.cpu(), self.num_dst, self.num_src, values)
        self.backward_csr = _csr(src.cpu(), dst.cpu(), self.num_src, self.num_dst, values)
        self._by_dtype: dict = {}

    def _cast(self, csr: tuple, dtype: torch.dtype) -> tuple:
        indptr, indices, values = csr
        return indptr, indices, None if values is None else values.to(dtype).numpy()

    def operands(self, dtype: torch.dtype) -> Tuple[tuple, tuple]:
        """(forward, backward) as (indptr, indices, values in ``dtype`` or None) numpy arrays."""
        if dtype not in self._by_dtype:
            self._by_dtype[dtype] = (self._cast(self.forward_csr, dtype), self._cast(self.backward_csr, dtype))
        return self._by_dtype[dtype]


def _csr(rows: torch.Tensor, cols: torch.Tensor, num_rows: int, num_cols: int,
         values: Optional[torch.Tensor]) -> tuple:
    """(indptr int64, indices int32|int64 as numpy, values sorted alike or None): columns ascending
    within each row, so a row's sum runs in one fixed order."""
    rows, cols = rows.long(), cols.long()
    order = torch.argsort(rows * max(1, num_cols) + cols, stable=True)
    indptr = torch.zeros(num_rows + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=indptr[1:])
    index_dtype = torch.int32 if num_cols < 2**31 else torch.int64
    return (indptr.numpy(), cols[order].to(index_dtype).numpy(),
            None if values is None else values[order].contiguous())


def _compiled() -> tuple:
    """(scaled, weighted) loops for this process's torch threads: numba's threads follow torch's, so
    ranks never oversubscribe; one thread takes the serial pair."""
    threads = max(1, torch.get_num_threads())
    if threads == 1:
        return _kernels(False)[1:]
    numba = _kernels(True)[0]
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return _kernels(True)[1:]


def _product(csr: tuple, x: torch.Tensor, rows: int, row_scale: Optional[torch.Tensor],
             col_scale: Optional[torch.Tensor]) -> torch.Tensor:
    """row_scale ⊙ (A · (col_scale ⊙ x)) for the CSR ``A`` (scales None: ones)."""
    scaled_spmm, weighted_spmm = _compiled()
    x = x.detach().contiguous()
    out = torch.empty(rows, x.shape[1], dtype=x.dtype)
    indptr, indices, values = csr
    if values is not None:
        weighted_spmm(indptr, indices, values, x.numpy(), out.numpy())
        return out
    ones = None
    if row_scale is None or col_scale is None:
        ones = torch.ones(max(rows, x.shape[0]), dtype=x.dtype)
    col = (ones[: x.shape[0]] if col_scale is None else col_scale).numpy()
    row = (ones[:rows] if row_scale is None else row_scale).numpy()
    scaled_spmm(indptr, indices, col, row, x.numpy(), out.numpy())
    return out


class NativeSpmm(torch.autograd.Function):
    """y = dst_scale ⊙ A (src_scale ⊙ x), with dL/dx = src_scale ⊙ Aᵀ (dst_scale ⊙ dL/dy): both fused."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, csr: NativeCsr, src_scale: Optional[torch.Tensor],  # type: ignore[override]
                dst_scale: Optional[torch.Tensor]) -> torch.Tensor:
        fwd, bwd = csr.operands(x.dtype)
        ctx.backward_args = (bwd, csr.num_src, src_scale, dst_scale)
        return _product(fwd, x, csr.num_dst, dst_scale, src_scale)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        if not ctx.needs_input_grad[0]:  # the input features: no transpose product at all
            return None, None, None, None
        bwd, rows, src_scale, dst_scale = ctx.backward_args
        return _product(bwd, grad_out, rows, src_scale, dst_scale), None, None, None
