"""``gnntrain calibrate``: measure this host's costs and write a hardware profile the cost models
use.

The probes (docs/design.md#cost-models), each at every intra-op thread count a plan on the profile
can give a rank (cores / ranks, for 1..ranks_per_node ranks), run by that many processes at once so
that
each sees the host as a rank of a busy node does:

* SpMM forward+backward per edge and per edge x column (widths 8 and 128), with ``kernel=auto``'s
kernel;
* GEMM multiply-adds per second;
* elementwise bytes per second (host memory bandwidth as torch's kernels see it), a hidden layer's
  relu + dropout per element, and rows picked and added back by index per element;
* the fixed costs the rates do not explain, fitted on real training runs of a 2000-node graph: per
layer
  and per optimizer step (mode=single, 1 and 3 layers, at each thread count) and per collective call
  (mode=partition on 2 ranks);
* per mode, the factor between measured and modelled compute that grows with the graph, on a 40
000-node
  graph (``mode_factor``);
* host→device bandwidth where the profile's device is CUDA;
* one 2-rank probe of all_to_all_single, all_reduce and all_gather on the profile's backend (latency
from
  64-byte calls, bandwidth from 4 MiB ones); probe processes fork from the ranks' preloaded server.

The profile is the composed one with ``cost`` filled in,
``host_mem_gbps``/``core_gmacs``/``h2d_gbps``
replaced by the measurements, written as ``<user config dir>/hardware/<name>.yaml`` (the user config
dir is ``$GNNTRAIN_USER_CONFIG_DIR``, else ``~/.config/gnntrain``; ``gnntrain`` adds it to Hydra's
search
path, so ``hardware=<name>`` composes it).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from omegaconf import OmegaConf

from gnntrain.config.schema import option_value
from gnntrain.errors import PlanError
from gnntrain.launch.forkserver import start_fork_server, start_method
from gnntrain.sizing import host_cores

COLLECTIVE_SMALL_BYTES = 64
COLLECTIVE_LARGE_BYTES = 4 * 2**20
PROBE_TIMEOUT_S = 60.0


def user_config_dir() -> Path:
    return Path(os.environ.get("GNNTRAIN_USER_CONFIG_DIR") or Path.home() / ".config" / "gnntrain")


def _best(step: Callable[[], None], reps: int = 5, device: str = "cpu") -> float:
    """Best-of-``reps`` seconds of ``step`` after one warm-up (on CUDA, each timed to
    completion)."""
    import torch

    def timed():
        step()
        if device == "cuda":
            torch.cuda.synchronize()

    from gnntrain.models.kernels import best_seconds

    return best_seconds(timed, reps)


GEMM_WIDTHS = (8, 32, 128)


def probe_gemm(threads: int, device: str = "cpu") -> List[float]:
    """1e9 multiply-adds per second of (20000 x 256) @ (256 x w) for w in GEMM_WIDTHS, forward and
    both
    backward products (narrow GEMMs run far below the peak rate)."""
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
    widths 8 and
    128 on 50 000 nodes: t = edges x (per edge + width x per edge·column)."""
    import torch

    from gnntrain.models.kernels import choose_kernel, probe_graph, time_kernel

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
    and backward,
    on 100000 x 32 rows."""
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


PROBE_GRAPH = {
    "name": "csbm",
    "source": "generated",
    "num_nodes": 2000,
    "avg_degree": 8.0,
    "feat_dim": 32,
    "num_classes": 4,
    "train_fraction": 0.3,
}
PROBE_EPOCHS = 25


@contextlib.contextmanager
def _quiet_stdout():
    """The probe runs' summary tables (and their spawned ranks') go to /dev/null, not the
    console."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def probe_gather(threads: int, device: str = "cpu") -> float:
    """ns per element of picking 100000 random rows of width 64 by index (index_select) and adding
    them back
    (index_add_): what packing a halo or loading a chunk's neighbours costs."""
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


