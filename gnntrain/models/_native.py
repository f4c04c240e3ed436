"""The native CPU kernel: scale → unweighted SpMM → scale in one pass, in C (compiled at first use)
or numba.

out[v] = dst_scale[v] · Σ_{u→v} src_scale[u] · h[u] over a CSR of the destination rows; its
backward is the same kernel over the prebuilt transpose with the two scales swapped,
grad_h[u] = src_scale[u] · Σ_{u→v} dst_scale[v] · grad_out[v]. Fusing the two row scales saves the
two passes over the features that DGL's GraphConv pays around ``copy_u_sum`` (the ``kernels``
suite, docs/BENCHMARKS.md). Each destination row is summed in CSR order into a per-thread
accumulator, four edges per step in a fixed order, so a run is deterministic at any thread count.
Two builds of the same loops: C (``_native_spmm.c``, compiled by :mod:`._native_c` with the
host's compiler on first use and cached per CPU) where a compiler works, else numba
(``_native_loops``, cached on disk by numba); ``GNNTRAIN_NATIVE=numba`` asks for numba,
``GNNTRAIN_NATIVE=c`` for C or a clear refusal. Why both: C keeps a block of a row's sums in
vector registers over all its edges, about 0.6x numba's time on the ``kernels`` graph
(docs/BENCHMARKS.md), but needs a compiler at run time; numba needs none. Numba is imported only
when ``kernel=native`` runs without the C build; the C build is also loaded (and compiled, once per
host) by the first dropout mask drawn on the CPU (:func:`c_keep_mask`), whatever the kernel.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable, Optional, Tuple

import torch

from gnntrain.models import _native_c

SUPPORTED_DTYPES = (torch.float32, torch.float64)


@functools.lru_cache(maxsize=None)
def _kernels(parallel: bool = True):
    """(numba, scaled loop, weighted loop), threaded or serial; numba is imported on the first call.
    The serial pair serves one-thread ranks: no thread pool that could spin beside the other ranks'
    threads."""
    # numba's pool is sized once, at import: no larger than this process's torch threads
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(1, torch.get_num_threads())))
    import numba

    from gnntrain.models import _native_loops as loops

    return (
        numba,
        loops.compile_loop(loops.scaled_spmm, parallel),
        loops.compile_loop(loops.weighted_spmm, parallel),
    )


@functools.lru_cache(maxsize=None)
def _c_loops() -> Optional[tuple]:
    """The C build's (scaled, weighted) loops, or None where numba serves (``_c_problem`` says
    why)."""
    return None if _c_problem() is not None else _native_c.loops()


@functools.lru_cache(maxsize=None)
def _c_problem() -> Optional[str]:
    try:
        _native_c.load()
    except _native_c.NativeBuildError as exc:
        return str(exc)
    return None


def c_keep_mask() -> Optional[Callable]:
    """The C build's dropout keep mask (:func:`._native_c.keep_mask`), or None where the C build
    does not load (the tensor formula serves: the same bits)."""
    return _native_c.keep_mask if _c_problem() is None else None


def native_backend() -> str:
    """Which build runs ``kernel=native`` here: "C (<compiler>)" or "numba <version>"; raises
    nothing."""
    if _c_problem() is None:
        return _native_c.load()[1]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"numba {version('numba')}"
    except PackageNotFoundError:
        return "numba (not installed)"


def native_version() -> str:
    """The build that runs (C with its compiler, or numba's version) and a digest of the kernel's
    files, so kernel=auto's cached choice is re-measured when either changes."""
    import hashlib

    code = hashlib.sha256()
    for name in (
        Path(__file__).name,
        "_native_loops.py",
        "_native_c.py",
        "_native_spmm.c",
        "_native_halo.c",
    ):
        code.update(Path(__file__).with_name(name).read_bytes())
    return f"{native_backend()}+{code.hexdigest()[:8]}"


def native_problem() -> Optional[str]:
    """Why the native kernel cannot run here (None: the C build loads or numba imports)."""
    if _c_problem() is None:
        return None
    if os.environ.get("GNNTRAIN_NATIVE") == "c":
        return f"GNNTRAIN_NATIVE=c, but the C build does not load: {_c_problem()}"
    try:
        _kernels()
    except Exception as exc:  # ImportError, or a numba built for another numpy
        return (
            f"no C build ({_c_problem()}) and numba does not import ({type(exc).__name__}: {exc})"
        )
    return None


class NativeCsr:
    """A CSR pair for the native kernel: destination rows → source columns, and its transpose.

    Indices are int32 where the column count fits (half the index traffic), row pointers int64.
    ``values`` (one weight per edge) is None for the unweighted product between row scales."""

    def __init__(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        num_dst: int,
        num_src: int,
        values: Optional[torch.Tensor] = None,
    ):
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
            self._by_dtype[dtype] = (
                self._cast(self.forward_csr, dtype),
                self._cast(self.backward_csr, dtype),
            )
        return self._by_dtype[dtype]


def _csr(
    rows: torch.Tensor,
    cols: torch.Tensor,
    num_rows: int,
    num_cols: int,
    values: Optional[torch.Tensor],
) -> tuple:
    """(indptr int64, indices int32|int64 as numpy, values sorted alike or None): columns ascending
    within each row, so a row's sum runs in one fixed order."""
    rows, cols = rows.long(), cols.long()
    order = torch.argsort(rows * max(1, num_cols) + cols, stable=True)
    indptr = torch.zeros(num_rows + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(rows, minlength=num_rows), 0, out=indptr[1:])
    index_dtype = torch.int32 if num_cols < 2**31 else torch.int64
    return (
        indptr.numpy(),
        cols[order].to(index_dtype).numpy(),
        None if values is None else values[order].contiguous(),
    )


def _compiled() -> tuple:
    """(scaled, weighted) loops for this process's torch threads: the C build's (each call passes
    torch's thread count), else numba's, whose threads follow torch's, so ranks never oversubscribe;
    one thread takes numba's serial pair."""
    c_loops = _c_loops()
    if c_loops is not None:
        return c_loops
    threads = max(1, torch.get_num_threads())
    if threads == 1:
        return _kernels(False)[1:]
    numba = _kernels(True)[0]
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return _kernels(True)[1:]


def _product(
    csr: tuple,
    x: torch.Tensor,
    rows: int,
    row_scale: Optional[torch.Tensor],
    col_scale: Optional[torch.Tensor],
) -> torch.Tensor:
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
    """y = dst_scale ⊙ A (src_scale ⊙ x), with dL/dx = src_scale ⊙ Aᵀ (dst_scale ⊙ dL/dy): both
    fused."""

    @staticmethod
    def forward(
        ctx,
        x: torch.Tensor,
        csr: NativeCsr,
        src_scale: Optional[torch.Tensor],  # type: ignore[override]
        dst_scale: Optional[torch.Tensor],
    ) -> torch.Tensor:
        fwd, bwd = csr.operands(x.dtype)
        ctx.backward_args = (bwd, csr.num_src, src_scale, dst_scale)
        return _product(fwd, x, csr.num_dst, dst_scale, src_scale)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        if not ctx.needs_input_grad[0]:  # the input features: no transpose product at all
            return None, None, None, None
        bwd, rows, src_scale, dst_scale = ctx.backward_args
        return _product(bwd, grad_out, rows, src_scale, dst_scale), None, None, None
