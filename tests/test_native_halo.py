"""SuperGCN's halo operators in the native C build (gnntrain/models/_native_halo.c): quantise +
pack, unpack + dequantise and the sorted post-aggregation scatter give the torch formulas' bits, at
any thread count, and torch's formulas serve where the C build does not load."""

import pytest
import torch

from gnntrain.comm import quantize
from gnntrain.models import SparseAdjacency, _native, _native_c, _native_halo
from gnntrain.models.post_aggregation import PostAggregation, gather, scatter

PARAMS = (torch.bfloat16, torch.float16, torch.float32)
BITS = (1, 2, 4, 8)
WIDTHS = (1, 7, 64, 130)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (NaN and signed zeros compare as bits)."""
    return t.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    )


def _threads(n: int, fn, *args):
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(previous)


def _rows(dtype, width: int, seed: int = 0) -> torch.Tensor:
    """Rows over 12 decades (float16's range overflows at the top: infinite scales), constant rows,
    zeros."""
    gen = torch.Generator().manual_seed(seed)
    x = (
        torch.randn(203, width, dtype=dtype, generator=gen)
        * torch.logspace(-6, 6, 203, dtype=dtype)[:, None]
    )
    x[5] = 0.0
    x[6] = 3.25
    x[7] = -1e-3
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_c_quantiser_and_dequantiser_have_the_torch_bits(dtype):
    """For the same noise lanes: the same packed codes and (scale, zero) bits at bits 1, 2, 4, 8,
    widths 1, 7, 64, 130 and every parameter dtype; the same decoded rows; 1 and 2 threads alike."""
    for width in WIDTHS:
        x = _rows(dtype, width, seed=width)
        lanes = quantize._noise_lanes(
            tuple(x.shape), torch.Generator().manual_seed(width), x.device
        )
        noise = lanes.clone().bitwise_and_((1 << quantize.NOISE_BITS) - 1)
        for param_dtype in PARAMS:
            for bits in BITS:
                want_codes, want_params = quantize.quantize_torch(x, bits, noise, param_dtype)
                want_rows = quantize.dequantize_torch(want_codes, want_params, bits, width, dtype)
                for threads in (1, 2):
                    codes, params = _threads(
                        threads, _native_halo.quantize_pack, x, bits, lanes, param_dtype
                    )
                    case = (width, param_dtype, bits, threads)
                    assert params.dtype == param_dtype and torch.equal(codes, want_codes), case
                    assert torch.equal(_bits(params), _bits(want_params)), case
                    rows = _threads(
                        threads, _native_halo.unpack_dequantize, codes, params, bits, width, dtype
                    )
                    assert torch.equal(_bits(rows), _bits(want_rows)), case


def test_c_quantiser_reads_strided_rows():
    wide = _rows(torch.float32, 90)
    x = wide[:, 10:80]
    lanes = quantize._noise_lanes(tuple(x.shape), torch.Generator().manual_seed(3), x.device)
    got = _native_halo.quantize_pack(x, 2, lanes, torch.bfloat16)
    want = quantize.quantize_torch(x, 2, lanes.clone().bitwise_and_(0x7FFF), torch.bfloat16)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.fixture
def native_off(monkeypatch):
    """GNNTRAIN_NATIVE=numba for the test: the C build is refused; caches forgotten before and
    after."""

    def clear():
        for cached in (_native_c.load, _native._c_loops, _native._c_problem):
            cached.cache_clear()

    monkeypatch.setenv("GNNTRAIN_NATIVE", "numba")
    clear()
    yield
    monkeypatch.delenv("GNNTRAIN_NATIVE", raising=False)
    clear()


def test_quantize_rows_runs_c_on_the_cpu_and_torch_without_it(monkeypatch, native_off):
    """quantize_rows / dequantize_rows: the C pass where the build loads, the tensor formula with
    GNNTRAIN_NATIVE=numba, the same bits from the same generator seed."""
    x = _rows(torch.float32, 64)
    calls = []
    for name in ("quantize_pack", "unpack_dequantize"):
        real = getattr(_native_halo, name)
        monkeypatch.setattr(
            _native_halo, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a)
        )
    torch_side = quantize.quantize_rows(x, 2, torch.Generator().manual_seed(9))
    torch_rows = quantize.dequantize_rows(*torch_side, 2, 64, torch.float32)
    assert calls == []
    monkeypatch.delenv("GNNTRAIN_NATIVE")
    _native._c_problem.cache_clear()
    _native_c.load.cache_clear()
    c_side = quantize.quantize_rows(x, 2, torch.Generator().manual_seed(9))
    c_rows = quantize.dequantize_rows(*c_side, 2, 64, torch.float32)
    assert calls == ["quantize_pack", "unpack_dequantize"]
    assert torch.equal(c_side[0], torch_side[0]) and torch.equal(c_side[1], torch_side[1])
    assert torch.equal(c_rows, torch_rows)


def _remote(n: int, m: int, edges: int, scaled: bool, seed: int):
    """Edges into the even rows only (odd rows receive nothing), with repeated (dst, src) pairs; one
    destination factor per row (or none)."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, n // 2, (edges,), generator=gen) * 2
    src = torch.randint(0, m, (edges,), generator=gen)
    dst, src = torch.cat([dst, dst[:50]]), torch.cat([src, src[:50]])  # duplicates
    factor = (
        torch.rand(n, dtype=torch.float64, generator=gen)
        if scaled
        else torch.ones(n, dtype=torch.float64)
    )
    return dst, src, torch.stack([torch.ones(dst.numel(), dtype=torch.float64), factor[dst]], dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scaled", [True, False])
def test_c_scatter_has_the_sorted_index_add_bits(dtype, scaled):
    """base + d ⊙ (A · received) and its backward: the C pass, torch's index_add_ in the same sorted
    order and the native SpMM added after (what the mode ran before) give the same bits, with
    duplicate edges and rows that receive nothing, at 1 and 2 threads and widths across the register
    block."""
    n, m = 400, 250
    dst, src, weight = _remote(n, m, 3000, scaled, seed=1)
    op = PostAggregation(dst, src, weight, n, m)
    spmm = SparseAdjacency(dst, src, weight, n, m, kernel="native")
    gen = torch.Generator().manual_seed(2)
    for width in (1, 33, 64, 130):
        base = torch.randn(n, width, dtype=dtype, generator=gen, requires_grad=True)
        received = torch.randn(m, width, dtype=dtype, generator=gen, requires_grad=True)
        grad = torch.randn(n, width, dtype=dtype, generator=gen)
        scale = op.scale(dtype)
        want = scatter(op.forward_csr, scale, base.detach(), received.detach(), native=False)
        want_grad = gather(op.backward_csr, scale, grad, native=False)
        before = base + spmm.spmm(received)
        before.backward(grad)
        assert torch.equal(want, before) and torch.equal(want_grad, received.grad), width
        for threads in (1, 2):
            base.grad = received.grad = None
            out = _threads(threads, op, base, received)
            _threads(threads, out.backward, grad)
            assert torch.equal(_bits(out), _bits(want)), (width, threads)
            assert torch.equal(_bits(received.grad), _bits(want_grad)) and torch.equal(
                base.grad, grad
            )
        assert torch.equal(out[1::2], base[1::2])  # rows that receive nothing keep the local sum


def test_scatter_falls_back_to_torch_without_the_c_build(native_off):
    dst, src, weight = _remote(100, 60, 500, True, seed=4)
    op = PostAggregation(dst, src, weight, 100, 60)
    base, received = torch.randn(100, 16), torch.randn(60, 16)
    assert not _native_halo.available(base, received)
    got = op(base, received)
    assert torch.equal(
        got, scatter(op.forward_csr, op.scale(torch.float32), base, received, native=False)
    )


def test_post_aggregation_refuses_unfactored_weights():
    dst, src, weight = _remote(20, 10, 40, True, seed=5)
    bad = weight.clone()
    bad[0, 0] = 2.0
    with pytest.raises(ValueError, match="source factor"):
        PostAggregation(dst, src, bad, 20, 10)
    bad = weight.clone()
    bad[:, 1] = torch.rand(bad.shape[0], dtype=torch.float64)
    with pytest.raises(ValueError, match="differ within a row"):
        PostAggregation(dst, src, bad, 20, 10)
