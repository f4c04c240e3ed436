"""``partitioner=auto`` (the default): METIS where its peak fits the host, KaMinPar where not.

Partitioning runs in one process, before the ranks start, beside the loaded graph. Its peak per
directed edge, measured with ``python -m benchmarks partitioners`` (peak RSS less the loaded graph;
docs/BENCHMARKS.md, "partitioners"):

- METIS (pymetis) holds the COO lists, the symmetric scipy CSR it builds from them and METIS's own
  coarsening levels: 158 bytes per edge on a 500k-node csbm (10M edges), 186 on a 3M-node one (60M);
- KaMinPar reads its input file with compression: 38 bytes per edge on the 500k-node csbm, about 22
  on the 10M-node one (200M edges);
- KaMinPar's volume refinement (``refine=volume``) comes after KaMinPar frees its graph: an
  (n, k) int32 table, 4k bytes per node, within the 64 per node below up to k = 16;
- LDG holds one part id per node.

KaMinPar's cut alone lost to METIS on graphs without structure (csbm: 1.09-1.11x METIS's total
volume at 200k and 1M nodes); refined for the volume (``refine=volume``, the default) it gives
0.86-1.00x on every graph measured, Cora and CiteSeer included (docs/design.md, "12. Partitioners").
``auto`` still keeps METIS while its estimate fits in half the host's memory (the graph, the prepare
and the store build share the rest) and moves to KaMinPar beyond: the benchmark figures and the
papers' settings use METIS's parts, and a new default would repartition every run that names none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gnntrain.sizing import format_bytes

# bytes per directed edge and per node at the partitioner's peak, beyond the loaded graph
PEAK_BYTES_PER_EDGE = {"metis": 190, "volume": 190, "kaminpar": 40, "ldg": 0}
PEAK_BYTES_PER_NODE = {"metis": 64, "volume": 96, "kaminpar": 64, "ldg": 16}
HOST_SHARE = 0.5  # of the host's memory, what the partitioner may take


def partitioner_peak_bytes(name: str, num_nodes: int, num_edges: int) -> int:
    """Estimated peak of partitioning a graph of ``num_nodes`` nodes and ``num_edges`` directed
    edges with ``name`` (0 for the partitioners that hold only O(N): random, range)."""
    return int(
        PEAK_BYTES_PER_EDGE.get(name, 0) * num_edges + PEAK_BYTES_PER_NODE.get(name, 8) * num_nodes
    )


@dataclass(frozen=True)
class PartitionerChoice:
    name: str
    note: str  # why, for the plan's printout; "" where the user named the partitioner


def choose_partitioner(num_nodes: int, num_edges: int, host_bytes: int) -> PartitionerChoice:
    """What ``partitioner=auto`` becomes for a graph of this size on a host with ``host_bytes``."""
    budget = int(HOST_SHARE * host_bytes)
    metis = partitioner_peak_bytes("metis", num_nodes, num_edges)
    if metis <= budget:
        return PartitionerChoice(
            "metis", f"auto: METIS's estimated {format_bytes(metis)} fits the host"
        )
    kaminpar = partitioner_peak_bytes("kaminpar", num_nodes, num_edges)
    return PartitionerChoice(
        "kaminpar",
        f"auto: METIS would need about {format_bytes(metis)}, over half the host's "
        f"{format_bytes(host_bytes)}; KaMinPar about {format_bytes(kaminpar)}",
    )


def resolved(cfg, num_nodes: int, num_edges: int):
    """``cfg`` with ``auto`` made the partitioner that fits this machine's memory (what a caller
    that skipped the plan gets, e.g. ``partition_graph`` from Python); any other name as it is."""
    if str(cfg.name) != "auto":
        return cfg
    from types import SimpleNamespace

    from gnntrain.sizing import host_memory_bytes

    machine = SimpleNamespace(host_memory_gb=0)
    name = choose_partitioner(num_nodes, num_edges, host_memory_bytes(machine)).name
    if dataclasses.is_dataclass(cfg):
        return dataclasses.replace(cfg, name=name)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    return OmegaConf.create(dict(plain, name=name))
