"""The host measurements ``gnntrain calibrate`` makes (gnntrain/launch/calibrate.py): the rate
probes (SpMM, GEMM, elementwise memory bandwidth, activation, gather; host→device copies on CUDA),
run by as many processes at once as a busy node has ranks (:func:`rates_under_load`), and the 2-rank
probe of the collectives' latency and bandwidth (:func:`probe_collectives`)."""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from gnntrain.errors import PlanError
from gnntrain.launch.forkserver import start_fork_server, start_method

COLLECTIVE_SMALL_BYTES = 64
COLLECTIVE_LARGE_BYTES = 4 * 2**20
PROBE_TIMEOUT_S = 60.0


def _best(step: Callable[[], None], reps: int = 5, device: str = "cpu") -> float:
    """Best-of-``reps`` seconds of ``step`` after one warm-up (on CUDA, each timed to
    completion)."""
    import torch

    def timed():
        step()
        if device == "cuda":
            torch.cuda.synchronize()

    from gnntrain.models.kernel_choice import best_seconds

    return best_seconds(timed, reps)


GEMM_WIDTHS = (8, 32, 128)


def probe_gemm(threads: int, device: str = "cpu") -> List[float]:
    """1e9 multiply-adds per second of (20000 x 256) @ (256 x w) for w in GEMM_WIDTHS, forward and
    both backward products (narrow GEMMs run far below the peak rate)."""
    import torch

    torch.set_num_threads(threads)
    x = torch.randn(20000, 256, device=device)
    rates = []
    for width in GEMM_WIDTHS:
        w = torch.randn(256, width, device=device)
        seconds = _best(lambda w=w: (x @ w, (x @ w) @ w.t(), x.t() @ (x @ w)), device=device)
        rates.append(4 * 20000 * 256 * width / seconds / 1e9)
    return rates


def probe_elementwise(threads: int, device: str = "cpu") -> float:
    """Bytes per second read and written by relu over 4M float32 values."""
    import torch

    torch.set_num_threads(threads)
    x = torch.randn(4 * 2**20, device=device)
    seconds = _best(lambda: torch.relu(x), reps=10, device=device)
    return 2 * x.numel() * 4 / seconds / 1e9


def probe_spmm(threads: int, device: str, cache_dir) -> Dict[str, Any]:
    """SpMM forward+backward with the kernel ``kernel=auto`` picks (degree 8, width 64), timed at
    widths 8 and 128 on 50 000 nodes: t = edges x (per edge + width x per edge·column)."""
    import torch

    from gnntrain.models.kernel_choice import choose_kernel, probe_graph, time_kernel

    nodes, degree = 50_000, 8
    kernel = choose_kernel(
        device, "float32", threads, degree, 64, cache_dir, probe_nodes=nodes
    ).kernel
    src, dst = probe_graph(nodes, degree)
    torch.set_num_threads(threads)
    narrow, wide = 8, 128
    t_narrow, t_wide = (
        min(
            time_kernel(kernel, dst, src, nodes, w, torch.float32, torch.device(device))
            for _ in range(2)
        )
        for w in (narrow, wide)
    )
    edges = nodes * degree
    per_col = max(1e-15, (t_wide - t_narrow) / (wide - narrow)) / edges
    per_edge = max(0.0, t_narrow / edges - narrow * per_col)
    return {"kernel": kernel, "ns": per_col * 1e9, "edge_ns": per_edge * 1e9}


def probe_activation(threads: int, device: str = "cpu") -> float:
    """ns per element of a hidden layer's relu + row-hash dropout (:class:`GlobalDropout`), forward
    and backward, on 100000 x 32 rows."""
    import torch

    from gnntrain.models.gnn import GlobalDropout, hidden_activation

    torch.set_num_threads(threads)
    rows, width = 100_000, 32
    h = torch.randn(rows, width, device=device, requires_grad=True)
    dropout = GlobalDropout(0.5, 0, rows, None)  # its mask is hashed on the host, as in training
    grad = torch.ones(rows, width, device=device)

    def step():
        h.grad = None
        hidden_activation(h, 1, dropout).backward(grad)

    return _best(step, reps=10, device=device) / (rows * width) * 1e9


def probe_gather(threads: int, device: str = "cpu") -> float:
    """ns per element of picking 100000 random rows of width 64 by index (index_select) and adding
    them back (index_add_): what packing a halo or loading a chunk's neighbours costs."""
    import torch

    torch.set_num_threads(threads)
    rows, width = 100_000, 64
    h = torch.randn(rows, width, device=device)
    index = torch.randint(0, rows, (rows,), generator=torch.Generator().manual_seed(0)).to(device)
    out = torch.zeros(rows, width, device=device)
    seconds = _best(
        lambda: out.index_add_(0, index, h.index_select(0, index)), reps=10, device=device
    )
    return seconds / (2 * rows * width) * 1e9


def probe_h2d() -> float:
    """Host→device GB/s of a pinned 256 MiB copy."""
    import torch

    host = torch.empty(64 * 2**20, dtype=torch.float32).pin_memory()
    dev = torch.empty_like(host, device="cuda")

    def copy():
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()

    return host.numel() * 4 / _best(copy, reps=3) / 1e9


