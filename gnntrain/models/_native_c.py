"""The native kernel's C loops (``_native_spmm.c``): compiled at first use with the system's C
compiler, cached per (sources, compiler, CPU), and called through ctypes with the numba loops'
signatures; the same library holds the one-pass dropout keep mask (:func:`keep_mask`) and SuperGCN's
halo operators (``_native_halo.c``, called through :mod:`._native_halo`).

Where no compiler is found, the compile fails or ``GNNTRAIN_NATIVE=numba`` is set, :mod:`._native`
runs the numba loops instead (the same sums over each row's edges in CSR order; numba adds four
edges per step in pairs, so the two builds differ by rounding, each deterministic at any thread
count). The shared object is built with ``-march=native``, so its cache key holds the CPU's feature
flags: a home directory shared by hosts of different CPUs keeps one build per kind. Ranks that start
together build it once (a file lock), and a build is renamed into place whole, so no process loads a
half-written file; its BLAKE2b is written beside it, and a build that no longer matches (a flipped
bit in machine code could compute wrong sums) is compiled again with a warning, never loaded.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Optional, Tuple

import numpy as np
import torch

from gnntrain.artifact import file_digest

SOURCE = Path(__file__).with_name("_native_spmm.c")
SOURCES = (SOURCE, Path(__file__).with_name("_native_halo.c"))  # compiled into one library
# no contraction into fused multiply-adds (clang's default contracts): every product and sum is
# rounded on its own, as torch's formulas round them, so the halo operators give torch's bits
FLAGS = ("-O3", "-march=native", "-fopenmp", "-std=c11", "-ffp-contract=off", "-shared", "-fPIC")
COMPILE_TIMEOUT_S = 300
_ARGTYPES = (
    [ctypes.c_void_p] * 5
    + [ctypes.c_int64, ctypes.c_void_p]
    + [ctypes.c_int64] * 3
    + [ctypes.c_int]
)
_VALUE_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_INDEX_TYPES = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}


class NativeBuildError(RuntimeError):
    """The C loops cannot be built or loaded here (the reason is the message)."""


def compiler() -> Optional[str]:
    """``$CC``, else the first of cc, gcc and clang on the PATH."""
    return os.environ.get("CC") or next(
        (p for p in map(shutil.which, ("cc", "gcc", "clang")) if p), None
    )


def cache_dir() -> Path:
    """``$GNNTRAIN_NATIVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gnntrain/native`` (``~/.cache`` by
    default)."""
    if os.environ.get("GNNTRAIN_NATIVE_CACHE_DIR"):
        return Path(os.environ["GNNTRAIN_NATIVE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gnntrain" / "native"


def _cpu_flags() -> str:
    """The CPU's feature flags (what -march=native compiles for)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler_version(cc: str) -> str:
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeBuildError(f"the C compiler {cc} does not run ({exc})") from None
    lines = (done.stdout or done.stderr).strip().splitlines()
    if done.returncode != 0 or not lines:
        raise NativeBuildError(
            f"the C compiler {cc} does not run ({cc} --version exited {done.returncode})"
        )
    return lines[0]


def _build(cc: str, version: str) -> Path:
    """The shared object for this source, compiler and CPU, compiled once per host and cached."""
    from gnntrain.atomic import atomic_write_bytes, file_lock

    source = b"\0".join(path.read_bytes() for path in SOURCES)
    names = " and ".join(path.name for path in SOURCES)
    key = hashlib.sha256(
        b"\0".join([source, version.encode(), " ".join(FLAGS).encode(), _cpu_flags().encode()])
    ).hexdigest()[:16]
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-")
        probe.close()
    except OSError:  # a read-only home: this process builds its own copy
        folder = Path(tempfile.mkdtemp(prefix="gnntrain-native-"))
    target = folder / f"spmm-{key}.so"
    if _damage(target) is None:
        return target
    with file_lock(folder / f".spmm-{key}.lock"):
        damage = _damage(target)
        if damage is None:  # another rank built it while this one waited
            return target
        if damage:  # a flipped bit in machine code could compute wrong sums: never loaded
            warnings.warn(
                f"native kernel cache {target} {damage}; compiling it again", stacklevel=3
            )
        fd, partial = tempfile.mkstemp(dir=folder, prefix=f".spmm-{key}.", suffix=".so")
        os.close(fd)
        try:
            done = subprocess.run(
                [cc, *FLAGS, "-o", partial, *map(str, SOURCES), "-lm"],
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT_S,
            )
            if done.returncode != 0:
                first = next(
                    (line for line in done.stderr.splitlines() if "error" in line),
                    done.stderr.strip().splitlines()[0] if done.stderr.strip() else "no message",
                )
                raise NativeBuildError(
                    f"{Path(cc).name} could not compile {names}: {first.strip()}"
                )
            atomic_write_bytes(_sidecar(target), file_digest(Path(partial)).encode())
            os.replace(partial, target)
        except subprocess.TimeoutExpired:
            raise NativeBuildError(
                f"{Path(cc).name} took over {COMPILE_TIMEOUT_S} s on {names}"
            ) from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return target


def _sidecar(library: Path) -> Path:
    return library.with_name(library.name + ".blake2b")


