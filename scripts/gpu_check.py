"""GPU check (issue #21): every mode that fits one GPU, run on CUDA; the exact ones against CPU
``single``;
what HongTu (a device budget below the graph's vertex data) and HyScale (a CPU and a GPU trainer,
DRM)
do on a real device; ``single`` against PyG's ``GCNConv`` on the same device; MoA with CPU
aggregation
beside a GPU update rank; and ``gnntrain calibrate`` on the device.

Writes ``docs/bench/gpu.json``: the device, torch and CUDA versions, one record per check, and a
table
that ``python -m benchmarks --render`` (benchmarks.harness.render) turns into the ``gpu`` section of
docs/BENCHMARKS.md.

    bash scripts/gpu-check.sh [CHECK ...]          # on the GPU machine: installs the carried
    wheels, runs
    python scripts/gpu_check.py --device cpu --quick  # the same flow on a CPU at small sizes (smoke
    test)

Records of checks not run this time are kept from the previous file when it names the same device,
so
the checks can be spread over several calls of a time-limited machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List

from gpu_check_rows import row as _row

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
OUT = ROOT / "docs" / "bench" / "gpu.json"
EXACT = [
    "train.dtype=float64",
    "model.dropout=0",
    "train.epochs=3",
    "train.seed=5",
    "train.eval_every=100",
]
# masks compared
EXACT_DROPOUT = [o for o in EXACT if not o.startswith("model.dropout")] + ["model.dropout=0.5"]
TOLERANCE = 1e-9
RUNS = itertools.count()


class Check:
    """The run's settings: device, sizes, data."""

    def __init__(self, device: str, quick: bool, data_dir: str, tmp: Path):
        self.device, self.quick, self.data_dir, self.tmp = device, quick, data_dir, tmp
        self.hardware = "hardware=gpu-1" if device == "cuda" else "hardware=local-cpu"
        # hongtu_budget's (overrides, budget, budget bytes, single's summary), reused by
        # hongtu_disk_budget
        self.budget_graph = None

    def train(self, overrides: List[str]) -> dict:
        from gnntrain.api import compose
        from gnntrain.launch import run_training
        from gnntrain.plan import build_plan

        cfg = compose(["train.progress=false", f"cache_dir={self.tmp / 'cache'}"] + overrides)
        run_dir = self.tmp / f"run{next(RUNS)}"
        run_dir.mkdir(parents=True)
        with (
            open(run_dir / "console.log", "w") as log,
            contextlib.redirect_stdout(log),
        ):  # the table per run
            return run_training(build_plan(cfg), run_dir)

    def on_device(self, overrides: List[str]) -> dict:
        # on a CPU "device" (the flow's dry run) the device side takes torch's CSR kernel, the CUDA
        # path's
        # kernel, and the reference gnntrain's native CPU kernel, so the comparison still sets two
        # kernels apart
        kernel = ["kernel=torch"] if self.device == "cpu" else []
        return self.train([self.hardware, "hardware.ranks_per_node=1"] + kernel + overrides)

    def on_cpu(self, overrides: List[str]) -> dict:
        return self.train(
            ["hardware=local-cpu", "hardware.ranks_per_node=1", f"kernel={self.reference_kernel}"]
            + overrides
        )

    @property
    def reference_kernel(self) -> str:
        return "native" if self.device == "cpu" else "auto"

    def graphs(self) -> Dict[str, List[str]]:
        out = {"csbm": ["dataset=csbm"]}
        if self.data_dir and (Path(self.data_dir) / "cora_v2_d697a464").is_dir():
            out["cora"] = ["dataset=cora", f"data_dir={self.data_dir}"]
        return out


def _epoch(summary: dict) -> float:
    times = summary["epoch_time_s"]
    return statistics.median(times[1:] if len(times) > 1 else times)


def _rel(a: List[float], b: List[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-300) for x, y in zip(a, b))