def micro_probes(threads: int, device: str, cache_dir) -> Dict[str, Any]:
    """Every rate probe at ``threads`` intra-op threads."""
    return {
        "spmm": probe_spmm(threads, device, cache_dir),
        "gemm": probe_gemm(threads, device),
        "elementwise": probe_elementwise(threads, device),
        "activation": probe_activation(threads, device),
        "gather": probe_gather(threads, device),
    }


def _probe_rank(rank: int, threads: int, device: str, cache_dir, out_dir: str) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    Path(out_dir, f"rates-{rank}.json").write_text(
        json.dumps(micro_probes(threads, device, cache_dir))
    )


def rates_under_load(
    threads: int, ranks: int, device: str, cache_dir, scratch: Path
) -> Dict[str, Any]:
    """The rate probes as a rank of a ``ranks``-rank node sees them: that many processes at
    ``threads`` threads run them at once (cores, caches and memory bandwidth are shared in training
    too; an SMT sibling's busy core slows the other), averaged; in this process when ``ranks`` is
    1."""
    import torch.multiprocessing as mp

    from gnntrain.models.kernel_choice import choose_kernel

    if ranks <= 1:
        return micro_probes(threads, device, cache_dir)
    # cached for the ranks
    choose_kernel(device, "float32", threads, 8, 64, cache_dir, probe_nodes=50_000)
    out_dir = scratch / f"rates-{threads}x{ranks}"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        start_fork_server(str(threads))
        mp.start_processes(
            _probe_rank,
            args=(threads, device, cache_dir, str(out_dir)),
            nprocs=ranks,
            start_method=start_method(),
        )
    except Exception as exc:
        raise PlanError(
            "calibrate",
            f"the rate probes could not run in {ranks} processes ({str(exc).strip()[:300]}).",
            "check that this host can start Python processes (ulimits, "
            "memory), then calibrate again",
        ) from None
    results = [json.loads((out_dir / f"rates-{r}.json").read_text()) for r in range(ranks)]
    mean = statistics.fmean
    return {
        "spmm": {
            "kernel": results[0]["spmm"]["kernel"],
            "ns": mean(r["spmm"]["ns"] for r in results),
            "edge_ns": mean(r["spmm"]["edge_ns"] for r in results),
        },
        "gemm": [mean(r["gemm"][i] for r in results) for i in range(len(GEMM_WIDTHS))],
        **{k: mean(r[k] for r in results) for k in ("elementwise", "activation", "gather")},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collective_rank(rank: int, port: int, backend: str, out_path: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(
        backend, rank=rank, world_size=2, timeout=timedelta(seconds=PROBE_TIMEOUT_S)
    )
    device = torch.device(f"cuda:{rank}" if backend == "nccl" else "cpu")
    results = {}
    for kind in ("alltoall", "allreduce", "allgather"):
        times = {}
        for nbytes in (COLLECTIVE_SMALL_BYTES, COLLECTIVE_LARGE_BYTES):
            t = torch.ones(nbytes // 4, device=device)
            out = torch.empty(2 * t.numel(), device=device)

            def call(kind=kind, t=t, out=out):
                if kind == "alltoall":
                    dist.all_to_all_single(out[: t.numel()], t)
                elif kind == "allreduce":
                    dist.all_reduce(t)
                else:
                    dist.all_gather_into_tensor(out, t)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)

            dist.barrier()
            times[nbytes] = min(_best(call, reps=10) for _ in range(3))
        # bandwidth in the cost models' unit: bytes a rank sends to its peers (all_to_all sends half
        # its buffer to the other rank, all_gather all of it) and, for all_reduce, the buffer's
        # bytes
        sent = 0.5 if kind == "alltoall" else 1.0
        latency = times[COLLECTIVE_SMALL_BYTES]
        slope = max(1e-12, times[COLLECTIVE_LARGE_BYTES] - latency)
        results[kind] = {
            "latency_us": latency * 1e6,
            "gbps": sent * (COLLECTIVE_LARGE_BYTES - COLLECTIVE_SMALL_BYTES) / slope / 1e9,
        }
    if rank == 0:
        Path(out_path).write_text(json.dumps(results))
    dist.destroy_process_group()


def probe_collectives(backend: str, scratch: Path) -> Dict[str, Dict[str, float]]:
    """The 2-rank probe, in two processes; a PlanError naming the fix when it cannot run."""
    import torch.multiprocessing as mp

    out_path = scratch / "collectives.json"
    out_path.unlink(missing_ok=True)
    try:
        start_fork_server("1")
        ctx = mp.start_processes(
            _collective_rank,
            args=(_free_port(), backend, str(out_path)),
            nprocs=2,
            join=False,
            start_method=start_method(),
        )
        deadline = time.monotonic() + 2 * PROBE_TIMEOUT_S
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                raise TimeoutError(f"no answer in {2 * PROBE_TIMEOUT_S:.0f} s")
        return json.loads(out_path.read_text())
    except Exception as exc:  # a failed or hung rank, a refused port, a missing backend
        raise PlanError(
            "calibrate",
            f"the 2-rank {backend} collective probe could not run ({str(exc).strip()[:300]}).",
            "check that two local processes can open TCP ports on 127.0.0.1 (a firewall, or a "
            "sandbox without loopback networking), or calibrate on a host where they can",
        ) from None
