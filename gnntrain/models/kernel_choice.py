"""``kernel=auto``: which sparse kernel runs fastest here, measured and cached per host.

:func:`choose_kernel` times every kernel of :mod:`gnntrain.models.kernels` that supports the
run's device and dtype (forward and backward SpMM, :func:`time_kernel`) on a random graph of the
run's average degree (:func:`probe_graph`), feature width and thread count, within a fixed memory
budget, and keeps the answer (:class:`KernelChoice`) in ``cache_dir/kernels.json``.
"""

from __future__ import annotations

import platform
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import torch

from gnntrain.artifact import ArtifactError, read_sealed_json, sealed_json
from gnntrain.atomic import atomic_write_bytes
from gnntrain.backends import dgl_available
from gnntrain.models.kernels import KERNELS, SparseAdjacency, kernel_problem


@dataclass(frozen=True)
class KernelChoice:
    kernel: str
    seconds: Dict[str, float]  # measured forward+backward SpMM time per candidate
    probe: str  # what was timed

    def describe(self) -> str:
        times = ", ".join(
            f"{k} {v * 1e3:.1f} ms" for k, v in sorted(self.seconds.items(), key=lambda kv: kv[1])
        )
        return f"kernel=auto measured {times} ({self.probe})"


def probe_graph(
    num_nodes: int, avg_degree: float, seed: int = 0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) of a uniform random graph with ``avg_degree`` edges per node: what the kernel and
    calibration probes time SpMM on."""
    gen = torch.Generator().manual_seed(seed)
    num_edges = max(1, int(num_nodes * avg_degree))
    return (
        torch.randint(0, num_nodes, (num_edges,), generator=gen),
        torch.randint(0, num_nodes, (num_edges,), generator=gen),
    )


def time_kernel(
    kernel: str,
    dst: torch.Tensor,
    src: torch.Tensor,
    num_nodes: int,
    width: int,
    dtype: torch.dtype,
    device: torch.device,
    reps: int = 3,
) -> float:
    """Best-of-``reps`` seconds of one unweighted SpMM forward and backward (after one warm-up)."""
    adj = SparseAdjacency(
        dst,
        src,
        torch.ones(dst.numel(), 2, dtype=torch.float64),
        num_nodes,
        num_nodes,
        kernel=kernel,
        device=device,
    )
    h = torch.randn(num_nodes, width, dtype=dtype, device=device, requires_grad=True)
    grad = torch.ones(num_nodes, width, dtype=dtype, device=device)

    def step():
        h.grad = None
        adj.spmm(h).backward(grad)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return best_seconds(step, reps)


def best_seconds(step: Callable[[], object], reps: int) -> float:
    """Best-of-``reps`` wall seconds of ``step`` after one warm-up call."""
    step()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return best


def _cache_key(device: str, dtype: str, threads: int, degree_bucket: int, width: int) -> str:
    dgl_version = "none"
    if dgl_available():
        import dgl

        dgl_version = dgl.__version__
    from gnntrain.models._native import native_version

    name = (
        torch.cuda.get_device_name()
        if device == "cuda"
        else platform.processor() or platform.machine()
    )
    return "|".join(
        [
            f"probe {PROBE_ROUNDS} rounds",
            f"torch {torch.__version__}",
            f"dgl {dgl_version}",
            f"native {native_version()}",
            device,
            name,
            dtype,
            f"threads {threads}",
            f"degree~{degree_bucket}",
            f"width {width}",
        ]
    )


def _read_cache(cache_file: Path, warn: bool = True) -> Dict[str, dict]:
    """kernels.json as a dict; missing reads as empty, corrupt (does not parse or match its
    checksum) as empty with a warning (unless ``warn`` is off): re-measured and rewritten."""
    try:
        return read_sealed_json(cache_file)
    except OSError:
        return {}
    except ArtifactError as exc:
        if not warn:
            return {}
        warnings.warn(
            f"kernel cache {cache_file} is corrupt ({exc.why}); re-measuring the kernels and "
            "rewriting it",
            stacklevel=2,
        )
        return {}


# the probe graph and its features: a wide or dense run shrinks the probe
PROBE_BUDGET_BYTES = 256 * 2**20
PROBE_BYTES_PER_EDGE = 64  # src, dst, two float64 scales, and each kernel's CSR and transpose
PROBE_MAX_EDGES = 2**20  # and never more than a second or so of SpMM per kernel
PROBE_MAX_DEGREE = 1024  # rows denser than this time alike: one probe shape for all of them
PROBE_ROUNDS = 2  # each kernel timed once per round, the order reversed in the second


def choose_kernel(
    device: str,
    dtype: str,
    threads: int,
    avg_degree: float,
    width: int,
    cache_dir: Optional[Path] = None,
    probe_nodes: int = 50_000,
) -> KernelChoice:
    """Time every kernel that supports (device, dtype) on a random graph of ``probe_nodes`` nodes
    with the run's average degree and width, at ``threads`` intra-op threads; the fastest wins.

    Results are cached in ``cache_dir/kernels.json`` per (torch, DGL, device, dtype, threads,
    degree rounded to a power of two, width), so a host measures each shape once."""
    degree_bucket = min(PROBE_MAX_DEGREE, 1 << max(0, round(max(avg_degree, 1.0)).bit_length() - 1))
    width = max(1, int(width))
    key = _cache_key(device, dtype, threads, degree_bucket, width)
    cache_file = Path(cache_dir) / "kernels.json" if cache_dir is not None else None
    if cache_file is not None:
        cached = _read_cache(cache_file)
        if key in cached:
            entry = cached[key]
            return KernelChoice(entry["kernel"], dict(entry["seconds"]), entry["probe"])
    torch_dtype = getattr(torch, dtype)
    candidates = [k for k in KERNELS if kernel_problem(k, device, torch_dtype) is None]
    if not candidates:
        raise ValueError(f"no sparse kernel supports {dtype} on {device}")
    # x, out and their grads
    per_node = degree_bucket * PROBE_BYTES_PER_EDGE + width * torch_dtype.itemsize * 4
    probe_nodes = max(
        16,
        min(
            probe_nodes,
            PROBE_BUDGET_BYTES // per_node,  # never more than the budget
            PROBE_MAX_EDGES // degree_bucket,
        ),
    )
    src, dst = probe_graph(probe_nodes, float(degree_bucket))
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        # rounds in alternating order, the best of each kernel's: a fresh process runs its first
        # SpMMs up to 3x slower (its pages are new), so one pass in a fixed order favoured whichever
        # ran last
        seconds: Dict[str, float] = {}
        for round_ in range(PROBE_ROUNDS):
            for k in candidates if round_ % 2 == 0 else candidates[::-1]:
                t = time_kernel(
                    k, dst, src, probe_nodes, width, torch_dtype, torch.device(device), reps=2
                )
                seconds[k] = min(seconds.get(k, t), t)
    finally:
        torch.set_num_threads(previous)
    probe = (
        f"SpMM fwd+bwd, {probe_nodes} nodes, degree {degree_bucket}, width {width}, "
        f"{threads} thread(s)"
    )
    choice = KernelChoice(min(seconds, key=seconds.get), seconds, probe)
    if cache_file is not None:
        # again: another rank may have added a shape meanwhile (a corrupt one was said above)
        fresh = _read_cache(cache_file, warn=False)
        fresh[key] = {"kernel": choice.kernel, "seconds": choice.seconds, "probe": probe}
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(cache_file, sealed_json(fresh))
        except OSError:
            pass  # a read-only or full cache only costs the next plan another measurement
    return choice
