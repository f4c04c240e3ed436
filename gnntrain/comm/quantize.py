"""Per-row stochastic min/max quantization for halo rows (SuperGCN paper, §2 "Quantization of
communication to Int2", quantizer of §1 "Stochastic Integer Quantization"; docs/design.md#supergcn).

For a row x with zero point Z = min(x) and scale S = (max(x) − Z)/(2^b − 1),
each entry is coded as q = floor((x − Z)/S + U), U ~ U[0, 1), clamped to
[0, 2^b − 1], and decoded as q·S + Z. Because E[floor(v + U)] = v, the
decoded value is unbiased, and |decoded − x| < S. U is drawn on a 2^-15 grid,
U = (r + ½)/2^15 with r uniform on 15 bits (four draws per 64-bit random
word, about 4x cheaper than ``torch.rand``): E[U] = ½ exactly, and the bias
left by the grid is at most S/2^16, far below the noise.

Parameters travel in ``param_dtype`` (bfloat16 by default: two 2-byte
values per row, the paper's data/param ratio, with float32's range so tiny
gradient rows do not underflow). They are rounded *before* coding: Z down
and S up, so every row still lies inside [Z, Z + (2^b − 1)·S] and the two
properties above hold for the parameters actually sent. A constant row is
coded exactly when its value is representable in ``param_dtype`` (always
for the all-zero rows ReLU and dropout produce); with bfloat16 parameters a
row whose spread is tiny next to its offset loses resolution (Z's rounding
widens the range), which ``param_dtype=float32`` avoids at 8 bytes per row.

Codes are packed little-end first: 8/b codes per byte (4 int2 values per
uint8).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import torch

from gnntrain.metrics.clock import timed
from gnntrain.seeding import Stream, derive_seed

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.metrics.clock import StageClock

PARAM_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
BITS = (2, 4, 8)


def packed_row_bytes(width: int, bits: int) -> int:
    """Bytes one packed row of ``width`` b-bit codes occupies."""
    return (int(width) * int(bits) + 7) // 8


def param_row_bytes(param_dtype: str) -> int:
    """Scale and zero point bytes per row."""
    return 2 * torch.empty(0, dtype=PARAM_DTYPES[param_dtype]).element_size()


def _round_toward(values: torch.Tensor, target: torch.dtype, down: bool) -> torch.Tensor:
    """``values`` in ``target`` precision, rounded down (or up) instead of to nearest."""
    out = values.to(target)
    wrong = (out.to(values.dtype) > values) if down else (out.to(values.dtype) < values)
    if bool(wrong.any()):
        if out.element_size() == 2:  # nearest is within half an ulp: one step fixes it
            out[wrong] = _step(out[wrong], down)
        else:
            out[wrong] = torch.nextafter(
                out[wrong], torch.full_like(out[wrong], float("-inf" if down else "inf"))
            )
    return out


def _step(values: torch.Tensor, down: bool) -> torch.Tensor:
    """One ulp of a 16-bit float type, by its bit pattern."""
    bits = values.view(torch.int16).to(torch.int32)
    negative = bits < 0
    magnitude = bits & 0x7FFF
    # moving down: magnitude grows for negatives (and for -0/+0 we go to the smallest negative)
    grow = negative if down else ~negative
    zero = magnitude == 0
    magnitude = torch.where(grow | zero, magnitude + 1, magnitude - 1)
    sign = torch.where(zero, torch.full_like(bits, 1 if down else 0), negative.to(torch.int32))
    out = (sign << 15) | magnitude
    out = torch.where(out >= 0x8000, out - 0x10000, out)
    return out.to(torch.int16).view(values.dtype)


NOISE_BITS = 15


def _noise_lanes(
    shape: Tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """The raw int16 lanes of :func:`rounding_noise`, before their top bit is masked off."""
    count = math.prod(shape)
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(
        generator=generator
    )
    return words.view(torch.int16)[:count].view(shape)


def rounding_noise(
    shape: Tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """int16 r uniform on [0, 2^15), four per 64-bit word: torch's int64 ``random_()`` fills [0,
    2^63) on CPU and CUDA, so each 16-bit lane's low 15 bits are uniform and its top bit is masked
    off."""
    return _noise_lanes(shape, generator, device).bitwise_and_((1 << NOISE_BITS) - 1)


def _native_codec(*tensors: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the C build's one-pass coder serves these tensors, computing in ``dtype``: on the
    CPU, float32 or float64, where the C build loads (:mod:`gnntrain.models._native_halo`)."""
    if any(t.device.type != "cpu" for t in tensors) or dtype not in (torch.float32, torch.float64):
        return False
    from gnntrain.models import _native_halo

    return _native_halo.available(*tensors, dtype=dtype)