def check_single_exact(c: Check) -> List[dict]:
    """single on the device vs single on the CPU, float64, per graph: the largest relative loss
    gap."""
    records = []
    for graph, overrides in c.graphs().items():
        device = c.on_device(overrides + EXACT)
        cpu = c.on_cpu(overrides + EXACT)
        rel = _rel(device["losses"], cpu["losses"])
        records.append(
            {
                "name": f"single_exact_{graph}",
                "mode": "single",
                "graph": graph,
                "status": "ok" if rel <= TOLERANCE else "failed",
                "exact_vs_cpu_rel": rel,
                "epoch_time_s": device["epoch_time_s"],
                "kernel": device.get("kernel"),
                "reference_kernel": cpu.get("kernel"),
            }
        )
    # dropout masks drawn on the device vs on the host
    device, cpu = (
        c.on_device(["dataset=csbm"] + EXACT_DROPOUT),
        c.on_cpu(["dataset=csbm"] + EXACT_DROPOUT),
    )
    rel = _rel(device["losses"], cpu["losses"])
    records.append(
        {
            "name": "single_exact_dropout",
            "mode": "single",
            "graph": "csbm",
            "status": "ok" if rel <= TOLERANCE else "failed",
            "exact_vs_cpu_rel": rel,
            "epoch_time_s": device["epoch_time_s"],
        }
    )
    return records


def check_hongtu_exact(c: Check) -> List[dict]:
    """HongTu m=1 on the device (4 chunks, every dedup path that m=1 has) vs CPU single, float64;
    and with
    dropout 0.5, whose masks the device draws per chunk where the CPU draws them whole (the same
    bits)."""
    records = []
    for name, exact in (("hongtu_exact_csbm", EXACT), ("hongtu_exact_dropout", EXACT_DROPOUT)):
        ref = c.on_cpu(["dataset=csbm", "model=gcn"] + exact)
        run = c.on_device(["dataset=csbm", "model=gcn", "mode=hongtu", "mode.chunks=4"] + exact)
        rel = _rel(run["losses"], ref["losses"])
        records.append(
            {
                "name": name,
                "mode": "hongtu",
                "status": "ok" if rel <= TOLERANCE else "failed",
                "exact_vs_cpu_rel": rel,
                "epoch_time_s": run["epoch_time_s"],
            }
        )
    return records


def _device_peak(run: dict) -> int:
    """The larger of HongTu's working-set ledger and the CUDA allocator's own peak (transients
    included)."""
    peaks = run["peak_memory_bytes"]
    return max(
        int(peaks.get("device_arena_max_rank", 0)), int(peaks.get("device_allocator_max_rank") or 0)
    )


def _disk_tier(run: dict) -> dict:
    """The run's tables on disk and its disk bytes per epoch, measured and predicted (and whether
    they agree)."""
    tiers = run["mode_report"]["tiers"]
    measured, predicted = (
        tiers["measured_disk_bytes_per_epoch"],
        tiers["predicted_disk_bytes_per_epoch"],
    )
    return {
        "tables_on_disk": sorted(k for k, v in tiers["tables"].items() if v == "disk"),
        "measured_disk_bytes_per_epoch": measured,
        "predicted_disk_bytes_per_epoch": predicted,
        "disk_bytes_as_predicted": measured == predicted,
    }


def check_hongtu_disk(c: Check) -> List[dict]:
    """HongTu's disk tier under a CUDA device (mode.host_budget=0: every vertex table memory-mapped
    on disk,
    staged through the host to the device) vs CPU single, float64; measured disk bytes =
    predicted."""
    ref = c.on_cpu(["dataset=csbm", "model=gcn"] + EXACT)
    run = c.on_device(
        [
            "dataset=csbm",
            "model=gcn",
            "mode=hongtu",
            "mode.chunks=4",
            "mode.host_budget=0",
            f"mode.disk_dir={c.tmp / 'disk'}",
        ]
        + EXACT
    )
    rel, disk = _rel(run["losses"], ref["losses"]), _disk_tier(run)
    ok = rel <= TOLERANCE and disk["disk_bytes_as_predicted"] and disk["tables_on_disk"]
    return [
        {
            "name": "hongtu_disk_exact",
            "mode": "hongtu",
            "status": "ok" if ok else "failed",
            "exact_vs_cpu_rel": rel,
            "epoch_time_s": run["epoch_time_s"],
            **disk,
        }
    ]


