"""Neighbour sampling on one dedicated thread, so that prefetch on and off draw the same batches."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch


@dataclass
class Block:
    """One sampled layer: edges (dst, src) in local ids, src rows = dst rows first."""

    dst: torch.Tensor
    src: torch.Tensor
    weight: torch.Tensor
    num_dst: int
    num_src: int


class NeighborSampler:
    """DGL's ``dgl.dataloading.NeighborSampler`` (uniform, without replacement, at most
    ``fanout`` in-edges per node, -1 = all), turned into :class:`Block` s whose edge weights
    are the global-degree weights rescaled by deg / sampled-deg (the unbiased estimate of
    the full aggregation; exact with fanout -1).

    Reproducibility (checked with DGL 2.1): DGL draws from a per-OS-thread engine whose
    stream depends on ``dgl.seed`` *and* on which thread draws (engines are numbered in
    the order threads first use one), and its OpenMP workers race for those numbers. So
    every draw in the process runs on one dedicated thread (:func:`_sampling_thread`) with
    one OpenMP thread, reseeded per batch: the serial loop and the prefetch thread of a
    trainer process, and a resumed run, get the same batches.

    The thread count is set again before every draw. DGL and torch share one OpenMP
    runtime, and torch's first parallel op on a thread resets that thread's count to
    ``torch.set_num_threads``'s value; with 2 threads DGL's NeighborSampler switches to its
    fused kernel, which draws differently, and OpenMP workers join the engine race. (That
    made a run's first batch differ from every later run's in the same process.) ``fused``
    is off for the same reason.
    """

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor, num_nodes: int,
                 fanouts: Sequence[int]):
        import dgl

        self._dgl = dgl
        self.graph = dgl.graph((src, dst), num_nodes=num_nodes)  # edge id = position in (dst, src, weight)
        self.weight = weight
        self.deg = self.graph.in_degrees().to(torch.float64)
        self.fanouts = [int(f) for f in fanouts]
        self._sampler = dgl.dataloading.NeighborSampler(self.fanouts, fused=False)

    def sample(self, seeds: torch.Tensor, seed: int) -> Tuple[torch.Tensor, List[Block]]:
        """(input nodes, blocks input side first) for ``seeds``, drawn with DGL seed ``seed``;
        the last block's dst rows are ``seeds``."""
        return _sampling_thread().submit(self._draw, seeds, seed).result()

    def _draw(self, seeds: torch.Tensor, seed: int) -> Tuple[torch.Tensor, List[Block]]:
        dgl = self._dgl
        dgl.utils.set_num_threads(1)
        dgl.seed(seed)
        input_nodes, _, blocks = self._sampler.sample_blocks(self.graph, seeds)
        out = []
        for block in blocks:
            src_local, dst_local = block.edges()
            dst_global = block.dstdata[dgl.NID]
            sampled = block.in_degrees().to(torch.float64).clamp(min=1)
            scale = self.deg[dst_global] / sampled
            weight = self.weight[block.edata[dgl.EID]].clone()  # (src, dst) factors; the dst one rescales
            weight[:, 1] *= scale[dst_local].to(weight.dtype)
            out.append(Block(dst_local, src_local, weight, block.num_dst_nodes(), block.num_src_nodes()))
        return input_nodes, out


_SAMPLING_THREAD: Optional[ThreadPoolExecutor] = None
_SAMPLING_LOCK = threading.Lock()


def _sampling_thread() -> ThreadPoolExecutor:
    """The process's one DGL sampling thread (DGL's engine numbering makes a second one draw
    a different stream from the same seed)."""
    global _SAMPLING_THREAD
    with _SAMPLING_LOCK:
        if _SAMPLING_THREAD is None:
            # no thread-count initializer: each draw sets one OpenMP thread itself (see NeighborSampler)
            _SAMPLING_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hyscale-dgl-sampler")
        return _SAMPLING_THREAD




