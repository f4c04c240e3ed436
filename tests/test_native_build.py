"""The native kernel's two builds: C (compiled at first use, cached per source, compiler and CPU)
and numba (where no compiler works). They compute the same sums; the build machinery fails soft to
numba unless GNNTRAIN_NATIVE=c asks for C, and says why."""

import os
import stat

import numpy as np
import pytest
import torch

from gnntrain.models import _native, _native_c


def _clear_caches() -> None:
    for cached in (_native_c.load, _native._c_loops, _native._c_problem):
        cached.cache_clear()


@pytest.fixture
def build_dir(monkeypatch, tmp_path):
    """A private build cache; the process's cached build is forgotten before and after."""
    folder = tmp_path / "native"
    monkeypatch.setenv("GNNTRAIN_NATIVE_CACHE_DIR", str(folder))
    monkeypatch.delenv("GNNTRAIN_NATIVE", raising=False)
    _clear_caches()
    yield folder
    _clear_caches()


def _operands(
    value_dtype, index_dtype, width: int, rows: int = 300, cols: int = 500, seed: int = 0
):
    rng = np.random.default_rng(seed)
    indptr = np.zeros(rows + 1, np.int64)
    indptr[1:] = np.cumsum(rng.integers(0, 40, rows))
    # sorted: any order is valid
    indices = np.sort(rng.integers(0, cols, indptr[-1])).astype(index_dtype)
    h = rng.standard_normal((cols, width)).astype(value_dtype)
    return (
        indptr,
        indices,
        rng.random(cols).astype(value_dtype),
        rng.random(rows).astype(value_dtype),
        rng.random(indptr[-1]).astype(value_dtype),
        h,
    )


def _dense(indptr, indices, weights, h, rows):
    a = np.zeros((rows, h.shape[0]), np.float64)
    for v in range(rows):
        np.add.at(
            a[v],
            indices[indptr[v] : indptr[v + 1]].astype(np.int64),
            weights[indptr[v] : indptr[v + 1]],
        )
    return a @ h.astype(np.float64)