def check_predict(c: Check) -> List[dict]:
    """gnntrain predict of a run trained on the device: logits predicted on the device equal those
    predicted
    from the same weights on the CPU (float64), under the user's node IDs."""
    import numpy as np
    import pyarrow.parquet as pq

    import gnntrain.api as gt
    from gnntrain.launch.predict import predict

    # gnntrain.api.run: the whole job, plan.yaml and model.pt included
    run_dir = c.tmp / f"run{next(RUNS)}"
    common = [f"cache_dir={c.tmp / 'cache'}", "train.progress=false"]
    with open(c.tmp / "predict-train.log", "w") as log, contextlib.redirect_stdout(log):
        trained = gt.run(
            common
            + [c.hardware, "hardware.ranks_per_node=1", "dataset=csbm", "model=sage"]
            + EXACT,
            run_dir=run_dir,
        )
    if trained.status != "completed":
        raise RuntimeError(
            f"the training run before predict ended {trained.status}: "
            f"{trained.summary.get('error')}"
        )
    values = {}
    for where, hardware in (("device", c.hardware), ("cpu", "hardware=local-cpu")):
        out = c.tmp / f"predict-{where}.parquet"
        with open(c.tmp / f"predict-{where}.log", "w") as log, contextlib.redirect_stdout(log):
            predict(run_dir, "logits", out=out, overrides=common + [hardware])
        table = pq.read_table(out)
        values[where] = (
            table.column(0).to_pylist(),
            np.stack([table.column(k).to_numpy() for k in table.column_names[1:]], axis=1),
        )
    (ids_d, on_device), (ids_c, on_cpu) = values["device"], values["cpu"]
    rel = float(np.max(np.abs(on_device - on_cpu) / np.maximum(np.abs(on_cpu), 1e-12)))
    return [
        {
            "name": "predict",
            "mode": "single",
            "status": "ok" if ids_d == ids_c and rel <= 1e-9 else "failed",
            "rows": len(ids_d),
            "exact_vs_cpu_rel": rel,
        }
    ]


def check_hongtu_budget(c: Check) -> List[dict]:
    """HongTu m=1 with a device budget below the graph's vertex data (paper §4: the host holds it),
    against
    in-memory single on the same device for the same graph (HongTu reports 1.3-3.8x slower)."""
    n, budget = (20000, "8MiB") if c.quick else (500000, "512MiB")
    graph = [
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=20",
        "dataset.feat_dim=128",
        "model=gcn",
        "model.layers=3",
        "model.hidden=128",
        "train.epochs=3",
        "train.eval_every=100",
    ]
    run = c.on_device(graph + ["mode=hongtu", "mode.chunks=0", f"mode.device_memory={budget}"])
    from gnntrain.modes.hongtu import parse_bytes

    cap = parse_bytes(budget)
    # float32 features and the two hidden layers' outputs, gradients left out
    vertex_bytes = n * 3 * 128 * 4
    peak = _device_peak(run)
    single = c.on_device(graph + ["mode=single"])
    ratio = _epoch(run) / _epoch(single)
    c.budget_graph = (graph, budget, cap, single)
    timeline = _timeline(run)
    overlapped = c.device == "cpu" or timeline["copy_share_under_compute"] > 0
    return [
        {
            "name": "hongtu_budget",
            "mode": "hongtu",
            "graph": f"csbm {n} nodes, degree 20, feat 128",
            "status": "ok" if peak <= cap and overlapped else "failed",
            "device_peak_bytes": peak,
            "device_budget_bytes": cap,
            "timeline": timeline,
            "ledger_peak_bytes": run["peak_memory_bytes"].get("device_arena_max_rank"),
            "allocator_peak_bytes": run["peak_memory_bytes"].get("device_allocator_max_rank"),
            "vertex_data_bytes_at_least": vertex_bytes,
            "chunks_per_part": run["partition"]["chunks_per_part"],
            "epoch_time_s": run["epoch_time_s"],
            "single_epoch_time_s": single["epoch_time_s"],
            "slowdown_vs_single": ratio,
        }
    ]


def _timeline(run: dict) -> dict:
    """HongTu's last training epoch on the device's time axis (engine.DeviceTimeline): busy seconds
    of compute,
    host→device and device→host copies, the copy seconds that ran under compute, the wall span, and
    the
    host-side ⊕-add seconds."""
    report = run["mode_report"]
    line = dict(report.get("timeline_s", {}))
    line["host_accumulate_s"] = report.get("host_accumulate_s", 0.0)
    copies = line.get("h2d_s", 0.0) + line.get("d2h_s", 0.0)
    under = line.get("h2d_overlapped_s", 0.0) + line.get("d2h_overlapped_s", 0.0)
    line["copy_share_under_compute"] = under / copies if copies else 0.0
    return line