def _probe_config(cfg, mode: str, layers: int, cores: int, ranks: int, cost: Dict[str, Any]):
    """A tiny run of ``mode`` on this profile (``cores`` per node, ``ranks`` per node, ``cost`` as
    measured
    so far) for the training probes."""
    from gnntrain.config.schema import ModelConfig
    from gnntrain.data.generators import get_generator
    from gnntrain.modes import MODE_REGISTRY

    probe = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    probe.dataset = OmegaConf.merge(OmegaConf.structured(get_generator("csbm").config), PROBE_GRAPH)
    probe.model = OmegaConf.merge(
        OmegaConf.structured(ModelConfig), {"name": "gcn", "layers": layers, "hidden": 16}
    )
    probe.mode = OmegaConf.merge(OmegaConf.structured(MODE_REGISTRY[mode].options), {"name": mode})
    probe.hardware.cores_per_node, probe.hardware.ranks_per_node, probe.hardware.nodes = (
        cores,
        ranks,
        1,
    )
    probe.hardware.cost = cost
    probe.train.update(
        epochs=PROBE_EPOCHS,
        progress=False,
        eval_every=PROBE_EPOCHS,
        checkpoint_every=0,
        dtype="float32",
    )
    probe.kernel, probe.resume, probe.port = "auto", None, 0
    return probe


def _train_probe(cfg, scratch: Path, name: str) -> Tuple[float, Dict[str, Any]]:
    """(median epoch seconds after the first, the plan's prediction) of one probe run."""
    from gnntrain.launch.launcher import run_training
    from gnntrain.plan import build_plan

    plan = build_plan(cfg)
    with _quiet_stdout():
        summary = run_training(plan, scratch / name)
    return statistics.median(summary["epoch_time_s"][1:]), plan.prediction


MODE_PROBE_GRAPH = {
    "name": "csbm",
    "source": "generated",
    "num_nodes": 40000,
    "avg_degree": 10.0,
    "feat_dim": 64,
    "num_classes": 8,
    "train_fraction": 0.3,
}
MODE_PROBE_EPOCHS = 10


def _probe_ranks(cfg) -> int:
    """Ranks a training probe may use: 2, or on a CUDA profile the GPUs there are (each rank owns
    one)."""
    import torch

    return min(2, torch.cuda.device_count()) if option_value(cfg.hardware.device) == "cuda" else 2


# calibrate --quick: a rougher factor per mode
QUICK_MODE_PROBE = {
    "num_nodes": 6000,
    "epochs": 3,
    "reps": 1,
}


def fit_mode_factors(
    cfg, scratch: Path, cost: Dict[str, Any], say: Callable[[str], None], quick: bool = False
) -> None:
    """``cost["mode_factor"]``: every mode, with the first options ``mode=auto`` tries, trains a 40
    000-node
    graph (hidden width 64) twice, on one rank where it runs on one, else on two; the factor is the
    median of
    (measured - fixed costs) / the modelled compute that grows with the graph. At this size the
    fixed costs
    are under a tenth of an epoch, so their own noise hardly moves the factor."""
    import copy

    from gnntrain.modes import MODE_REGISTRY

    fitted = dict(copy.deepcopy(cost), calibrated="probe", mode_factor={})
    factors: Dict[str, float] = {}
    for name in sorted(MODE_REGISTRY):
        can = MODE_REGISTRY[name].capabilities
        ranks = max(1, min(_probe_ranks(cfg), int(can.min_world_size)))
        probe = _probe_config(cfg, name, 2, host_cores(cfg.hardware), ranks, fitted)
        probe.dataset = OmegaConf.merge(
            probe.dataset,
            MODE_PROBE_GRAPH,
            {"num_nodes": QUICK_MODE_PROBE["num_nodes"]} if quick else {},
        )
        probe.model.hidden = 64
        probe.train.epochs = probe.train.eval_every = (
            QUICK_MODE_PROBE["epochs"] if quick else MODE_PROBE_EPOCHS
        )
        probe.mode = OmegaConf.merge(probe.mode, dict(can.auto_variants[0]))
        ratios = []
        for rep in range(QUICK_MODE_PROBE["reps"] if quick else 2):
            measured, predicted = _train_probe(probe, scratch, f"mode-{name}-{rep}")
            fixed = predicted["epoch_s"] - predicted["scaling_compute_s"]
            ratios.append((measured - fixed) / max(1e-9, predicted["scaling_compute_s"]))
        factors[name] = round(min(4.0, max(0.25, statistics.median(ratios))), 3)
    cost["mode_factor"] = factors
    shown = (
        f"{QUICK_MODE_PROBE['num_nodes'] if quick else MODE_PROBE_GRAPH['num_nodes']:,}".replace(
            ",", " "
        )
    )
    say(
        f"measured / modelled compute per mode ({shown}-node probe{', quick' if quick else ''}): "
        + ", ".join(f"{k} {v:.2f}" for k, v in factors.items())
    )


