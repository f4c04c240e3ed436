"""The timed GPU checks (scripts/gpu_check.py): ``single`` against PyG's ``GCNConv``, HongTu in its
paper's setting, under a device budget below the graph's vertex data and with the disk tier below
that, HyScale's CPU and GPU trainers under DRM; and ``gnntrain calibrate`` on the device."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import List

from gpu_check_base import Check, _disk_tier, _epoch


def _device_peak(run: dict) -> int:
    """The larger of HongTu's working-set ledger and the CUDA allocator's own peak (transients
    included)."""
    peaks = run["peak_memory_bytes"]
    return max(
        int(peaks.get("device_arena_max_rank", 0)), int(peaks.get("device_allocator_max_rank") or 0)
    )


def check_hongtu_budget(c: Check) -> List[dict]:
    """HongTu m=1 with a device budget below the graph's vertex data (paper §4: the host holds it),
    against in-memory single on the same device for the same graph (HongTu reports 1.3-3.8x
    slower)."""
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
    of compute, host→device and device→host copies, the copy seconds that ran under compute, the
    wall span, and the host-side ⊕-add seconds."""
    report = run["mode_report"]
    line = dict(report.get("timeline_s", {}))
    line["host_accumulate_s"] = report.get("host_accumulate_s", 0.0)
    copies = line.get("h2d_s", 0.0) + line.get("d2h_s", 0.0)
    under = line.get("h2d_overlapped_s", 0.0) + line.get("d2h_overlapped_s", 0.0)
    line["copy_share_under_compute"] = under / copies if copies else 0.0
    return line


def check_hongtu_paper(c: Check) -> List[dict]:
    """HongTu in its paper's Table 5 setting: one chunk per partition and no device budget (so the
    only cost over in-memory training is streaming each layer's vertex data through the device),
    against in-memory single on the same device, with A·x of the inputs recomputed on both sides
    (train.cache_input_aggregation=false: HongTu's gather engine recomputes it; single would
    otherwise keep it). Paper: 1.3-3.8x. One rank, so the graph's locality does not enter (every row
    is needed once)."""
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
    three tiers at once, its epoch against in-memory single on the device."""
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
    256, fanouts 15/10/5, batches of 4096: HyScale §V's regime); against GPU-only and CPU-only.
    Every trainer draws on its sampler pool (§III-B; the GPU trainer's on the host cores reserved
    for it) from the §V model's split. The hybrid has a 1% share floor (the default 5% pins a CPU
    trainer ~30x slower per seed; run beside it). "ok" when the hybrid's steady epoch is at most the
    GPU-only one (on a GPU) and DRM moves the share toward the
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