def check_hongtu_paper(c: Check) -> List[dict]:
    """HongTu in its paper's Table 5 setting: one chunk per partition and no device budget (so the
    only cost
    over in-memory training is streaming each layer's vertex data through the device), against
    in-memory
    single on the same device, with A·x of the inputs recomputed on both sides
    (train.cache_input_aggregation=false: HongTu's gather engine recomputes it; single would
    otherwise keep
    it). Paper: 1.3-3.8x. One rank, so the graph's locality does not enter (every row is needed
    once)."""
    n = 20000 if c.quick else 500000
    graphs = {
        f"csbm{n}": [
            "dataset=csbm",
            f"dataset.num_nodes={n}",
            "dataset.avg_degree=20",
            "dataset.feat_dim=128",
        ]
    }
    if "cora" in c.graphs():
        graphs["cora"] = c.graphs()["cora"]
    records = []
    for name, graph in graphs.items():
        common = graph + [
            "model=gcn",
            "model.layers=3",
            "model.hidden=128",
            "train.epochs=6",
            "train.eval_every=100",
            "train.cache_input_aggregation=false",
        ]
        run = c.on_device(common + ["mode=hongtu", "mode.chunks=1", "mode.device_memory=0"])
        single = c.on_device(common + ["mode=single"])
        single_cached = c.on_device(common[:-1] + ["mode=single"])
        ratio = _epoch(run) / _epoch(single)
        records.append(
            {
                "name": f"hongtu_paper_{name}",
                "mode": "hongtu",
                "graph": name,
                "status": "ok" if ratio <= 3.8 else "failed",
                "epoch_time_s": run["epoch_time_s"],
                "single_epoch_time_s": single["epoch_time_s"],
                "single_cached_epoch_time_s": single_cached["epoch_time_s"],
                "paper_ratio_vs_single": ratio,
                "timeline": _timeline(run),
                "index_packs": run["mode_report"].get("index_packs"),
            }
        )
    return records


def check_hongtu_disk_budget(c: Check) -> List[dict]:
    """hongtu_budget's graph and device budget with the disk tier below (mode.host_budget=0): the
    three
    tiers at once, its epoch against in-memory single on the device."""
    if c.budget_graph is None:
        check_hongtu_budget(c)
    graph, budget, cap, single = c.budget_graph
    run = c.on_device(
        graph
        + [
            "mode=hongtu",
            "mode.chunks=0",
            f"mode.device_memory={budget}",
            "mode.host_budget=0",
            f"mode.disk_dir={c.tmp / 'disk-budget'}",
        ]
    )
    peak, disk = _device_peak(run), _disk_tier(run)
    return [
        {
            "name": "hongtu_disk_budget",
            "mode": "hongtu",
            "status": "ok" if peak <= cap and disk["disk_bytes_as_predicted"] else "failed",
            "device_peak_bytes": peak,
            "device_budget_bytes": cap,
            "chunks_per_part": run["partition"]["chunks_per_part"],
            "epoch_time_s": run["epoch_time_s"],
            "single_epoch_time_s": single["epoch_time_s"],
            "slowdown_vs_single": _epoch(run) / _epoch(single),
            **disk,
        }
    ]


