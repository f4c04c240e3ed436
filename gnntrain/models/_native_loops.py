"""The native kernel's compiled row loops (numba); imported only by ``_native._kernels``.

They are module-level functions, not closures, so numba's on-disk cache (``cache=True``) hits: the
cache key of a closure includes its cells pickled, and a dispatcher pickles with a fresh id in every
process, so each rank used to compile every loop again (seconds per loop and dtype).
"""

from __future__ import annotations

import types as pytypes
from typing import Callable

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

ROWS_PER_TASK = 64  # destination rows per parallel task: one accumulator allocation per task
PREFETCH_EDGES = 8  # how far ahead (in edges) the source rows are prefetched
CACHE_LINE = 64  # bytes


@intrinsic
def prefetch_line(typingctx, array, row, offset):
    """LLVM's prefetch (read, keep in all cache levels) of the byte ``offset`` of row ``row`` of the
    2-D array ``array``; numba has no prefetch of its own."""

    def codegen(context, builder, signature, args):
        array_type, row_type, offset_type = signature.args
        view = context.make_array(array_type)(context, builder, args[0])
        row_stride = cgutils.unpack_tuple(builder, view.strides)[0]
        start = builder.add(
            builder.mul(context.cast(builder, args[1], row_type, types.intp), row_stride),
            context.cast(builder, args[2], offset_type, types.intp),
        )
        byte = ir.IntType(8).as_pointer()
        address = builder.gep(builder.bitcast(view.data, byte), [start])
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
            "llvm.prefetch.p0",
        )
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, row, offset), codegen


# The gather of source rows is the cost (random rows, width·itemsize bytes each): each step asks
# the memory system for the rows PREFETCH_EDGES edges ahead, so their lines are on the way while
# this step adds (30-40% faster than without, at width 128 on a random 300k-node graph here).
@njit(inline="always", boundscheck=False, cache=True)
def prefetch_ahead(indices, h, e, row_bytes):  # pragma: no cover - compiled
    for f in range(e + PREFETCH_EDGES, min(e + PREFETCH_EDGES + 4, indices.shape[0])):
        u = indices[f]
        for offset in range(0, row_bytes, CACHE_LINE):
            prefetch_line(h, u, offset)


# Four edges per step: four source rows are read at once (more loads in flight on a random gather:
# 25-30% faster than one edge per step at width 128 here) and the accumulator is stored once per
# four.
def scaled_spmm(indptr, indices, src_scale, dst_scale, h, out):  # pragma: no cover - compiled
    rows, width = out.shape
    row_bytes = width * h.itemsize
    for task in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        acc = np.empty(width, dtype=h.dtype)
        for v in range(task * ROWS_PER_TASK, min(rows, (task + 1) * ROWS_PER_TASK)):
            acc[:] = 0
            e, end = indptr[v], indptr[v + 1]
            while e + 4 <= end:
                prefetch_ahead(indices, h, e, row_bytes)
                u0, u1, u2, u3 = indices[e], indices[e + 1], indices[e + 2], indices[e + 3]
                s0, s1, s2, s3 = src_scale[u0], src_scale[u1], src_scale[u2], src_scale[u3]
                for k in range(width):
                    acc[k] += (s0 * h[u0, k] + s1 * h[u1, k]) + (s2 * h[u2, k] + s3 * h[u3, k])
                e += 4
            while e < end:
                u = indices[e]
                s = src_scale[u]
                for k in range(width):
                    acc[k] += s * h[u, k]
                e += 1
            d = dst_scale[v]
            for k in range(width):
                out[v, k] = acc[k] * d


def weighted_spmm(indptr, indices, values, h, out):  # pragma: no cover - compiled
    rows, width = out.shape
    row_bytes = width * h.itemsize
    for task in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        acc = np.empty(width, dtype=h.dtype)
        for v in range(task * ROWS_PER_TASK, min(rows, (task + 1) * ROWS_PER_TASK)):
            acc[:] = 0
            e, end = indptr[v], indptr[v + 1]
            while e + 4 <= end:
                prefetch_ahead(indices, h, e, row_bytes)
                u0, u1, u2, u3 = indices[e], indices[e + 1], indices[e + 2], indices[e + 3]
                w0, w1, w2, w3 = values[e], values[e + 1], values[e + 2], values[e + 3]
                for k in range(width):
                    acc[k] += (w0 * h[u0, k] + w1 * h[u1, k]) + (w2 * h[u2, k] + w3 * h[u3, k])
                e += 4
            while e < end:
                u = indices[e]
                w = values[e]
                for k in range(width):
                    acc[k] += w * h[u, k]
                e += 1
            for k in range(width):
                out[v, k] = acc[k]


def compile_loop(fn: Callable, parallel: bool):
    """``fn`` compiled threaded or serial. numba names its cache files by qualname, so the serial
    copy gets a name of its own. fastmath lets LLVM vectorize the feature loop and contract a·b+c
    into FMAs; it never reorders the sum over a row's edges (a loop-carried store), so the result
    does not depend on the thread count."""
    if not parallel:
        fn = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial")
        fn.__qualname__ = fn.__name__
    return njit(parallel=parallel, fastmath=True, boundscheck=False, nogil=True, cache=True)(fn)