@pytest.mark.parametrize("value_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_c_and_numba_builds_compute_the_same_products(value_dtype, index_dtype):
    """Scaled and weighted, widths below, at and across the C loop's register block (64 floats, 32
    doubles): both builds equal the dense product to rounding, and C gives the same bits at 1 and 2
    threads."""
    c_scaled, c_weighted = _native_c.loops()
    _, nb_scaled, nb_weighted = _native._kernels(True)
    tol = 2e-5 if value_dtype == np.float32 else 1e-12
    for width in (1, 33, 64, 150):
        indptr, indices, src_scale, dst_scale, values, h = _operands(
            value_dtype, index_dtype, width
        )
        rows = len(indptr) - 1
        edge_scale = src_scale[indices] * np.repeat(dst_scale, np.diff(indptr))
        for name, want in (
            ("scaled", _dense(indptr, indices, edge_scale, h, rows)),
            ("weighted", _dense(indptr, indices, values, h, rows)),
        ):
            got = {}
            for build, threads in (("c", 1), ("c", 2), ("numba", 2)):
                out = np.full((rows, width), np.nan, value_dtype)
                previous = torch.get_num_threads()
                torch.set_num_threads(threads)
                try:
                    if name == "scaled":
                        (c_scaled if build == "c" else nb_scaled)(
                            indptr, indices, src_scale, dst_scale, h, out
                        )
                    else:
                        (c_weighted if build == "c" else nb_weighted)(
                            indptr, indices, values, h, out
                        )
                finally:
                    torch.set_num_threads(previous)
                np.testing.assert_allclose(
                    out,
                    want,
                    rtol=tol,
                    atol=tol * np.abs(want).max(),
                    err_msg=f"{build} {name} width {width}",
                )
                got[(build, threads)] = out
            assert np.array_equal(got[("c", 1)], got[("c", 2)]), (name, width)


def test_c_build_reads_a_slice_of_a_larger_csr_and_strided_rows():
    """The direct path passes indptr[lo:hi+1] of the whole CSR (its offsets kept) and whole tables:
    rows [lo, hi) equal the full product's; rows of a wider table (a row stride above the width)
    read right."""
    scaled, _ = _native_c.loops()
    indptr, indices, src_scale, dst_scale, _, h = _operands(np.float64, np.int32, 70)
    full = np.empty((len(indptr) - 1, 70))
    scaled(indptr, indices, src_scale, dst_scale, h, full)
    part = np.empty((100, 70))
    scaled(indptr[50:151], indices, src_scale, dst_scale[50:150], h, part)
    assert np.array_equal(part, full[50:150])
    wide = np.zeros((h.shape[0], 90))
    wide[:, :70] = h
    strided_out = np.zeros((len(indptr) - 1, 80))
    scaled(indptr, indices, src_scale, dst_scale, wide[:, :70], strided_out[:, :70])
    assert np.array_equal(strided_out[:, :70], full) and not strided_out[:, 70:].any()
    with pytest.raises(ValueError, match="int64"):
        scaled(indptr.astype(np.int32), indices, src_scale, dst_scale, h, full)


def test_c_build_is_compiled_once_and_cached_per_cpu(build_dir, monkeypatch):
    import subprocess

    compiles = []
    real_run = subprocess.run

    def counting_run(args, *a, **kw):
        if "-o" in args:
            compiles.append(args)
        return real_run(args, *a, **kw)

    monkeypatch.setattr(_native_c.subprocess, "run", counting_run)
    _, description = _native_c.load()
    assert description.startswith("C (") and len(compiles) == 1
    built = sorted(p.name for p in build_dir.iterdir() if p.suffix == ".so")
    # no partial file left
    assert len(built) == 1 and not [
        p for p in build_dir.iterdir() if p.name.startswith(".spmm-") and p.suffix == ".so"
    ]
    _clear_caches()
    _native_c.load()  # a new process: the cached build is loaded, not compiled again
    assert len(compiles) == 1
    _clear_caches()
    monkeypatch.setattr(_native_c, "_cpu_flags", lambda: "another cpu")
    _native_c.load()  # a host of another CPU sharing the folder builds its own
    assert len(compiles) == 2 and len([p for p in build_dir.iterdir() if p.suffix == ".so"]) == 2
    assert _native.native_backend().startswith("C (") and _native.native_problem() is None


def test_without_a_compiler_numba_serves_unless_c_is_required(build_dir, monkeypatch):
    monkeypatch.setenv("CC", str(build_dir / "no-such-cc"))
    assert _native._c_loops() is None and "does not run" in _native._c_problem()
    assert _native.native_backend().startswith("numba ") and _native.native_problem() is None
    assert _native._compiled()[0] is not _native_c.scaled_spmm  # the numba loops
    _clear_caches()
    monkeypatch.setenv("GNNTRAIN_NATIVE", "c")
    from gnntrain.models.kernels import kernel_problem

    problem = kernel_problem("native", "cpu", torch.float32)
    assert "GNNTRAIN_NATIVE=c" in problem and "does not run" in problem
    _clear_caches()
    monkeypatch.setenv("GNNTRAIN_NATIVE", "numba")
    monkeypatch.delenv("CC")
    assert (
        _native.native_backend().startswith("numba ")
        and "GNNTRAIN_NATIVE=numba" in _native._c_problem()
    )


def test_a_failing_compile_is_one_reason_and_leaves_no_files(build_dir, monkeypatch):
    fake = build_dir.parent / "fakecc"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo "fakecc 1.0"; exit 0; fi\n'
        'echo "x.c:1: error: no OpenMP here" >&2\nexit 1\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(fake))
    with pytest.raises(
        _native_c.NativeBuildError,
        match="fakecc could not compile _native_spmm.c and _native_halo.c: .*no OpenMP",
    ):
        _native_c.load()
    assert [p.name for p in build_dir.iterdir() if not p.name.endswith(".lock")] == []
    assert _native.native_backend().startswith("numba ")
    assert os.environ["CC"] == str(fake)


def test_the_plan_names_the_native_build(tmp_path):
    from conftest import compose

    from gnntrain.plan import build_plan

    plan = build_plan(compose(["kernel=native", f"cache_dir={tmp_path}"]))
    assert plan.kernel_note == f"set by kernel=native; native build: {_native.native_backend()}"
    # this machine has a compiler
    assert plan.kernel_note.endswith(")") and "C (" in plan.kernel_note
    plan = build_plan(compose(["kernel=torch", f"cache_dir={tmp_path}"]))
    assert "native build" not in plan.kernel_note


def test_c_dropout_mask_has_the_tensor_formulas_bits(build_dir, monkeypatch):
    """row_hash_keep_mask on the CPU runs the C build's one-pass mask: the same bits as the tensor
    formula (what runs on a GPU, and without a compiler) for any row ids, strided or int32 rows,
    widths 0-300, every cut including both ends; without the C build the formula serves."""
    from gnntrain.models.gnn import row_hash_keep_mask, torch_keep_mask

    gen = torch.Generator().manual_seed(0)
    for trial in range(12):
        n, width = (
            int(torch.randint(0, 700, (1,), generator=gen)),
            int(torch.randint(0, 300, (1,), generator=gen)),
        )
        rows = (
            torch.randint(-(2**62), 2**62, (2 * n,), generator=gen)[::2]
            if trial % 3 == 0
            else torch.randperm(10**6, generator=gen)[:n].to(torch.int32)
        )
        stream = int(torch.randint(0, 2**62, (1,), generator=gen)) * 2 + trial % 2
        for cut in (-(2**31), -(2**31) + 1, -7, 0, 2**30, 2**31 - 1, 2**31):
            assert torch.equal(
                _native_c.keep_mask(rows, width, stream, cut),
                torch_keep_mask(rows, width, stream, cut),
            ), (trial, cut)
    rows = torch.arange(5000)
    calls = []
    monkeypatch.setattr(
        _native_c, "keep_mask", lambda *args: calls.append(args) or torch_keep_mask(*args)
    )
    mask = row_hash_keep_mask(rows, 64, 99, 0.3)
    assert len(calls) == 1 and abs(mask.float().mean().item() - 0.7) < 0.01
    _clear_caches()
    monkeypatch.setenv("GNNTRAIN_NATIVE", "numba")  # no C build: the formula, the same mask
    assert torch.equal(row_hash_keep_mask(rows, 64, 99, 0.3), mask) and len(calls) == 1