def quantize_rows(
    x: torch.Tensor,
    bits: int,
    generator: torch.Generator,
    param_dtype: torch.dtype = torch.bfloat16,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(packed uint8 [n, ceil(d·b/8)], params [n, 2] = (scale, zero) in ``param_dtype``): on the CPU
    the C build's one pass per row (:func:`gnntrain.models._native_halo.quantize_pack`) where it
    loads, else the tensor formula (:func:`quantize_torch`); the same noise and the same bits."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    n, d = x.shape
    if n == 0:
        return (
            torch.zeros((0, packed_row_bytes(d, bits)), dtype=torch.uint8, device=x.device),
            torch.zeros((0, 2), dtype=param_dtype, device=x.device),
        )
    lanes = _noise_lanes(tuple(x.shape), generator, x.device)
    if d > 0 and _native_codec(x, dtype=x.dtype):
        from gnntrain.models._native_halo import quantize_pack

        return quantize_pack(x, bits, lanes, param_dtype)
    return quantize_torch(x, bits, lanes.bitwise_and_((1 << NOISE_BITS) - 1), param_dtype)


def quantize_torch(
    x: torch.Tensor, bits: int, noise: torch.Tensor, param_dtype: torch.dtype = torch.bfloat16
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The tensor formula of :func:`quantize_rows` for ``noise`` (int16 on [0, 2^15), x's shape);
    any ``bits`` of 1, 2, 4, 8."""
    levels = (1 << bits) - 1
    zero = _round_toward(x.amin(dim=1), param_dtype, down=True)
    z = zero.to(x.dtype)
    spread = x.amax(dim=1) - z
    tiny = torch.finfo(param_dtype).tiny
    scale = _round_toward((spread / levels).clamp(min=tiny), param_dtype, down=False)
    s = scale.to(x.dtype)
    # (x − Z)/S + (r + ½)/2^15: the half step goes into the zero point, per row, in float64
    z_half_step = (z.double() - s.double() * 2.0 ** -(NOISE_BITS + 1)).to(x.dtype)
    codes = (
        (x - z_half_step[:, None]).div_(s[:, None]).add_(noise.to(x.dtype), alpha=2.0**-NOISE_BITS)
    )
    codes = codes.floor_().clamp_(0, levels).to(torch.uint8)
    return pack_codes(codes, bits), torch.stack([scale, zero], dim=1)


def dequantize_rows(
    packed: torch.Tensor, params: torch.Tensor, bits: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
    """code · scale + zero in ``dtype``: the C build's one pass per row on the CPU where it loads,
    else :func:`dequantize_torch` (the same bits)."""
    if packed.shape[0] and width > 0 and _native_codec(packed, params, dtype=dtype):
        from gnntrain.models._native_halo import unpack_dequantize

        return unpack_dequantize(packed, params, bits, width, dtype)
    return dequantize_torch(packed, params, bits, width, dtype)


def dequantize_torch(
    packed: torch.Tensor, params: torch.Tensor, bits: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
    codes = unpack_codes(packed, bits, width).to(dtype)
    scale, zero = params[:, 0].to(dtype), params[:, 1].to(dtype)
    return codes * scale[:, None] + zero[:, None]


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes [n, d] (each < 2^b) → packed uint8 [n, ceil(d·b/8)]."""
    per_byte = 8 // bits
    n, d = codes.shape
    if per_byte == 1:
        return codes.contiguous()
    pad = (-d) % per_byte
    if pad:
        codes = torch.cat([codes, codes.new_zeros((n, pad))], dim=1)
    grouped = codes.reshape(n, -1, per_byte)
    packed = grouped[:, :, 0].clone()
    for slot in range(1, per_byte):  # uint8 shifts and ors: no widening to int32 and back
        packed |= grouped[:, :, slot] << (slot * bits)
    return packed


def unpack_codes(packed: torch.Tensor, bits: int, width: int) -> torch.Tensor:
    per_byte = 8 // bits
    if per_byte == 1:
        return packed[:, :width]
    mask = (1 << bits) - 1
    codes = torch.empty((*packed.shape, per_byte), dtype=torch.uint8, device=packed.device)
    for slot in range(per_byte):
        torch.bitwise_and(packed >> (slot * bits), mask, out=codes[:, :, slot])
    return codes.reshape(packed.shape[0], -1)[:, :width]


@dataclass
class RowQuantizer:
    """Codes halo rows for one rank, seeded per (seed, rank, epoch, stream, call).

    ``begin(epoch, training)`` restarts the call counter, so a run and its
    resumed continuation draw the same rounding noise.
    """

    bits: int
    seed: int
    rank: int
    param_dtype: str = "bfloat16"
    clock: Optional["StageClock"] = None  # gets the coding time as stage "quantization"
    _epoch: int = 0
    _stream: int = 0
    _calls: Dict[str, int] = field(default_factory=dict)

    def begin(self, epoch: int, training: bool = True) -> None:
        self._epoch, self._stream, self._calls = epoch, (0 if training else 1), {}

    def _generator(self, direction: str, device: torch.device) -> torch.Generator:
        call = self._calls.get(direction, 0)
        self._calls[direction] = call + 1
        seed = derive_seed(
            self.seed,
            Stream.quantize,
            self.rank,
            self._epoch,
            self._stream,
            zlib.crc32(direction.encode()),
            call,
        )
        return torch.Generator(device=device).manual_seed(seed)

    @property
    def dtype(self) -> torch.dtype:
        return PARAM_DTYPES[self.param_dtype]

    def encode(self, x: torch.Tensor, direction: str) -> Tuple[torch.Tensor, torch.Tensor]:
        now = timed(x.device)
        start = now()
        out = quantize_rows(x, self.bits, self._generator(direction, x.device), self.dtype)
        if self.clock is not None:
            self.clock.add("quantization", now() - start)
        return out

    def decode(
        self, packed: torch.Tensor, params: torch.Tensor, width: int, dtype: torch.dtype
    ) -> torch.Tensor:
        now = timed(packed.device)
        start = now()
        out = dequantize_rows(packed, params, self.bits, width, dtype)
        if self.clock is not None:
            self.clock.add("quantization", now() - start)
        return out


def quantizer_for(
    bits: int,
    seed: int,
    rank: int,
    param_dtype: str = "bfloat16",
    clock: Optional["StageClock"] = None,
) -> Optional[RowQuantizer]:
    """None for bits=32 (rows travel unquantized, in the training dtype)."""
    return (
        None
        if int(bits) >= 32
        else RowQuantizer(int(bits), int(seed), int(rank), param_dtype, clock)
    )
