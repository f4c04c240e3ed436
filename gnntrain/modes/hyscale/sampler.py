"""Neighbour sampling: DGL's on one dedicated thread, the torch-native one on any number of pool
threads; both draw a batch from its own seed, so prefetch on and off, and any thread count, draw the
same batches."""

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

    def __init__(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        weight: torch.Tensor,
        num_nodes: int,
        fanouts: Sequence[int],
    ):
        import dgl

        self._dgl = dgl
        # edge id = position in (dst, src, weight)
        self.graph = dgl.graph((src, dst), num_nodes=num_nodes)
        self.weight = weight
        self.deg = self.graph.in_degrees().to(torch.float64)
        self.fanouts = [int(f) for f in fanouts]
        self._sampler = dgl.dataloading.NeighborSampler(self.fanouts, fused=False)

    parallel = False  # every draw runs on the process's one DGL sampling thread (see above)

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
            weight = self.weight[
                block.edata[dgl.EID]
            ].clone()  # (src, dst) factors; the dst one rescales
            weight[:, 1] *= scale[dst_local].to(weight.dtype)
            out.append(
                Block(dst_local, src_local, weight, block.num_dst_nodes(), block.num_src_nodes())
            )
        return input_nodes, out


_SAMPLING_THREAD: Optional[ThreadPoolExecutor] = None
_SAMPLING_LOCK = threading.Lock()


def _sampling_thread() -> ThreadPoolExecutor:
    """The process's one DGL sampling thread (DGL's engine numbering makes a second one draw
    a different stream from the same seed)."""
    global _SAMPLING_THREAD
    with _SAMPLING_LOCK:
        if _SAMPLING_THREAD is None:
            # no thread-count initializer: each draw sets one OpenMP thread itself (see
            # NeighborSampler)
            _SAMPLING_THREAD = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="hyscale-dgl-sampler"
            )
        return _SAMPLING_THREAD


