"""What one ``gnntrain ingest`` is asked to do: :class:`IngestOptions` (the edge and node sources,
the cleaning policy, the split, the output folder), shared by the driver
(:mod:`gnntrain.data.ingest`) and the readers it calls (:mod:`.edges`, :mod:`.labels`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from gnntrain.data.ingest.nodes import NodeOptions
from gnntrain.data.ingest.tables import CsvOptions


@dataclass
class IngestOptions:
    out: Path
    # one file, or two 1-D .npy files (sources, destinations)
    edges: List[Path] = field(default_factory=list)
    edges_format: str = "auto"
    src_column: Optional[str] = None  # default: "src" when present, else the first column
    dst_column: Optional[str] = None  # default: "dst" when present, else the second column
    # each edge's weight: a column of the edge table, or a .npy of one number per edge in edge
    # order (docs/design.md#edge-weights); None: the graph is unweighted
    weight_column: Optional[str] = None
    weights: Optional[Path] = None
    # header, delimiter, comment of a CSV/TSV edge list
    edges_csv: CsvOptions = field(default_factory=CsvOptions)
    # a saved PyG Data (.pt) or DGL graph (.bin): edges, and nodes unless given
    graph: Optional[Path] = None
    nodes: NodeOptions = field(default_factory=NodeOptions)
    symmetrize: bool = True
    self_loops: str = "drop"  # drop | error
    duplicates: str = "drop"  # drop | error
    # when no masks are given: fractions of labeled nodes
    split: Tuple[float, float, float] = (0.6, 0.2, 0.2)
    # link prediction's held-out edges, {"val"/"test": a file read as --edges is}: kept out of the
    # graph and stored beside it (edges_<split>.npy)
    held_out: Dict[str, Optional[Path]] = field(default_factory=dict)
    # or drawn: train, val, test fractions of the graph's edges (--edge-split), seeded by ``seed``
    edge_split: Optional[Tuple[float, float, float]] = None
    seed: int = 0
    name: str = ""
    overwrite: bool = False