def _least_squares(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """(slope, intercept) of the least-squares line through ``points``."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / max(1e-12, sum((x - mx) ** 2 for x in xs))
    return slope, my - slope * mx


def fit_overheads(cfg, scratch: Path, cost: Dict[str, Any], say: Callable[[str], None]) -> None:
    """Fill ``cost``'s fixed costs from real runs on a 2000-node graph, where they dominate: per
    thread count,
    mode=single with 1 and 3 layers gives the cost per layer and per step (what the measured rates
    do not
    explain: the least-squares line through 1-3 layers, twice); then mode=partition on 2 ranks
    (three times,
    the median) gives the cost per collective call beyond latency and bytes."""
    import copy

    zero = copy.deepcopy(cost)
    zero.update(
        op_overhead_us=[0.0] * len(cost["threads"]),
        epoch_overhead_us=[0.0] * len(cost["threads"]),
        collective_overhead_us=0.0,
        calibrated="probe",
    )
    for i, threads in enumerate(cost["threads"]):
        # (layers, measured - predicted without fixed costs), layers 1-3 twice, interleaved
        points = []
        for rep in range(2):
            for layers in (1, 2, 3):
                measured, predicted = _train_probe(
                    _probe_config(cfg, "single", layers, threads, 1, zero),
                    scratch,
                    f"single-{threads}-{layers}-{rep}",
                )
                points.append((layers, measured - predicted["epoch_s"]))
        slope, intercept = _least_squares(points)
        cost["op_overhead_us"][i] = round(max(0.0, slope) * 1e6, 2)
        cost["epoch_overhead_us"][i] = round(max(0.0, intercept) * 1e6, 2)
    ranks = 2
    threads = max(1, host_cores(cfg.hardware) // ranks)
    fitted = dict(copy.deepcopy(cost), calibrated="probe", collective_overhead_us=0.0)
    per_call: List[float] = []
    if _probe_ranks(cfg) < 2:
        say(
            "one GPU: no 2-rank training probe, so no cost per collective call beyond the probe's "
            "latency"
        )
    for rep in range(3 if _probe_ranks(cfg) >= 2 else 0):
        measured, predicted = _train_probe(
            _probe_config(cfg, "partition", 2, threads * ranks, ranks, fitted),
            scratch,
            f"partition-2-{rep}",
        )
        per_call.append(
            (measured - predicted["epoch_s"]) / max(1, int(predicted["collective_calls"]))
        )
    cost["collective_overhead_us"] = round(
        max(0.0, statistics.median(per_call) if per_call else 0.0) * 1e6, 2
    )
    say(
        f"fixed costs from training probes: per layer {cost['op_overhead_us']} µs, per step "
        f"{cost['epoch_overhead_us']} µs (by thread count {cost['threads']}), per collective call "
        "in training "
        f"{cost['collective_overhead_us']:.0f} µs"
    )


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
    ``threads`` threads
    run them at once (cores, caches and memory bandwidth are shared in training too; an SMT
    sibling's busy core
    slows the other), averaged; in this process when ``ranks`` is 1."""
    import torch.multiprocessing as mp

    from gnntrain.models.kernels import choose_kernel

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
        # its
        # buffer to the other rank, all_gather all of it) and, for all_reduce, the buffer's bytes
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


def thread_counts(hw) -> List[int]:
    """Every intra-op thread count a rank can get on this profile: cores / r for r =
    1..ranks_per_node."""
    cores = host_cores(hw)
    return sorted({max(1, cores // r) for r in range(1, max(1, int(hw.ranks_per_node)) + 1)})


def calibrate(
    cfg, cache_dir, scratch: Path, say: Callable[[str], None] = print, quick: bool = False
) -> Dict[str, Any]:
    """Run every probe on ``cfg.hardware``; returns the profile's ``cost`` block plus the replaced
    rates.
    ``quick``: the per-mode factors from one short run of a smaller graph each (rougher, several
    times
    faster)."""
    import torch

    hw = cfg.hardware
    device = option_value(hw.device)
    if device == "cuda" and not torch.cuda.is_available():
        raise PlanError(
            "hardware.device",
            f"profile '{hw.name}' is a CUDA profile, but no CUDA device is "
            "available here, so the SpMM, GEMM and host-to-device probes cannot run on it.",
            f"run gnntrain calibrate hardware={hw.name} on the GPU host, or calibrate a CPU "
            "profile here (hardware=local-cpu)",
        )
    backend = "nccl" if device == "cuda" and torch.cuda.device_count() >= 2 else "gloo"
    previous = torch.get_num_threads()
    cost: Dict[str, Any] = {
        k: []
        for k in (
            "threads",
            "kernel",
            "spmm_ns_per_edge",
            "spmm_ns_per_edge_col",
            "gemm_gflops",
            "elementwise_gbps",
            "activation_ns_per_element",
            "gather_ns_per_element",
            "op_overhead_us",
            "epoch_overhead_us",
        )
    }
    cost["gemm_widths"] = list(GEMM_WIDTHS)
    try:
        cores = host_cores(hw)
        for threads in thread_counts(hw):
            # on CUDA each rank owns its GPU: the probes run once, on this process's device
            ranks = 1 if device == "cuda" else max(1, cores // threads)
            rate = rates_under_load(threads, ranks, device, cache_dir, scratch)
            spmm, gemm, elementwise = rate["spmm"], rate["gemm"], rate["elementwise"]
            activation, gather = rate["activation"], rate["gather"]
            for key, value in (
                ("threads", threads),
                ("kernel", spmm["kernel"]),
                ("spmm_ns_per_edge", spmm["edge_ns"]),
                ("spmm_ns_per_edge_col", spmm["ns"]),
                ("gemm_gflops", [round(r, 3) for r in gemm]),
                ("elementwise_gbps", elementwise),
                ("activation_ns_per_element", activation),
                ("gather_ns_per_element", gather),
                ("op_overhead_us", 0.0),
                ("epoch_overhead_us", 0.0),
            ):
                cost[key].append(round(value, 4) if isinstance(value, float) else value)
            rates = ", ".join(f"{r:.1f}" for r in gemm)
            say(
                f"{threads} thread(s): SpMM {spmm['edge_ns']:.2f} ns/edge + {spmm['ns']:.3f} "
                "ns/edge·col "
                f"({spmm['kernel']}), GEMM {rates} GMAC/s at "
                f"widths {', '.join(map(str, GEMM_WIDTHS))}, elementwise {elementwise:.1f} GB/s, "
                "activation "
                f"{activation:.2f} ns/element, gather {gather:.2f} ns/element"
            )
    finally:
        torch.set_num_threads(previous)
    collectives = probe_collectives(backend, scratch)
    for kind, figures in collectives.items():
        cost[f"{kind}_latency_us"] = round(figures["latency_us"], 2)
        cost[f"{kind}_gbps"] = round(figures["gbps"], 4)
        say(
            f"{kind} ({backend}, 2 ranks): latency {figures['latency_us']:.0f} µs, "
            f"{figures['gbps']:.2f} GB/s"
        )
    fit_overheads(cfg, scratch, cost, say)
    fit_mode_factors(cfg, scratch, cost, say, quick=quick)
    rates: Dict[str, Any] = {
        "host_mem_gbps": max(cost["elementwise_gbps"]),
        "core_gmacs": round(cost["gemm_gflops"][0][-1] / cost["threads"][0], 4),
    }
    if device == "cuda":
        rates["h2d_gbps"] = round(probe_h2d(), 3)
        say(f"host→device: {rates['h2d_gbps']:.1f} GB/s")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cost["calibrated"] = f"{platform.node()}, torch {torch.__version__}, {stamp}" + (
        " (quick)" if quick else ""
    )
    return {"cost": cost, **rates}


def write_profile(hw, measured: Dict[str, Any], name: str, directory: Path) -> Path:
    """The composed profile with the measurements, as ``directory/hardware/<name>.yaml``."""
    import yaml
    from omegaconf import OmegaConf

    profile = OmegaConf.to_container(hw, resolve=True, enum_to_str=True)
    profile.update(measured, name=name)
    path = directory / "hardware" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Measured by `gnntrain calibrate hardware={hw.name}` on "
        f"{measured['cost']['calibrated']}.\n"
        "# Compose it with hardware="
        + name
        + "; re-run calibrate after changing the host or torch.\n"
    )
    body = yaml.safe_dump(
        {"defaults": ["hardware_schema"], **profile}, sort_keys=False, default_flow_style=None
    )
    path.write_text(header + body)
    return path
