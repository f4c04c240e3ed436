"""SAR beside ``mode=partition`` in the scaleout suite (#55, "against SAR at scale").

SAR (H. Mostafa, "Sequential Aggregation and Rematerialization: Distributed Full-batch Training of
Graph Neural Networks on Large Graphs", MLSys 2022; github.com/IntelLabs/SAR) is Intel's
distributed full-batch trainer: each worker keeps its partition's in-edges as one graph shard per
partition and aggregates one remote partition at a time, so that no worker ever holds the whole
halo. It is not on PyPI: ``make sar-venv SAR_DIR=/path/to/checkout`` installs it into the DGL stack
(``.venv-dgl``; ``SAR_PYTHON`` names another interpreter, ``SAR_DIR`` is also put on its
``PYTHONPATH``). Where it does not import, the suite skips it with one line.

Two steps, both in the suite's one memory cgroup of ``SCALEOUT_CAP_GIB`` (as the direct path's), on
one host (no emulated network: the workers talk over loopback, gloo):

1. DGL's METIS partitioning of the suite's graph into 4 parts (``dgl.distributed.partition_graph``
   with 1-hop halos, as SAR's examples/partition_graph.py), a self-loop added on every node;
2. 4 SAR workers of 1 thread each (benchmarks/suites/sar_worker.py), the suite's model: the GCN
   gnntrain composes for the suite's overrides (layers, hidden, dropout, Adam's lr and weight decay,
   epochs), as DGL ``GraphConv(norm='both')`` layers over the graph with its self-loops: the same
   D_out^-1/2 (A+I) D_in^-1/2 that gnntrain's ``model=gcn`` computes from global degrees.

An epoch is a training step (forward, backward, gradient all-reduce, Adam), the slowest worker's;
the median is the suite's (the upper middle of the epochs). A worker's peak is its VmHWM at the end,
as gnntrain's per-rank ``peak_memory_bytes``.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from benchmarks.harness import dgl_python
from benchmarks.suites.moonshot import _gib
from benchmarks.suites.scaleout_hosts import START_LIMIT_S, Step, step

MODE = "sar"
WORLD = 4
WORKER = Path(__file__).with_name("sar_worker.py")
PORT = 29600 + os.getpid() % 100


def sar_python() -> Optional[str]:
    """The interpreter that runs SAR: ``SAR_PYTHON``, else the DGL stack's (None if absent)."""
    chosen = os.environ.get("SAR_PYTHON") or dgl_python()
    return str(chosen) if chosen else None


def _command(*args: str) -> List[str]:
    """``sar_worker.py args`` in SAR's interpreter, with ``SAR_DIR`` (if given) on its path."""
    sar_dir = os.environ.get("SAR_DIR")
    env = ["env", f"PYTHONPATH={sar_dir}"] if sar_dir else []
    return env + [str(sar_python()), str(WORKER), *args]