def check_hyscale(c: Check) -> List[dict]:
    """One CPU trainer beside one GPU trainer with DRM, on a training-heavy setting (3-layer SAGE
    256, fanouts
    15/10/5, batches of 4096: HyScale §V's regime); against GPU-only and CPU-only. Every trainer
    draws on its
    sampler pool (§III-B; the GPU trainer's on the host cores reserved for it) from the §V model's
    split. The
    hybrid has a 1% share floor (the default 5% pins a CPU trainer ~30x slower per seed; run beside
    it). "ok"
    when the hybrid's steady epoch is at most the GPU-only one (on a GPU) and DRM moves the share
    toward the
    trainer that trains a seed faster (the run's own median stage times) or holds it within 0.02."""
    n, batch = (20000, 1024) if c.quick else (100000, 4096)
    base = [
        c.hardware,
        "dataset=csbm",
        f"dataset.num_nodes={n}",
        "dataset.avg_degree=20",
        "model=sage",
        "model.layers=3",
        "model.hidden=256",
        "mode=hyscale",
        "mode.fanouts=[15,10,5]",
        f"mode.batch_size={batch}",
        "train.epochs=3",
        "train.eval_every=100",
    ]
    hybrid = base + ["mode.cpu_trainers=1", "mode.accel_trainers=1", "mode.drm=true"]
    both = c.train(hybrid + ["mode.drm_min_share=0.01"])
    report, medians = both["mode_report"], both["mode_report"]["stage_time_median_s"]
    accel = next(i for i, name in enumerate(report["trainers"]) if name.startswith("accel"))
    shares = [s[accel] for s in report["shares_per_iteration"]]
    per_seed = [
        # train (+ transfer) s
        (medians["train"][r] + (medians["transfer"][r] if r == accel else 0.0))
        / max(1.0, statistics.median(b[r] for b in report["batch_per_iteration"]))
        for r in range(len(report["trainers"]))
    ]
    toward_faster = (
        1.0 if per_seed[accel] < min(s for r, s in enumerate(per_seed) if r != accel) else -1.0
    )
    moved = shares[-1] - shares[0]
    gpu_only = c.train(base + ["mode.cpu_trainers=0", "mode.accel_trainers=1"])
    cpu_only = c.train(base + ["mode.cpu_trainers=1", "mode.accel_trainers=0"])
    floor5 = c.train(hybrid)

    def steady(run) -> float:  # the median epoch after the first (which pays one-time start costs)
        return statistics.median(run["epoch_time_s"][1:] or run["epoch_time_s"])

    ratio, drm_ok = steady(both) / steady(gpu_only), abs(moved) <= 0.02 or moved * toward_faster > 0
    keys = (
        "initial_shares",
        "initial_shares_source",
        "sampler_pool_threads",
        "threads_per_trainer",
        "cpu_threads_over_time",
        "predicted_vs_measured_s",
        "predicted_vs_measured_epoch_s",
        "trainers",
        "iterations",
    )
    return [
        {
            "name": "hyscale_cpu_gpu_drm",
            "mode": "hyscale",
            "status": "ok" if c.device == "cpu" or (drm_ok and ratio <= 1.0) else "failed",
            "hybrid_over_gpu_only": ratio,
            "drm_moves_toward_faster": drm_ok,
            "final_shares": report["shares_final"],
            "accel_share_first_last": [shares[0], shares[-1]],
            "train_s_per_seed": per_seed,
            **{k: report.get(k) for k in keys},
            "stage_time_median_s": medians,
            "gpu_only_sampler_pool_threads": gpu_only["mode_report"]["sampler_pool_threads"],
            "gpu_only_stage_time_median_s": gpu_only["mode_report"]["stage_time_median_s"],
            "epoch_time_s": both["epoch_time_s"],
            "gpu_only_epoch_time_s": gpu_only["epoch_time_s"],
            "cpu_only_epoch_time_s": cpu_only["epoch_time_s"],
            "steady_epoch_s": steady(both),
            "gpu_only_steady_epoch_s": steady(gpu_only),
            "min_share_0_05_epoch_time_s": floor5["epoch_time_s"],
            "min_share_0_05_accel_share_last": floor5["mode_report"]["shares_final"][accel],
        }
    ]


def check_moa(c: Check) -> List[dict]:
    """MoA with the aggregation rank on the host and the update rank on the device, float64, vs CPU
    single."""
    ref = c.on_cpu(["dataset=csbm", "model=sage"] + EXACT)
    run = c.train(
        [
            c.hardware,
            "hardware.ranks_per_node=2",
            "dataset=csbm",
            "model=sage",
            "mode=mop",
            "mode.aggregation_ranks=1",
            "mode.aggregation_device=cpu",
        ]
        + EXACT
    )
    rel = _rel(run["losses"], ref["losses"])
    return [
        {
            "name": "moa_cpu_aggregation",
            "mode": "mop",
            "status": "ok" if rel <= TOLERANCE else "failed",
            "exact_vs_cpu_rel": rel,
            "epoch_time_s": run["epoch_time_s"],
        }
    ]


