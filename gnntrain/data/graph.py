"""The one object every dataset loader yields."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch


@dataclass
class GraphData:
    """A node-classification graph as plain tensors, plus its DGL view.

    ``src``/``dst`` hold the directed edges src→dst without self-loops
    (symmetrised when the dataset config asks); :meth:`edges` adds self-loops
    when the model wants them. ``content_hash`` keys every cache built from it.
    ``edge_weight``, where the graph has weights, holds one float32 weight per edge of
    ``src``/``dst``, in their order (positive and finite; docs/design.md#edge-weights).
    """

    name: str
    num_nodes: int
    src: torch.Tensor
    dst: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    num_classes: int
    content_hash: str
    origin: str = ""
    # what the run's task derived from the graph (link prediction's edge split): its
    # ``shard_payload(rows, counted)`` gives a rank what it scores (gnntrain/tasks)
    task_data: Any = None
    # real-valued node targets (N, T) for node regression, NaN where a node has none; or None
    targets: Optional[torch.Tensor] = None
    # link prediction's given held-out edges, {"val"/"test": (src, dst)}, none of them in src/dst
    # (an ingested folder's edges_<split>.npy); None: task.edge_split draws them
    held_out_edges: Optional[Dict[str, Tuple[torch.Tensor, torch.Tensor]]] = None
    edge_weight: Optional[torch.Tensor] = None
    _dgl_cache: Dict[bool, object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    @property
    def feat_dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def masks(self) -> Dict[str, torch.Tensor]:
        return {"train": self.train_mask, "val": self.val_mask, "test": self.test_mask}

    def edges(self, self_loop: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        if not self_loop:
            return self.src, self.dst
        loops = torch.arange(self.num_nodes, dtype=self.src.dtype)
        return torch.cat([self.src, loops]), torch.cat([self.dst, loops])

    @property
    def weighted(self) -> bool:
        """Whether the graph carries edge weights."""
        return self.edge_weight is not None

    def edge_values(self, self_loop: bool) -> Optional[torch.Tensor]:
        """float64 weights of :meth:`edges`' edges (self-loops weigh 1), or None without weights."""
        w = self.edge_weight
        if w is None:
            return None
        w = w.to(torch.float64)
        if not self_loop:
            return w
        return torch.cat([w, torch.ones(self.num_nodes, dtype=torch.float64)])

    def graph(self, self_loop: bool = False):
        """The DGL graph, with node data ``feat``, ``label`` and the three masks."""
        if self_loop not in self._dgl_cache:
            import dgl

            src, dst = self.edges(self_loop)
            g = dgl.graph((src, dst), num_nodes=self.num_nodes)
            g.ndata["feat"] = self.features
            g.ndata["label"] = self.labels
            for split, mask in self.masks.items():
                g.ndata[f"{split}_mask"] = mask
            self._dgl_cache[self_loop] = g
        return self._dgl_cache[self_loop]


class CsrGraphData(GraphData):
    """A graph whose edges come as a destination-sorted CSR (an ingested folder's memory-mapped
    ``indptr``/``indices``): ``src``/``dst`` are built on first use only (16 bytes per edge), so a
    mode that reads the CSR itself (HongTu's direct path) never holds the graph as COO.
    ``csr_weights`` (the folder's mapped ``weights.npy``, or None) holds each CSR entry's weight:
    the COO order is the CSR's, so it is ``edge_weight`` too."""

    def __init__(
        self,
        *,
        indptr: np.ndarray,
        indices: np.ndarray,
        symmetric: bool,
        weights: Optional[np.ndarray] = None,
        **fields,
    ):
        self.csr: Tuple[np.ndarray, np.ndarray] = (indptr, indices)
        self.csr_weights = weights
        # every edge's reverse is present (the transpose is the same CSR; with weights, w_uv = w_vu)
        self.symmetric = bool(symmetric)
        self._src = self._dst = None
        edge_weight = None if weights is None else torch.from_numpy(weights)
        super().__init__(src=None, dst=None, edge_weight=edge_weight, **fields)

    @property  # type: ignore[override]
    def src(self) -> torch.Tensor:
        if self._src is None:
            self._src = torch.from_numpy(np.asarray(self.csr[1], dtype=np.int64))
        return self._src

    @src.setter
    def src(self, value: Optional[torch.Tensor]) -> None:
        self._src = value

    @property  # type: ignore[override]
    def dst(self) -> torch.Tensor:
        if self._dst is None:
            indptr = np.asarray(self.csr[0])
            self._dst = torch.repeat_interleave(
                torch.arange(self.num_nodes, dtype=torch.int64), torch.from_numpy(np.diff(indptr))
            )
        return self._dst

    @dst.setter
    def dst(self, value: Optional[torch.Tensor]) -> None:
        self._dst = value

    @property
    def num_edges(self) -> int:
        return int(self.csr[1].shape[0])

    @property
    def edges_built(self) -> bool:
        """Whether the COO lists were built (a test's check that a path stayed on the CSR)."""
        return self._src is not None or self._dst is not None


def hash_tensors(*tensors: torch.Tensor, extra: str = "") -> str:
    h = hashlib.sha1(extra.encode())
    for t in tensors:
        arr = np.ascontiguousarray(t.detach().cpu().numpy())
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(memoryview(arr).cast("B"))
    return h.hexdigest()[:16]


def clean_edges(
    src: torch.Tensor, dst: torch.Tensor, num_nodes: int, symmetrize: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Drop self-loops and duplicate edges; add reverse edges when asked. Sorted by (dst, src)."""
    src, dst = src.to(torch.int64), dst.to(torch.int64)
    if symmetrize:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    keep = src != dst
    key = torch.unique(dst[keep] * num_nodes + src[keep])
    return key % num_nodes, key // num_nodes


def split_masks(
    num_nodes: int, fractions: Tuple[float, float, float], seed: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 7919)
    order = torch.randperm(num_nodes, generator=gen)
    sizes = [int(round(f * num_nodes)) for f in fractions]
    masks = []
    start = 0
    for size in sizes:
        m = torch.zeros(num_nodes, dtype=torch.bool)
        m[order[start : start + size]] = True
        masks.append(m)
        start += size
    return masks[0], masks[1], masks[2]