class TorchNeighborSampler:
    """Uniform neighbour sampling without replacement over an in-edge CSR, in plain torch:
    the same draw rule as :class:`NeighborSampler` (at most ``fanout`` in-edges per node,
    -1 = all; weights rescaled by deg / sampled-deg) without DGL.

    Each draw uses its own ``torch.Generator`` seeded with the per-(trainer, batch) seed, so
    it is reproducible from any thread and with any number of intra-op threads. Without
    replacement: every candidate edge gets a uniform key and each node keeps its ``fanout``
    smallest keys, which makes every ``fanout``-subset equally likely.

    Thread-safe (``parallel = True``): the sampler pool
    (:class:`~gnntrain.modes.hyscale.pipeline.SamplerPool`) draws several batches at once on its
    threads. The global → local id scratch is per thread, and every op is a torch function that
    releases the GIL (``index_select`` rather than tensor indexing), so concurrent draws overlap.
    """

    parallel = True  # draws may run concurrently on several threads

    def __init__(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        weight: torch.Tensor,
        num_nodes: int,
        fanouts: Sequence[int],
    ):
        order = torch.argsort(dst, stable=True)
        self.indices = src[order].to(torch.int64)  # in-neighbours, grouped by destination
        self.edge_ids = order  # position in (dst, src, weight)
        counts = torch.bincount(dst, minlength=num_nodes)
        self.indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=self.indptr[1:])
        self.deg = counts.to(torch.float64)
        self.weight = weight
        self.fanouts = [int(f) for f in fanouts]
        self.num_nodes = num_nodes
        self._scratch = threading.local()  # per thread: global → local id, -1 outside a draw

    def _local(self) -> torch.Tensor:
        local = getattr(self._scratch, "local", None)
        if local is None:
            local = self._scratch.local = torch.full((self.num_nodes,), -1, dtype=torch.int64)
        return local

    def sample(self, seeds: torch.Tensor, seed: int) -> Tuple[torch.Tensor, List[Block]]:
        """(input nodes, blocks input side first) for ``seeds``; the last block's dst rows are
        ``seeds``."""
        gen = torch.Generator().manual_seed(int(seed))
        local = self._local()
        frontier = seeds.to(torch.int64)
        blocks: List[Block] = []
        for fanout in reversed(self.fanouts):  # output layer first, as DGL samples
            eids, dst_pos = self._draw(frontier, fanout, gen)
            src_global = torch.index_select(self.indices, 0, eids)
            n_dst = frontier.numel()
            local.index_copy_(0, frontier, torch.arange(n_dst))
            unseen = torch.index_select(local, 0, src_global) < 0
            new_nodes = torch.unique(src_global[unseen])  # sorted: a reproducible order
            local.index_copy_(0, new_nodes, torch.arange(n_dst, n_dst + new_nodes.numel()))
            src_local = torch.index_select(local, 0, src_global)
            src_nodes = torch.cat([frontier, new_nodes])
            local.index_fill_(0, src_nodes, -1)
            sampled = torch.bincount(dst_pos, minlength=n_dst).to(torch.float64).clamp(min=1)
            # (src, dst) factors; the dst one rescales (index_select copies: the table is not
            # touched)
            weight = torch.index_select(self.weight, 0, torch.index_select(self.edge_ids, 0, eids))
            weight[:, 1] *= torch.index_select(self.deg[frontier] / sampled, 0, dst_pos).to(
                weight.dtype
            )
            blocks.append(Block(dst_pos, src_local, weight, n_dst, src_nodes.numel()))
            frontier = src_nodes
        blocks.reverse()
        return frontier, blocks

    def _draw(
        self, nodes: torch.Tensor, fanout: int, gen: torch.Generator
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """CSR positions of the kept in-edges of ``nodes`` and, per kept edge, its node's
        position."""
        start = torch.index_select(self.indptr, 0, nodes)
        deg = torch.index_select(self.indptr, 0, nodes + 1) - start
        owner = torch.repeat_interleave(torch.arange(nodes.numel()), deg)
        first = torch.cumsum(deg, 0) - deg  # each node's first candidate
        offset = torch.arange(owner.numel()) - torch.index_select(first, 0, owner)
        eids = torch.index_select(start, 0, owner) + offset
        if fanout < 0 or owner.numel() == 0 or int(deg.max()) <= fanout:
            return eids, owner
        keys = torch.rand(owner.numel(), generator=gen, dtype=torch.float64)
        # by node, then by key: one int64 sort (the key's top 32 bits below the node), about twice
        # as fast as a float64 one; stable, so a (2^-32-likely) tie breaks by CSR position, whatever
        # the thread count
        order = torch.argsort((owner << 32) | (keys * 2.0**32).to(torch.int64), stable=True)
        rank = offset  # after sorting by node the within-node rank is the same arange
        kept = torch.zeros(owner.numel(), dtype=torch.bool)
        # the kept set, in CSR order within each node
        kept.index_fill_(0, order[rank < fanout], True)
        keep = kept.nonzero().flatten()
        return torch.index_select(eids, 0, keep), torch.index_select(owner, 0, keep)


def resolve_sampler(kind: str) -> str:
    """``auto`` is DGL's sampler where DGL imports, the torch one otherwise."""
    if kind != "auto":
        return kind
    from gnntrain.backends import dgl_available

    return "dgl" if dgl_available() else "torch"


def make_sampler(
    kind: str,
    dst: torch.Tensor,
    src: torch.Tensor,
    weight: torch.Tensor,
    num_nodes: int,
    fanouts: Sequence[int],
):
    """``kind``: auto, dgl (DGL's sampler on its dedicated thread) or torch
    (:class:`TorchNeighborSampler`)."""
    cls = NeighborSampler if resolve_sampler(kind) == "dgl" else TorchNeighborSampler
    return cls(dst, src, weight, num_nodes, fanouts)
