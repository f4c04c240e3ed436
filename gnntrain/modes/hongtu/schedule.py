"""Sweeps over the chunk batches: what each rank loads, keeps, exchanges and flushes at
each step (HongTu Algorithm 1 with the §5 deduplication)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Set

import numpy as np
import torch

from gnntrain.idsets import union_ids
from gnntrain.partition.chunks import ChunkLayout

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.models.registry import ModelFamily


def _as_index(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def _positions(sorted_ids: np.ndarray, ids: np.ndarray) -> torch.Tensor:
    return _as_index(np.searchsorted(sorted_ids, ids))


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.int64)


@dataclass
class Step:
    """What one rank does at one position of a sweep over the batches.

    ``resident`` is D_t, the sorted rows the device holds (own or foreign);
    ``kept_*`` are the rows of D_{t−1} ∩ D_t that stay (reuse). Forward
    sweeps use the *arrival* fields (rows that come in: own host loads, and
    rows from other ranks), backward sweeps the *eviction* fields (rows that
    leave: own rows to the host, foreign rows to their owner).
    """

    chunk: int
    resident: np.ndarray
    need_pos: Optional[torch.Tensor]  # N_t within D_t (None when D_t == N_t)
    kept_prev: torch.Tensor
    kept_now: torch.Tensor
    # arrivals
    load_rows: torch.Tensor  # own host rows loaded (local index)
    load_pos: torch.Tensor
    # rows this rank hands each rank (from its device with p2p, else its host)
    give_counts: List[int]
    give_index: torch.Tensor  # positions in D_t (p2p) or own host rows (no p2p), by destination
    take_counts: List[int]
    take_pos: torch.Tensor  # positions in D_t of rows from other ranks, by source
    # evictions
    flush_pos: torch.Tensor  # own rows leaving the device → own host (⊕-add)
    flush_rows: torch.Tensor
    send_counts: List[int]  # foreign rows leaving the device, by owner
    send_pos: torch.Tensor
    recv_counts: List[int]
    recv_index: torch.Tensor  # positions in D_t (p2p) or own host rows (no p2p), by source


@dataclass
class Sweep:
    steps: List[Step]
    p2p: bool
    needs_exchange: bool  # some rank moves rows between ranks during this sweep


def build_sweep(layout: ChunkLayout, order: np.ndarray, rank: int, dedup: str) -> Sweep:
    """Rank ``rank``'s steps over the batches in ``order`` (rows of chunk indices per partition)."""
    m = layout.num_parts
    p2p, reuse = "p2p" in dedup, "reuse" in dedup
    po = layout.part_offsets
    lo = int(po[rank])
    need = [[layout.neighbours[layout.chunk(k, int(row[k]))] for k in range(m)] for row in order]

    def split_by_owner(rows: np.ndarray) -> List[np.ndarray]:
        cuts = np.searchsorted(rows, po)
        return [rows[cuts[k] : cuts[k + 1]] for k in range(m)]

    resident: List[List[np.ndarray]] = []  # D[t][k]
    for sets in need:
        if p2p:
            union = union_ids(*sets)
            owned = split_by_owner(union)  # L_k,t = U_t ∩ own_k
            resident.append([union_ids(sets[k], owned[k]) for k in range(m)])
        else:
            resident.append(list(sets))
    steps_t = len(order)

    def kept(k: int, t: int) -> np.ndarray:
        if not reuse or t == 0:
            return _empty()
        return np.intersect1d(resident[t - 1][k], resident[t][k], assume_unique=True)

    def arrivals(k: int, t: int) -> List[np.ndarray]:
        return split_by_owner(np.setdiff1d(resident[t][k], kept(k, t), assume_unique=True))

    def evictions(k: int, t: int) -> List[np.ndarray]:
        if reuse and t + 1 < steps_t:
            return split_by_owner(
                np.setdiff1d(resident[t][k], resident[t + 1][k], assume_unique=True)
            )
        return split_by_owner(resident[t][k])

    # every rank takes part in an exchange if any rank holds a row it does not own
    moves = m > 1 and any(
        np.any((d < po[k]) | (d >= po[k + 1])) for sets in resident for k, d in enumerate(sets)
    )
    steps = []
    for t in range(steps_t):
        d_t = resident[t][rank]
        mine = need[t][rank]
        kept_rows = kept(rank, t)
        prev = resident[t - 1][rank] if t else _empty()
        arrive = arrivals(rank, t)
        others_arrive = [arrivals(k, t)[rank] if k != rank else _empty() for k in range(m)]
        evict = evictions(rank, t)
        others_evict = [evictions(k, t)[rank] if k != rank else _empty() for k in range(m)]
        give = [others_arrive[k] for k in range(m)]
        take = [arrive[k] if k != rank else _empty() for k in range(m)]
        send = [evict[k] if k != rank else _empty() for k in range(m)]
        recv = others_evict
        give_all = np.concatenate(give)
        recv_all = np.concatenate(recv)
        steps.append(
            Step(
                chunk=layout.chunk(rank, int(order[t][rank])),
                resident=d_t,
                need_pos=None if d_t.size == mine.size else _positions(d_t, mine),
                kept_prev=_positions(prev, kept_rows),
                kept_now=_positions(d_t, kept_rows),
                load_rows=_as_index(arrive[rank] - lo),
                load_pos=_positions(d_t, arrive[rank]),
                give_counts=[x.size for x in give],
                give_index=_positions(d_t, give_all) if p2p else _as_index(give_all - lo),
                take_counts=[x.size for x in take],
                take_pos=_positions(d_t, np.concatenate(take)),
                flush_pos=_positions(d_t, evict[rank]),
                flush_rows=_as_index(evict[rank] - lo),
                send_counts=[x.size for x in send],
                send_pos=_positions(d_t, np.concatenate(send)),
                recv_counts=[x.size for x in recv],
                recv_index=_positions(d_t, recv_all) if p2p else _as_index(recv_all - lo),
            )
        )
    return Sweep(steps=steps, p2p=p2p, needs_exchange=bool(moves))


