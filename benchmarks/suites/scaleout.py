"""The `scaleout` suite (#55): the multi-rank path of a graph larger than one process would hold, on
two emulated hosts (network namespaces, as ``gnntrain netem`` makes them) of 2 ranks each, every
process of it inside a memory cgroup, beside the one-rank direct path on one host.

The graph is the `communities` generator's (feat 128), written to disk block by block; the model a
3-layer GCN 128 in float32, 2 epochs. Each host runs inside its own memory cgroup capped at
``SCALEOUT_HOST_CAP_GIB`` (default 5), so both together get the ``SCALEOUT_CAP_GIB`` (default 10) of
the one-rank run; exceeding a cap kills the step (its row says so). Steps:

1. ``gnntrain generate`` writes the graph (in a cgroup of ``SCALEOUT_CAP_GIB``);
2. the partitioning with KaMinPar into 4 parts, once, in host 0's cgroup (into the shared cache);
3. each selected mode at p = 4 as 2 hosts x 2 ranks, one torchrun agent per host
   (gnntrain/launch/netem_jobs.py), links of ``SCALEOUT_GBIT`` Gbit/s (default 10), the cache folder
   shared (one filesystem): ``mode=partition`` (the plan sets the saved-tensor disk tier's budget
   where its estimate would not fit a host), ``mode=hongtu`` (gather engine, every vertex table on
   the disk tier: ``mode.host_budget=0``) and ``mode=supergcn`` (hybrid aggregation, int2). Each
   host's ranks build only their own parts of the part-wise store (gnntrain/partition/part_wise.py),
   from the partitioning of step 2;
4. HongTu's direct path on one rank (cgroup of ``SCALEOUT_CAP_GIB``), every table on disk: the
   baseline partition's epoch is priced against (goal: <= 1.5x).

5. ``sar``: SAR (Mostafa, MLSys 2022; benchmarks/suites/sar_peer.py) at p = 4 on one host, in the
   cgroup of ``SCALEOUT_CAP_GIB``: DGL's METIS partitioning, then 4 workers training the same GCN;
   the notes price partition's epoch (goal: <= 0.8x) and per-rank peak (goal: <= 1.0x) against
   SAR's. SAR is not on PyPI: ``make sar-venv SAR_DIR=...`` installs it into the DGL stack; where
   it does not import, the notes say so in one line.

The rows: ``SCALEOUT_MODES`` (default ``partition,hongtu,supergcn,direct``, and ``sar`` where SAR
imports), so that a full run can be split. ``SCALEOUT_HOST_LOSS=1`` adds the host-loss trial
(benchmarks/suites/scaleout_loss.py): host 1 killed in epoch 2 of the partition job (its saved
tensors on the disk tier), the job's end, the resume on both hosts (its losses against the
partition row's) and what the disk tier left.
Sizes: ``SCALEOUT_NODES`` (default 10,000,000, the moonshot's; ``--quick``: 200,000). Root is
needed for the namespaces and the cgroups.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import yaml

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite
from benchmarks.suites.moonshot import _gib, memory_cgroup
from benchmarks.suites.sar_peer import MODE as SAR
from benchmarks.suites.sar_peer import SarPeer, run_sar, skip_reason
from benchmarks.suites.scaleout_hosts import (
    GNNTRAIN,
    HOSTS,
    RANKS_PER_HOST,
    Step,
    TwoHosts,
    partition_step,
    step,
)
from benchmarks.suites.scaleout_loss import END_LIMIT_S, LOST_HOST, HostLoss, host_loss_trial
from gnntrain.comm.accounting import NOT_TRAFFIC
from gnntrain.launch import netem

MODEL = ["model.layers=3", "model.hidden=128", "train.dtype=float32", "train.eval_every=2"]
TRAIN = ["train.epochs=2", "train.progress=false"]
MODES: Dict[str, tuple] = {
    "partition": ("mode=partition p=4, 2 hosts x 2 ranks", ["mode=partition"]),
    "hongtu": (
        "mode=hongtu p=4 (gather engine, tables on disk), 2 hosts x 2 ranks",
        ["mode=hongtu", "mode.host_budget=0"],
    ),
    "supergcn": (
        "mode=supergcn p=4 (hybrid, int2), 2 hosts x 2 ranks",
        ["mode=supergcn", "mode.aggregation=hybrid", "mode.bits=2"],
    ),
}
DIRECT = "HongTu direct path, 1 rank, 1 cgroup, tables on disk"
COLUMNS = [
    "step",
    "status",
    "wall (s)",
    "median epoch (s)",
    "cgroup peak GiB (host 0 / host 1)",
    "sent per epoch GiB",
    "disk read per epoch GiB: measured / predicted",
    "disk written per epoch GiB: measured / predicted",
]


def _selected() -> List[str]:
    """SCALEOUT_MODES's rows; by default every mode, the direct path, and SAR where it imports."""
    chosen = os.environ.get("SCALEOUT_MODES")
    if chosen is None:
        chosen = "partition,hongtu,supergcn,direct" + ("" if skip_reason() else f",{SAR}")
    names = [m.strip() for m in chosen.split(",") if m.strip()]
    unknown = sorted(set(names) - set(MODES) - {"direct", SAR})
    if unknown:
        raise ValueError(f"SCALEOUT_MODES: unknown {unknown}; use {list(MODES) + ['direct', SAR]}")
    return names