@functools.lru_cache(maxsize=None)
def skip_reason() -> Optional[str]:
    """None where SAR imports in its interpreter, else the suite's one line saying how to get it."""
    import subprocess

    python = sar_python()
    if python is None:
        return (
            "SAR: not run (no DGL stack: make venv-dgl, then make sar-venv "
            "SAR_DIR=/path/to/a/checkout/of/IntelLabs/SAR)"
        )
    done = subprocess.run(_command("probe"), capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return None
    said = done.stdout.strip().splitlines()
    return (
        said[-1] if said else f"SAR: not run ({python} sar_worker.py probe exit {done.returncode})"
    )


@dataclass
class SarPeer:
    """SAR's two steps (None where not run) and each worker's record (rank order)."""

    skip: Optional[str] = None
    partition: Optional[Step] = None
    train: Optional[Step] = None
    workers: List[dict] = field(default_factory=list)

    @property
    def epoch(self) -> Optional[float]:
        """The median epoch (the suite's rule: the upper middle), each the slowest worker's."""
        if not self.workers:
            return None
        times = self.epochs
        return sorted(times)[len(times) // 2] if times else None

    @property
    def rank_peak(self) -> Optional[int]:
        """The largest worker's VmHWM, bytes."""
        return max(w["peak"] for w in self.workers) if self.workers else None

    def rows(self) -> List[List[str]]:
        """The suite's rows (benchmarks/suites/scaleout.py COLUMNS)."""
        rows = []
        for name, done, epoch in (
            (
                "SAR's partitioning (DGL METIS, 4 parts, 1-hop halos; 1 cgroup)",
                self.partition,
                None,
            ),
            (
                "SAR p=4 (sequential aggregation and rematerialization, DGL GraphConv, gloo), "
                "4 workers on 1 host, 1 cgroup",
                self.train,
                self.epoch,
            ),
        ):
            if done is not None:
                wall, peak = f"{done.seconds:.0f}", _gib(done.peaks[0])
                cell = "-" if epoch is None else f"{epoch:.1f}"
                rows.append([name, done.status, wall, cell, peak] + ["-"] * 3)
        return rows

    @property
    def epochs(self) -> List[float]:
        """Each epoch's time, the slowest worker's."""
        return [max(e) for e in zip(*(w["epoch_time_s"] for w in self.workers))]

    def notes(self, partition: Optional[dict]) -> str:
        """The suite's notes on SAR: its one skip line, or its figures and the two ratios against
        ``partition`` (the partition job's summary.json). The epoch ratio is taken at the last
        epoch, where both sides are past their one-time setup (SAR's first epoch computes the
        global degrees and its shards' first messages), and at the suite's median."""
        if self.skip:
            return " " + self.skip + "."
        if not self.workers:
            return " SAR: failed (its rows say where)."
        losses = self.workers[0]["losses"]
        text = (
            " SAR (Mostafa, MLSys 2022; 4 workers of 1 thread, gloo over loopback, default mode: "
            "sequential aggregation, no rematerialization needed for GCN's sum): epochs "
            + " / ".join(f"{t:.1f}" for t in self.epochs)
            + " s, losses "
            + " / ".join(f"{x:.4f}" for x in losses)
            + ", per-worker peak (VmHWM) "
            + " / ".join(_gib(w["peak"]) for w in self.workers)
            + " GiB. Both GCNs: D^-1/2 (A+I) D^-1/2 (gnntrain's model=gcn from global degrees; "
            "DGL GraphConv norm='both' with self-loops added)."
        )
        ours = (partition or {}).get("epoch_time_s") or []
        if ours and self.epochs:
            last = ours[-1] / self.epochs[-1]
            median = sorted(ours)[len(ours) // 2] / self.epoch
            text += (
                f" partition epochs {' / '.join(f'{t:.1f}' for t in ours)} s; partition / SAR at "
                f"the last epoch = {last:.2f} (goal <= 0.8: {'met' if last <= 0.8 else 'MISSED'}), "
                f"at the median = {median:.2f}."
            )
        peak = ((partition or {}).get("peak_memory_bytes") or {}).get("host_max_rank")
        if peak and self.rank_peak:
            ratio = peak / self.rank_peak
            text += (
                f" partition per-rank peak / SAR per-worker peak = {_gib(peak)} / "
                f"{_gib(self.rank_peak)} GiB = {ratio:.2f} "
                f"(goal <= 1.0: {'met' if ratio <= 1.0 else 'MISSED'})."
            )
        return text


def _result(log: Path):
    lines = [line for line in log.read_text().splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT ") :]) if lines else None


def _config(overrides: Sequence[str], parts_json: Path, classes: int) -> dict:
    """The workers' settings: the model and training gnntrain composes for ``overrides``."""
    from gnntrain.api import compose

    cfg = compose(list(overrides))
    if cfg.model.name != "gcn":
        raise ValueError(f"the SAR peer runs gnntrain's model=gcn only, not {cfg.model.name}")
    return {
        "parts_json": str(parts_json),
        "world": WORLD,
        "port": PORT,
        "epochs": int(cfg.train.epochs),
        "layers": int(cfg.model.layers),
        "hidden": int(cfg.model.hidden),
        "dropout": float(cfg.model.dropout),
        "lr": float(cfg.train.lr),
        "wd": float(cfg.train.weight_decay),
        "classes": classes,
        "timeout_s": START_LIMIT_S,
    }


def run_sar(graph: Path, overrides: Sequence[str], tmp: Path, group) -> SarPeer:
    """SAR's partitioning and training on the suite's ``graph`` (gnntrain's on-disk format) in the
    memory cgroup ``group``, the model gnntrain composes for ``overrides``; the one-line skip where
    SAR does not import."""
    reason = skip_reason()
    if reason is not None:
        return SarPeer(skip=reason)
    out = tmp / "sar-parts"
    peer = SarPeer()
    peer.partition = step(
        _command("partition", str(graph), str(out), str(WORLD)), group, tmp / "sar-partition.log"
    )
    if not peer.partition.ok:
        return peer
    peer.partition.figures = _result(tmp / "sar-partition.log") or {}
    meta = json.loads((graph / "meta.json").read_text())
    config = tmp / "sar-config.json"
    config.write_text(json.dumps(_config(overrides, out / "graph.json", meta["num_classes"])))
    log = tmp / "sar-train.log"
    peer.train = step(_command("launch", str(config)), group, log)
    if peer.train.ok:  # step() printed the log's end where it failed
        peer.workers = _result(log) or []
    return peer