def epoch_traffic(
    layout: ChunkLayout,
    batches: np.ndarray,
    dedup: str,
    model: "ModelFamily",
    dims: List[int],
    value_bytes: int,
    input_kept: bool = False,
) -> Dict[str, int]:
    """Bytes one training epoch moves, all ranks, by ledger kind (``h2d``, ``d2h``, ``peer``, and
    the avoided ``reused``), read off every rank's sweeps: what
    :class:`~gnntrain.modes.hongtu.engine.HongTuEngine` records, known once the graph is chunked.

    Per layer l (input width d_l): forward loads the sweep's arrivals at d_l (own rows from the
    host, others' rows from their device with p2p, else from their host) and writes the chunk
    outputs (d_l+1) and, for cached models, the aggregation (d_l) to the host; backward loads the
    output gradient (d_l+1) and the cached aggregation (plus the own input row for SAGE/GIN; GAT
    instead re-gathers like forward), then, for l > 0, hands the gradient rows leaving each device
    to their owner (peer, or d2h) and flushes its own (d2h). Reuse counts the rows a carried device
    buffer kept.

    ``input_kept`` (train.cache_input_aggregation, the steady epochs after the first): the first
    layer's forward loads its own rows of the kept A·x (and of x where the update reads the row
    itself) instead of gathering, and writes no cache.
    """
    p2p, cached, self_row = "p2p" in dedup, model.elementwise, model.self_row
    moved = {"h2d": 0, "d2h": 0, "peer": 0, "reused": 0}
    exchange_in, exchange_out = ("peer", "peer") if p2p else ("h2d", "d2h")
    for rank in range(layout.num_parts):
        fwd, bwd = (build_sweep(layout, order, rank, dedup) for order in (batches, batches[::-1]))
        own = int(layout.part_offsets[rank + 1] - layout.part_offsets[rank])
        kept_f, loaded_f, given_f = _sweep_rows(fwd, "kept_now", "load_rows", "give_counts")
        kept_b, loaded_b, given_b, sent_b, flushed_b = _sweep_rows(
            bwd, "kept_now", "load_rows", "give_counts", "send_counts", "flush_rows"
        )
        for layer, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
            if layer == 0 and input_kept and cached:
                moved["h2d"] += own * d_in * (2 if self_row else 1) + own * d_out
                moved["d2h"] += own * d_out
            else:
                moved["reused"] += kept_f * d_in
                moved["h2d"] += loaded_f * d_in + own * d_out
                moved[exchange_in] += given_f * d_in
                moved["d2h"] += own * (d_out + (d_in if cached else 0))
            if cached:
                moved["h2d"] += own * d_in * (2 if self_row else 1)
            else:  # GAT's backward re-gathers the neighbour rows
                moved["reused"] += kept_b * d_in
                moved["h2d"] += loaded_b * d_in
                moved[exchange_in] += given_b * d_in
            if layer > 0:  # the input gradient: accumulated on the device, handed on and flushed
                moved["reused"] += kept_b * d_in
                moved[exchange_out] += sent_b * d_in
                moved["d2h"] += flushed_b * d_in
    return {kind: rows * value_bytes for kind, rows in moved.items()}


