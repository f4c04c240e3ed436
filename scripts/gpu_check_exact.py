"""The exact GPU checks (scripts/gpu_check.py): runs on the device against ``single`` on the CPU,
float64, within TOLERANCE: single (per graph, and with dropout masks drawn on the device), HongTu
m=1 and its disk tier, ``gnntrain predict`` of device-trained weights, and MoA with CPU aggregation
beside a GPU update rank."""

from __future__ import annotations

import contextlib
from typing import List

from gpu_check_base import EXACT, EXACT_DROPOUT, RUNS, TOLERANCE, Check, _disk_tier, _rel


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
    and with dropout 0.5, whose masks the device draws per chunk where the CPU draws them whole (the
    same bits)."""
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


def check_hongtu_disk(c: Check) -> List[dict]:
    """HongTu's disk tier under a CUDA device (mode.host_budget=0: every vertex table memory-mapped
    on disk, staged through the host to the device) vs CPU single, float64; measured disk bytes =
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
    predicted from the same weights on the CPU (float64), under the user's node IDs."""
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