def _pyg_epochs(n: int, epochs: int, device: str) -> List[float]:
    """The peer: a plain PyG loop, 3 GCNConv layers (hidden 128, relu, Adam) on the same generated
    graph."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    from gnntrain.api import compose
    from gnntrain.data import load_dataset

    data = load_dataset(
        compose(
            [
                "dataset=csbm",
                f"dataset.num_nodes={n}",
                "dataset.avg_degree=20",
                "dataset.feat_dim=128",
            ]
        )
    )
    src, dst = data.edges(False)  # GCNConv adds the self-loops itself
    edge_index = torch.stack([src, dst]).to(device)
    x, y, mask = data.features.to(device), data.labels.to(device), data.masks["train"].to(device)
    dims = [x.shape[1], 128, 128, data.num_classes]
    layers = torch.nn.ModuleList(
        GCNConv(a, b, cached=True) for a, b in zip(dims[:-1], dims[1:])
    ).to(device)
    opt = torch.optim.Adam(layers.parameters(), lr=1e-2, weight_decay=5e-4)
    times = []
    for _ in range(epochs):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        h = x
        for i, layer in enumerate(layers):
            h = layer(torch.relu(h) if i else h, edge_index)
        loss = F.cross_entropy(h[mask], y[mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def check_single_vs_pyg(c: Check) -> List[dict]:
    """The kernels issue's graph (300k nodes, degree 20, 3-layer GCN 128) on the device: single
    against PyG."""
    n, epochs = (30000, 4) if c.quick else (300000, 8)
    ours = c.on_device(
        [
            "dataset=csbm",
            f"dataset.num_nodes={n}",
            "dataset.avg_degree=20",
            "dataset.feat_dim=128",
            "model=gcn",
            "model.layers=3",
            "model.hidden=128",
            "model.dropout=0",
            f"train.epochs={epochs}",
            "train.eval_every=100",
        ]
    )
    # like for like: PyG's GCNConv(cached=True) keeps the normalisation, not A·x; single keeps A·x
    # by default
    recomputing = c.on_device(
        [
            "dataset=csbm",
            f"dataset.num_nodes={n}",
            "dataset.avg_degree=20",
            "dataset.feat_dim=128",
            "model=gcn",
            "model.layers=3",
            "model.hidden=128",
            "model.dropout=0",
            f"train.epochs={epochs}",
            "train.eval_every=100",
            "train.cache_input_aggregation=false",
        ]
    )
    peer = _pyg_epochs(n, epochs, c.device)
    ratio = _epoch(ours) / statistics.median(peer[1:])
    like = _epoch(recomputing) / statistics.median(peer[1:])
    return [
        {
            "name": "single_vs_pyg",
            "mode": "single",
            "status": "ok" if like <= 1.0 else "failed",
            "epoch_time_s": ours["epoch_time_s"],
            "pyg_epoch_time_s": peer,
            "ratio_vs_pyg": ratio,
            "recomputing_epoch_time_s": recomputing["epoch_time_s"],
            "ratio_vs_pyg_recomputing": like,
            "kernel": ours.get("kernel"),
        }
    ]


def check_calibrate(c: Check) -> List[dict]:
    """gnntrain calibrate on the device's profile: its CUDA probes complete and write a profile."""
    env = dict(os.environ, GNNTRAIN_USER_CONFIG_DIR=str(c.tmp / "user-config"))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gnntrain", "calibrate", c.hardware, "--name", "gpu-check"],
        cwd=c.tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    written = c.tmp / "user-config" / "hardware" / "gpu-check.yaml"
    return [
        {
            "name": "calibrate",
            "mode": "-",
            "status": "ok" if done.returncode == 0 and written.exists() else "failed",
            "seconds": time.perf_counter() - start,
            "tail": (done.stdout + done.stderr)[-1500:],
        }
    ]