def _damage(library: Path) -> Optional[str]:
    """None where the cached ``library`` matches the BLAKE2b written beside it at its build; ""
    where there is none; else what is wrong with it."""
    if not library.exists():
        return ""
    try:
        expected = _sidecar(library).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return "has no checksum beside it"
    return None if file_digest(library) == expected else "does not match its checksum"


@functools.lru_cache(maxsize=None)
def load() -> Tuple[ctypes.CDLL, str]:
    """(the loaded library, "C (<compiler's version line>)"); raises :class:`NativeBuildError`."""
    if os.environ.get("GNNTRAIN_NATIVE", "auto") == "numba":
        raise NativeBuildError("GNNTRAIN_NATIVE=numba asks for the numba loops")
    cc = compiler()
    if cc is None:
        raise NativeBuildError("no C compiler found (cc, gcc or clang on the PATH, or $CC)")
    version = _compiler_version(cc)
    path = _build(cc, version)
    try:
        library = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeBuildError(f"the compiled kernel {path} does not load ({exc})") from None
    for kind in ("scaled", "weighted"):
        for value in _VALUE_TYPES.values():
            for index in _INDEX_TYPES.values():
                fn = getattr(library, f"gnntrain_{kind}_{value}_{index}")
                fn.argtypes, fn.restype = _ARGTYPES, None
    library.gnntrain_keep_mask.argtypes = (
        [ctypes.c_void_p] + [ctypes.c_int64] * 4 + [ctypes.c_void_p, ctypes.c_int]
    )
    library.gnntrain_keep_mask.restype = ctypes.c_int
    return library, f"C ({version})"


def _row_stride(a: np.ndarray) -> int:
    """The row stride in elements of an array that ``_rows_apart`` accepted (one row: its width)."""
    return a.strides[0] // a.itemsize if a.shape[0] > 1 else a.shape[1]


def _rows_apart(a: np.ndarray) -> bool:
    """Whether ``a``'s rows are contiguous and do not overlap (else the kernel reads a contiguous
    copy)."""
    return (
        a.ndim == 2
        and (a.shape[1] <= 1 or a.strides[1] == a.itemsize)
        and (
            a.shape[0] <= 1
            or (a.strides[0] >= a.itemsize * a.shape[1] and a.strides[0] % a.itemsize == 0)
        )
    )


def _call(
    kind: str,
    indptr: np.ndarray,
    indices: np.ndarray,
    scale: np.ndarray,
    dst_scale: np.ndarray,
    h: np.ndarray,
    out: np.ndarray,
) -> None:
    library, _ = load()
    value, index = _VALUE_TYPES.get(h.dtype), _INDEX_TYPES.get(indices.dtype)
    rows, width = out.shape
    if value is None or index is None or out.dtype != h.dtype or h.shape[1] != width:
        raise ValueError(
            f"native SpMM: unsupported operands ({h.dtype} rows, {indices.dtype} indices, "
            f"{out.dtype} output of width {width})"
        )
    if indptr.dtype != np.int64 or indptr.shape[0] != rows + 1:
        raise ValueError("native SpMM: indptr must be int64 with one entry per output row plus one")
    h = h if _rows_apart(h) else np.ascontiguousarray(h)
    target = out if _rows_apart(out) else np.empty_like(out, order="C")
    operands = [np.ascontiguousarray(a) for a in (indptr, indices, scale, dst_scale)]
    if operands[2].dtype != h.dtype or operands[3].dtype != h.dtype:
        raise ValueError("native SpMM: the scales (or edge values) must have the rows' dtype")
    getattr(library, f"gnntrain_{kind}_{value}_{index}")(
        *(a.ctypes.data for a in operands),
        h.ctypes.data,
        _row_stride(h),
        target.ctypes.data,
        _row_stride(target),
        rows,
        width,
        max(1, torch.get_num_threads()),
    )
    if target is not out:  # a column view or other odd layout: computed contiguous, copied back
        out[...] = target


def scaled_spmm(indptr, indices, src_scale, dst_scale, h, out) -> None:
    """out[v] = dst_scale[v] · Σ_{e ∈ row v} src_scale[indices[e]] · h[indices[e]] (numba's
    signature)."""
    _call("scaled", indptr, indices, src_scale, dst_scale, h, out)


def weighted_spmm(indptr, indices, values, h, out) -> None:
    """out[v] = Σ_{e ∈ row v} values[e] · h[indices[e]] (numba's signature)."""
    _call("weighted", indptr, indices, values, np.ones(out.shape[0], dtype=out.dtype), h, out)


def loops() -> Tuple[Callable, Callable]:
    """(scaled, weighted), built and loaded on the first call."""
    load()
    return scaled_spmm, weighted_spmm


def keep_mask(rows: torch.Tensor, width: int, stream: int, threshold: int) -> torch.Tensor:
    """The boolean keep mask (len(rows) × width) of :func:`gnntrain.models.gnn.row_hash_keep_mask`,
    the same bits in one threaded pass; ``threshold`` is its signed 32-bit cut."""
    library, _ = load()
    rows = rows.to(torch.int64).contiguous()
    out = torch.empty((rows.shape[0], width), dtype=torch.bool)
    if rows.shape[0] and width:
        status = library.gnntrain_keep_mask(
            rows.data_ptr(),
            rows.shape[0],
            width,
            stream,
            threshold,
            out.data_ptr(),
            max(1, torch.get_num_threads()),
        )
        if status != 0:
            raise MemoryError(f"native dropout mask: no memory for {width} column keys")
    return out
