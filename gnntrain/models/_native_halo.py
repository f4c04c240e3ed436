"""SuperGCN's CPU halo operators in the native C build (``_native_halo.c``; SuperGCN §2,
docs/design.md#supergcn): quantise + pack and unpack + dequantise in one threaded pass per row
block, and the post-aggregation as a sorted, clustered index_add. They give the bits of the torch
formulas they replace (:mod:`gnntrain.comm.quantize`, :mod:`gnntrain.models.post_aggregation`) and
serve CPU tensors where the C build loads (:func:`available`); ``GNNTRAIN_NATIVE=numba`` or a host
without a compiler leaves torch's.
"""

from __future__ import annotations

import ctypes
from typing import Optional, Tuple

import numpy as np
import torch

from gnntrain.models import _native, _native_c

_TYPES = {torch.float32: "f32", torch.float64: "f64"}
PARAM_KINDS = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
_P, _I64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int


def _library() -> ctypes.CDLL:
    library, _ = _native_c.load()
    if not getattr(library, "_gnntrain_halo", False):
        for t in _TYPES.values():
            fn = getattr(library, f"gnntrain_quantize_{t}")
            fn.argtypes, fn.restype = (
                [_P, _I64, _P, _I64, _I64, _INT, _INT, _P, _I64, _P, _INT],
                _INT,
            )
            fn = getattr(library, f"gnntrain_dequantize_{t}")
            fn.argtypes, fn.restype = [_P, _I64, _P, _I64, _I64, _INT, _P, _I64, _INT], _INT
            for i in ("i32", "i64"):
                fn = getattr(library, f"gnntrain_scatter_{t}_{i}")
                fn.argtypes, fn.restype = (
                    [_P, _P, _P, _P, _I64, _P, _I64, _P, _I64, _I64, _I64, _INT],
                    _INT,
                )
        library._gnntrain_halo = True
    return library


def available(*tensors: torch.Tensor, dtype: Optional[torch.dtype] = None) -> bool:
    """Whether the C operators serve these tensors: all on the CPU, computing in float32 or float64
    (``dtype``, else the first tensor's), and the C build loads here (not with
    ``GNNTRAIN_NATIVE=numba`` or without a compiler)."""
    if any(t.device.type != "cpu" for t in tensors):
        return False
    if (dtype or (tensors[0].dtype if tensors else torch.float32)) not in _TYPES:
        return False
    return _native._c_problem() is None


def _threads() -> int:
    return max(1, torch.get_num_threads())


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` with unit column stride (a row stride of its own is fine), else a contiguous copy."""
    return (
        t
        if t.dim() == 2 and (t.shape[1] <= 1 or t.stride(1) == 1) and t.stride(0) >= t.shape[1]
        else t.contiguous()
    )


def quantize_pack(
    x: torch.Tensor, bits: int, raw_noise: torch.Tensor, param_dtype: torch.dtype
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 [n, ceil(d·bits/8)], params [n, 2] = (scale, zero) in ``param_dtype``) of
    :func:`gnntrain.comm.quantize.quantize_rows`, with ``raw_noise`` the int16 lanes torch drew (its
    low 15 bits are the noise). ``bits`` in 1, 2, 4, 8; rows at least one wide."""
    n, d = x.shape
    x = _rows(x)
    raw_noise = raw_noise.contiguous()
    if raw_noise.dtype != torch.int16 or raw_noise.numel() != n * d:
        raise ValueError("native quantiser: the noise must be n × d int16 lanes")
    packed = torch.empty((n, (d * bits + 7) // 8), dtype=torch.uint8)
    params = torch.empty((n, 2), dtype=torch.float32)
    status = getattr(_library(), f"gnntrain_quantize_{_TYPES[x.dtype]}")(
        x.data_ptr(),
        x.stride(0),
        raw_noise.data_ptr(),
        n,
        d,
        int(bits),
        PARAM_KINDS[param_dtype],
        packed.data_ptr(),
        packed.shape[1],
        params.data_ptr(),
        _threads(),
    )
    if status != 0:
        raise MemoryError("native quantiser: no memory for its row buffers")
    return packed, params.to(param_dtype)  # exact: every value is in the parameter format


def unpack_dequantize(
    packed: torch.Tensor, params: torch.Tensor, bits: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
    """:func:`gnntrain.comm.quantize.dequantize_rows` in one pass per row: code · scale + zero in
    ``dtype``."""
    n = packed.shape[0]
    packed = _rows(packed)
    if packed.dtype != torch.uint8 or packed.shape[1] * 8 < width * bits:
        raise ValueError(
            f"native dequantiser: {packed.shape[1]} bytes per row do not hold {width} {bits}-bit "
            "codes"
        )
    params = params.to(dtype).contiguous()
    out = torch.empty((n, width), dtype=dtype)
    status = getattr(_library(), f"gnntrain_dequantize_{_TYPES[dtype]}")(
        packed.data_ptr(),
        packed.stride(0),
        params.data_ptr(),
        n,
        width,
        int(bits),
        out.data_ptr(),
        width,
        _threads(),
    )
    if status != 0:
        raise MemoryError("native dequantiser: no memory for its row buffers")
    return out


def scatter_add(
    indptr: np.ndarray,
    rows: np.ndarray,
    dst_scale: Optional[torch.Tensor],
    base: torch.Tensor,
    src: torch.Tensor,
) -> torch.Tensor:
    """base + dst_scale ⊙ (A · src) for the CSR ``A`` (indptr int64 over base's rows, rows
    int32/int64: the src row of each contribution, sorted per destination), each destination row
    summed in CSR order by one thread (no atomics)."""
    n, width = base.shape
    if (
        indptr.dtype != np.int64
        or indptr.shape[0] != n + 1
        or rows.dtype not in (np.int32, np.int64)
    ):
        raise ValueError(
            "native scatter: indptr must be int64 over the destination rows, rows int32 or int64"
        )
    if src.dtype != base.dtype or src.shape[1] != width:
        raise ValueError("native scatter: the received rows must have the base's dtype and width")
    base, src = _rows(base), _rows(src)
    scale = None if dst_scale is None else dst_scale.to(base.dtype).contiguous()
    out = torch.empty((n, width), dtype=base.dtype)
    index = "i32" if rows.dtype == np.int32 else "i64"
    status = getattr(_library(), f"gnntrain_scatter_{_TYPES[base.dtype]}_{index}")(
        indptr.ctypes.data,
        rows.ctypes.data,
        None if scale is None else scale.data_ptr(),
        base.data_ptr(),
        base.stride(0),
        src.data_ptr(),
        src.stride(0),
        out.data_ptr(),
        width,
        n,
        width,
        _threads(),
    )
    if status != 0:
        raise MemoryError("native scatter: no memory for its chunk table")
    return out