# in the order they run: the exactness checks first, then the timed ones, calibrate and the disk
# tier at scale last
CHECKS: Dict[str, Callable[[Check], List[dict]]] = {
    "single_exact": check_single_exact,
    "hongtu_exact": check_hongtu_exact,
    "hongtu_disk": check_hongtu_disk,
    "predict": check_predict,
    "moa": check_moa,
    "single_vs_pyg": check_single_vs_pyg,
    "hongtu_paper": check_hongtu_paper,
    "hongtu_budget": check_hongtu_budget,
    "hyscale": check_hyscale,
    "calibrate": check_calibrate,
    "hongtu_disk_budget": check_hongtu_disk_budget,
}


def _check_of(record: dict) -> int:
    """The index in CHECKS of the check that wrote ``record`` (its longest name prefix)."""
    names = [k for k in CHECKS if record["name"].startswith(k)] or ["calibrate"]
    return list(CHECKS).index(max(names, key=len))


def write(out: Path, info: dict, records: Dict[str, dict], command: str) -> List[dict]:
    """docs/bench/gpu.json (and a copy in $OUT, the device tool's return folder, where it is
    set)."""
    ordered = sorted(records.values(), key=_check_of)
    result = {
        **info,
        "title": f"GPU check on {info['device']} (torch {info['torch']}, CUDA {info['cuda']})",
        "columns": ["check", "mode", "status", "median epoch (ms)", "result"],
        "rows": [_row(r) for r in ordered],
        "records": ordered,
        "command": command,
        "machine": info["device"],
        "date": dt.date.today().isoformat(),
        "notes": "Exact checks: float64, dropout 0, 3 epochs, the largest relative gap between the "
        "values on "
        "the device and those of mode=single on the CPU. Epoch medians drop the first epoch. "
        "Records: docs/bench/gpu.json.",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, default=str)
    out.write_text(text)
    if os.environ.get("OUT") and Path(os.environ["OUT"]).is_dir():
        (Path(os.environ["OUT"]) / "gpu.json").write_text(text)
    return ordered


def describe_device(device: str) -> dict:
    import torch

    info = {"device": "cpu", "torch": torch.__version__, "cuda": torch.version.cuda}
    if device == "cuda":
        info["device"] = torch.cuda.get_device_name()
    return info


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checks", nargs="*", metavar="CHECK", help=f"any of {', '.join(CHECKS)}; default: all"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (a smoke test of the flow)"
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("GNNTRAIN_GPU_CHECK_DATA", ""),
        help="folder holding cora_v2_d697a464/ (DGL's layout); Cora is skipped without it",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=0,
        help="start no check after this many seconds (a time-limited machine); 0 = no limit",
    )
    args = parser.parse_args()
    unknown = [name for name in args.checks if name not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}: use any of {', '.join(CHECKS)}")
    os.environ.setdefault("GNNTRAIN_OFFLINE", "1")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA device here; run it on the GPU machine (scripts/gpu-check.sh), or "
            "use "
            "--device cpu for a smoke test",
            file=sys.stderr,
        )
        return 2
    info = describe_device(args.device)
    records: Dict[str, dict] = {}
    if args.out.exists():
        old = json.loads(args.out.read_text())
        if old.get("device") == info["device"]:
            records = {r["name"]: r for r in old.get("records", [])}
    command = "bash scripts/gpu-check.sh" + (" --quick" if args.quick else "")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        check = Check(args.device, args.quick, args.data_dir, Path(tmp))
        for name in args.checks or list(CHECKS):
            if args.deadline_s and time.monotonic() - started > args.deadline_s:
                print(
                    f"gpu_check: {name} not started: past --deadline-s {args.deadline_s:.0f}",
                    flush=True,
                )
                continue
            print(f"gpu_check: {name} ...", flush=True)
            start = time.perf_counter()
            try:
                results = CHECKS[name](check)
            except Exception:  # one failed check is a record, the others still run
                results = [
                    {"name": name, "mode": "-", "status": "failed", "error": traceback.format_exc()}
                ]
            for r in results:
                r["wall_s"] = round(time.perf_counter() - start, 1)
                records[r["name"]] = r
                print("  " + " | ".join(_row(r)), flush=True)
            # after every check: a cut-off run keeps the rest
            ordered = write(args.out, info, records, command)
    ordered = write(args.out, info, records, command)
    print(f"gpu_check: wrote {args.out}")
    return 0 if all(r["status"] == "ok" for r in ordered) else 1


if __name__ == "__main__":
    sys.exit(main())