def disk_traffic(
    layout: ChunkLayout,
    batches: np.ndarray,
    dedup: str,
    model: "ModelFamily",
    dims: List[int],
    value_bytes: int,
    on_disk: Set[str],
    input_kept: bool = False,
) -> Dict[str, int]:
    """Bytes one training epoch reads from and writes to the disk tier, all ranks: the rows of
    :func:`epoch_traffic` whose host side is a table in ``on_disk`` (names of :mod:`.tiers`; the
    input features, the logits and their gradient stay on the host). A ⊕-add reads and writes its
    rows. With ``input_kept`` the first layer's cache is read in forward too and written only by the
    first epoch."""
    p2p, cached, self_row = "p2p" in dedup, model.elementwise, model.self_row
    layers = len(dims) - 1
    io = {"disk_read": 0, "disk_write": 0}
    for rank in range(layout.num_parts):
        fwd, bwd = (build_sweep(layout, order, rank, dedup) for order in (batches, batches[::-1]))
        own = int(layout.part_offsets[rank + 1] - layout.part_offsets[rank])
        loaded_f, given_f = _sweep_rows(fwd, "load_rows", "give_counts")
        loaded_b, given_b, sent_b, flushed_b = _sweep_rows(
            bwd, "load_rows", "give_counts", "send_counts", "flush_rows"
        )
        for layer, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
            act_in = f"act{layer}" in on_disk
            gathered = (loaded_f + (0 if p2p else given_f)) + (
                0 if cached else loaded_b + (0 if p2p else given_b)
            )
            io["disk_read"] += (
                (gathered + (own if cached and self_row else 0)) * d_in if act_in else 0
            )
            if layer + 1 < layers and f"act{layer + 1}" in on_disk:
                io["disk_write"] += own * d_out
            # backward reads the output gradient
            if layer + 1 < layers and f"grad{layer + 1}" in on_disk:
                io["disk_read"] += own * d_out
            if cached and f"cache{layer}" in on_disk:  # written forward, read backward
                kept_input = layer == 0 and input_kept  # read forward instead of written
                io["disk_write"] += 0 if kept_input else own * d_in
                io["disk_read"] += own * d_in * (2 if kept_input else 1)
            if layer > 0 and f"grad{layer}" in on_disk:
                added = flushed_b + (0 if p2p else sent_b)
                io["disk_read"] += added * d_in
                io["disk_write"] += added * d_in
    return {kind: rows * value_bytes for kind, rows in io.items()}


def _sweep_rows(sweep: Sweep, *fields: str) -> List[int]:
    """Rows summed over a sweep's steps, one total per Step field (index tensors or per-rank
    counts)."""

    def rows(value) -> int:
        return int(value.numel()) if isinstance(value, torch.Tensor) else int(sum(value))

    return [sum(rows(getattr(step, name)) for step in sweep.steps) for name in fields]