def _median_epoch(summary: Optional[dict]) -> Optional[float]:
    times = (summary or {}).get("epoch_time_s") or []
    return sorted(times)[len(times) // 2] if times else None


def _predicted_disk(done: Step) -> dict:
    """The plan's disk bytes per epoch, all ranks: HongTu's tiers (known once the graph is
    partitioned: summary.json) or the saved-tensor tier's (plan.yaml's comm_per_epoch)."""
    tiers = ((done.summary or {}).get("mode_report") or {}).get("tiers") or {}
    if tiers.get("predicted_disk_bytes_per_epoch"):
        return tiers["predicted_disk_bytes_per_epoch"]
    plan = done.run_dir / "plan.yaml" if done.run_dir else None
    if plan is None or not plan.exists():
        return {}
    by_kind = ((yaml.safe_load(plan.read_text()) or {}).get("comm_per_epoch") or {}).get("by_kind")
    return {k: v for k, v in (by_kind or {}).items() if k.startswith("disk")}


def _disk_cell(measured: Optional[int], predicted: Optional[int]) -> str:
    if measured is None:
        return "-"
    ratio = f" ({measured / predicted:.2f})" if predicted else ""
    return f"{_gib(measured)} / {_gib(predicted) if predicted is not None else '0.00'}{ratio}"


def _row(name: str, done: Step) -> List[str]:
    summary = done.summary if done.summary and done.summary.get("status") == "completed" else None
    by_kind = ((summary or {}).get("comm_bytes") or {}).get("by_kind") or {}
    sent = sum(v for k, v in by_kind.items() if k not in NOT_TRAFFIC)
    predicted = _predicted_disk(done) if summary else {}
    epoch = _median_epoch(summary)
    return [
        name,
        done.status,
        f"{done.seconds:.0f}",
        "-" if epoch is None else f"{epoch:.1f}",
        " / ".join(_gib(p) for p in done.peaks),
        "-" if summary is None else _gib(sent),
        "-"
        if summary is None
        else _disk_cell(by_kind.get("disk_read", 0), predicted.get("disk_read")),
        "-"
        if summary is None
        else _disk_cell(by_kind.get("disk_write", 0), predicted.get("disk_write")),
    ]


def _loss_rows(loss: HostLoss) -> List[List[str]]:
    ended = "-" if loss.time_to_end_s is None else f"{loss.time_to_end_s:.1f}"
    kill = [
        f"host {LOST_HOST} killed in epoch {(loss.kill_epoch or 0) + 1} (partition, checkpoint "
        f"every epoch): kill to the job's end",
        (
            "ok"
            if loss.named and loss.time_to_end_s is not None and loss.time_to_end_s <= END_LIMIT_S
            else "FAILED"
        )
        + (f": {loss.error}" if loss.error else ""),
        ended,
    ] + ["-"] * 5
    rows = [kill]
    if loss.resume is not None:
        row = _row("resumed (train.resume=true on both hosts)", loss.resume)
        row[1] += f"; losses {'identical' if loss.identical else 'DIFFER'}"
        row[1] += "; disk tier: " + (", ".join(loss.left_after_resume) or "empty")
        rows.append(row)
    return rows


def _loss_notes(loss: Optional[HostLoss]) -> str:
    if loss is None:
        return " Host loss: not run (SCALEOUT_HOST_LOSS=1 runs it)."
    return (
        f" Host loss ({'passed' if loss.ok else 'FAILED'}): {len(loss.killed_pids)} processes of "
        f"host {LOST_HOST} (its namespace's) killed with SIGKILL in epoch "
        f"{(loss.kill_epoch or 0) + 1}; "
        f"the job ended {loss.time_to_end_s} s later (limit {END_LIMIT_S:g} s), the agents' line: "
        f"'{loss.line}' (names the host: {'yes' if loss.named else 'no'}); disk-tier files after "
        "the kill (the killed ranks', for the resume to remove): "
        f"{len(loss.left_after_kill)}; after the resume: {len(loss.left_after_resume)}; losses "
        "of the resumed run identical to the uninterrupted run's: "
        f"{'yes' if loss.identical else 'no'}."
    )


def _plan_host_gib(host_cap: int) -> float:
    """The host memory the jobs' plans are given: the host's cgroup cap, unless
    ``SCALEOUT_PLAN_HOST_GIB`` sets another (to measure a host's real peak against the estimate of a
    plan that would refuse it at the cap)."""
    return float(os.environ.get("SCALEOUT_PLAN_HOST_GIB", host_cap / 2**30))


def _sizes(quick: bool) -> tuple:
    nodes = 200_000 if quick else int(os.environ.get("SCALEOUT_NODES", 10_000_000))
    cap = int(float(os.environ.get("SCALEOUT_CAP_GIB", 10)) * 2**30)
    host_cap = int(float(os.environ.get("SCALEOUT_HOST_CAP_GIB", 5)) * 2**30)
    return nodes, cap, host_cap, float(os.environ.get("SCALEOUT_GBIT", 10))


def _on_hosts(
    hosts: TwoHosts,
    on_host: List[str],
    hosted: List[str],
    tmp: Path,
    rows: list,
    epochs: dict,
    peaks: List[str],
    summaries: dict,
) -> Optional[HostLoss]:
    """The partitioning, each mode's job and (SCALEOUT_HOST_LOSS=1) the host-loss trial on the two
    hosts: rows appended to ``rows``, median epochs to ``epochs``, each job's cgroups at their peaks
    (what was charged: anonymous memory, page cache, its mapped and dirty parts, each role's RSS) to
    ``peaks``, each completed job's summary.json to ``summaries``; the trial's record."""
    cores = max(1, (os.cpu_count() or 1) // HOSTS)  # what start_job gives each host's ranks
    world = [f"hardware.nodes={HOSTS}", f"hardware.ranks_per_node={RANKS_PER_HOST}"]
    part = partition_step(
        on_host + ["mode=partition", f"hardware.cores_per_node={cores}"] + world,
        hosts.groups[0],
        tmp / "partition.log",
    )
    rows.append(_row("partition (KaMinPar, 4 parts, once; host 0's cgroup)", part))
    done: Dict[str, Step] = {}
    for mode in hosted:
        name, extra = MODES[mode]
        done[mode] = hosts.run(on_host + extra + TRAIN, tmp / f"run-{mode}")
        hit = ((done[mode].summary or {}).get("partition") or {}).get("cache_hit")
        if done[mode].ok and hit is not None:  # rank 0's: the partitioning of the step above
            done[mode].status += "; partitioning " + (
                "from the cache" if hit else "made in the job"
            )
        epochs[mode] = _median_epoch(done[mode].summary)
        summary = done[mode].summary or {}
        summaries[mode] = summary if summary.get("status") == "completed" else None
        rows.append(_row(name, done[mode]))
        peaks.append(
            f"{mode}: "
            + "; ".join(f"host {i} {p.describe()}" for i, p in enumerate(done[mode].at_peak))
        )
    if os.environ.get("SCALEOUT_HOST_LOSS") != "1":
        return None
    reference = done.get("partition")
    losses = (reference.summary or {}).get("losses") if reference and reference.ok else None
    loss = host_loss_trial(
        hosts, on_host + MODES["partition"][1] + TRAIN, tmp / "host-loss", losses or None
    )
    rows += _loss_rows(loss)
    return loss


@suite("scaleout")
def suite_scaleout(quick: bool) -> SuiteResult:
    nodes, cap, host_cap, gbit = _sizes(quick)
    selected = _selected()
    rows, epochs, loss, network, meta, peaks, summaries = [], {}, None, "not made", {}, [], {}
    sar = SarPeer(skip=skip_reason() or "SAR: not run (not in SCALEOUT_MODES)")
    reason = netem.unavailable_reason()
    with (
        tempfile.TemporaryDirectory(prefix="gnntrain-scaleout-", dir="/var/tmp") as tmp,
        memory_cgroup(cap, f"gnntrain-scaleout-{os.getpid()}") as group,
    ):
        tmp = Path(tmp)
        graph, cache = tmp / "graph", tmp / "cache"
        files = ["dataset=files", f"dataset.path={graph}", f"cache_dir={cache}"] + MODEL
        gen = step(
            GNNTRAIN
            + ["generate", "--out", str(graph), "dataset=communities"]
            + [f"dataset.num_nodes={nodes}", "dataset.feat_dim=128"],
            group,
            tmp / "generate.log",
        )
        meta = json.loads((graph / "meta.json").read_text()) if gen.ok else {}
        rows.append(_row("generate (communities, block writer; 1 cgroup)", gen))
        hosted = [m for m in selected if m in MODES]
        if gen.ok and hosted and reason is None:
            on_host = files + [
                "partitioner=kaminpar",
                f"hardware.host_memory_gb={_plan_host_gib(host_cap):g}",
            ]
            with TwoHosts(host_cap, gbit, cache) as hosts:
                network = hosts.describe()
                loss = _on_hosts(hosts, on_host, hosted, tmp, rows, epochs, peaks, summaries)
        elif hosted:
            rows.append([f"2 emulated hosts: not run ({reason or 'generate failed'})"] + ["-"] * 7)
        if gen.ok and "direct" in selected:
            run_dir = tmp / "run-direct"
            direct = step(
                GNNTRAIN
                + ["run"]
                + files
                + [f"hardware.host_memory_gb={cap / 2**30:g}", "hardware.ranks_per_node=1"]
                + ["mode=hongtu", "mode.direct=true", "mode.host_budget=0", "mode.chunks=0"]
                + ["kernel=native"]
                + TRAIN
                + [f"hydra.run.dir={run_dir}"],
                group,
                tmp / "direct.log",
                run_dir,
            )
            epochs["direct"] = _median_epoch(direct.summary)
            rows.append(_row(DIRECT, direct))
        if gen.ok and SAR in selected:
            sar = run_sar(graph, files + TRAIN, tmp, group)
            rows += sar.rows()
    partition_epoch, direct_epoch = epochs.get("partition"), epochs.get("direct")
    if partition_epoch and direct_epoch:
        ratio = partition_epoch / direct_epoch
        goal = f"{ratio:.2f} (goal <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})"
    else:  # a row not selected (SCALEOUT_MODES) or failed: no ratio to judge
        goal = "not measured (both rows are needed)"
    return SuiteResult(
        title=f"scale-out on 2 emulated hosts: communities graph, {meta.get('num_nodes', nodes):,} "
        f"nodes, {meta.get('num_edges', 0):,} directed edges, feat 128, 3-layer GCN 128, float32",
        columns=COLUMNS,
        rows=rows,
        notes=f"Hosts: {network}, each inside its own memory cgroup capped at "
        f"{host_cap / 2**30:g} GiB (2 ranks and the torchrun agent), the cache folder shared; "
        f"generate and the direct path ran in one cgroup of {cap / 2**30:g} GiB. Peaks include "
        "page cache. The partitioning ran once in host 0's cgroup; each host's ranks then built "
        "only their own parts of the part-wise store inside the job (its wall time includes that). "
        "Sent: summary.json's comm_bytes.by_kind, all kinds but disk and reused, all ranks; disk: "
        "disk_read/disk_write against the plan's prediction (HongTu: its tiers' in summary.json; "
        "partition/SuperGCN: the saved-tensor tier's in plan.yaml, 0 where it sets none), the "
        f"ratio in parentheses. partition 2-host epoch / direct path epoch: {goal}. Rows: "
        f"SCALEOUT_MODES={','.join(selected)}."
        + sar.notes(summaries.get("partition"))
        + _loss_notes(loss)
        + (" At each host's peak (sampled every 0.25 s): " + " | ".join(peaks) if peaks else ""),
        extra={"host_loss": _loss_json(loss)} if loss is not None else {},
    )


def _loss_json(loss: HostLoss) -> dict:
    return {
        "ok": loss.ok,
        "killed_pids": len(loss.killed_pids),
        "kill_epoch": loss.kill_epoch,
        "time_to_end_s": loss.time_to_end_s,
        "line": loss.line,
        "named": loss.named,
        "disk_tier_after_kill": loss.left_after_kill,
        "disk_tier_after_resume": loss.left_after_resume,
        "losses_identical": loss.identical,
        "resume_status": loss.resume.status if loss.resume else None,
        "error": loss.error,
    }