class TorchNeighborSampler:
    """Uniform neighbour sampling without replacement over an in-edge CSR, in plain torch:
    the same draw rule as :class:`NeighborSampler` (at most ``fanout`` in-edges per node,
    -1 = all; weights rescaled by deg / sampled-deg) without DGL.

    Each draw uses its own ``torch.Generator`` seeded with the per-(trainer, batch) seed, so
    it is reproducible from any thread; no dedicated sampling thread is needed. Without
    replacement: every candidate edge gets a uniform key and each node keeps its ``fanout``
    smallest keys, which makes every ``fanout``-subset equally likely.
    """

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor, num_nodes: int,
                 fanouts: Sequence[int]):
        order = torch.argsort(dst, stable=True)
        self.indices = src[order]  # in-neighbours, grouped by destination
        self.edge_ids = order  # position in (dst, src, weight)
        counts = torch.bincount(dst, minlength=num_nodes)
        self.indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=self.indptr[1:])
        self.deg = counts.to(torch.float64)
        self.weight = weight
        self.fanouts = [int(f) for f in fanouts]
        self._local = torch.full((num_nodes,), -1, dtype=torch.int64)  # global → local id, reset after use

    def sample(self, seeds: torch.Tensor, seed: int) -> Tuple[torch.Tensor, List[Block]]:
        """(input nodes, blocks input side first) for ``seeds``; the last block's dst rows are ``seeds``."""
        gen = torch.Generator().manual_seed(int(seed))
        frontier = seeds.to(torch.int64)
        blocks: List[Block] = []
        for fanout in reversed(self.fanouts):  # output layer first, as DGL samples
            eids, dst_pos = self._draw(frontier, fanout, gen)
            src_global = self.indices[eids]
            self._local[frontier] = torch.arange(frontier.numel())
            unseen = self._local[src_global] < 0
            new_nodes = torch.unique(src_global[unseen])  # sorted: a reproducible order
            self._local[new_nodes] = torch.arange(frontier.numel(), frontier.numel() + new_nodes.numel())
            src_local = self._local[src_global]
            src_nodes = torch.cat([frontier, new_nodes])
            self._local[src_nodes] = -1
            sampled = torch.bincount(dst_pos, minlength=frontier.numel()).to(torch.float64).clamp(min=1)
            weight = self.weight[self.edge_ids[eids]].clone()  # (src, dst) factors; the dst one rescales
            weight[:, 1] *= (self.deg[frontier] / sampled)[dst_pos].to(weight.dtype)
            blocks.append(Block(dst_pos, src_local, weight, frontier.numel(), src_nodes.numel()))
            frontier = src_nodes
        blocks.reverse()
        return frontier, blocks

    def _draw(self, nodes: torch.Tensor, fanout: int, gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
        """CSR positions of the kept in-edges of ``nodes`` and, per kept edge, its node's position."""
        start, deg = self.indptr[nodes], self.indptr[nodes + 1] - self.indptr[nodes]
        owner = torch.repeat_interleave(torch.arange(nodes.numel()), deg)
        offset = torch.arange(owner.numel()) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)
        eids = start[owner] + offset
        if fanout < 0 or owner.numel() == 0 or int(deg.max()) <= fanout:
            return eids, owner
        keys = torch.rand(owner.numel(), generator=gen, dtype=torch.float64)
        order = torch.argsort(owner.to(torch.float64) * 2.0 + keys)  # by node, then by key
        rank = offset  # after sorting by node the within-node rank is the same arange
        keep = order[rank < fanout]
        keep = keep.sort().values  # CSR order within each node
        return eids[keep], owner[keep]


def resolve_sampler(kind: str) -> str:
    """``auto`` is DGL's sampler where DGL imports, the torch one otherwise."""
    if kind != "auto":
        return kind
    from gnntrain.backends import dgl_available

    return "dgl" if dgl_available() else "torch"


def make_sampler(kind: str, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor, num_nodes: int,
                 fanouts: Sequence[int]):
    """``kind``: auto, dgl (DGL's sampler on its dedicated thread) or torch (:class:`TorchNeighborSampler`)."""
    cls = NeighborSampler if resolve_sampler(kind) == "dgl" else TorchNeighborSampler
    return cls(dst, src, weight, num_nodes, fanouts)
