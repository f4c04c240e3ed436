"""Partitioners: metis (pymetis k-way), random, range, and volume (METIS +
greedy max-send-volume refinement, an approximation of the GVB partitioner of Sparsity-Aware
Communication for Distributed Graph Neural Network Training, §5; docs/design.md#partitioners).
Optional Reverse Cuthill–McKee reordering inside parts. All return a part id per node; :mod:`layout`
turns that into a relabelling with contiguous parts.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import scipy.sparse as sp

from gnntrain.errors import PlanError

PARTITIONERS = ("metis", "kaminpar", "random", "range", "volume", "ldg")


def symmetric_csr(src: np.ndarray, dst: np.ndarray, n: int) -> sp.csr_matrix:
    """Unweighted symmetric adjacency without self-loops (what METIS wants)."""
    keep = src != dst
    rows = np.concatenate([src[keep], dst[keep]])
    cols = np.concatenate([dst[keep], src[keep]])
    a = sp.csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n, n))
    a.sum_duplicates()
    a.data[:] = 1
    return a


def in_degree(dst: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(dst, minlength=n)


# METIS_OBJTYPE_CUT, METIS_OBJTYPE_VOL (total communication volume)
METIS_OBJECTIVES = {"cut": 0, "vol": 1}


def metis_parts(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    k: int,
    seed: int,
    vertex_weights: str,
    objective: str = "cut",
    row_weight: float = 0.0,
    adjacency: Optional[Tuple[np.ndarray, np.ndarray]] = None,
) -> np.ndarray:
    """METIS k-way parts; ``objective="vol"`` minimises the total communication volume instead of
    the edge cut (METIS manual §5.4, METIS_OBJTYPE_VOL: the sparsity-aware paper's volume metric).
    ``row_weight`` adds each row's dense work (in nnz-equivalents) to its nnz weight.
    ``adjacency``: the graph's symmetric CSR without self-loops or repeats (an ingested folder's
    whose reverse edges are all present), given to METIS as it is instead of ``src``/``dst``: the
    same input, so the same parts, without the edge lists."""
    import pymetis

    if objective not in METIS_OBJECTIVES:
        raise PlanError(
            "partitioner.objective", f"unknown METIS objective '{objective}'.", "use cut or vol"
        )
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    if adjacency is None:
        a = symmetric_csr(src, dst, n)
        xadj, adjncy, in_degrees = a.indptr, a.indices, lambda: in_degree(dst, n)
    else:
        xadj, adjncy = adjacency
        in_degrees = lambda: np.diff(np.asarray(xadj, dtype=np.int64))
    vweights = None
    if row_weight < 0:
        raise PlanError(
            "partitioner.row_weight",
            f"row_weight={row_weight} is negative.",
            "give a row's dense work in nnz-equivalents (>= 0)",
        )
    if vertex_weights == "nnz":
        # SpMM work of a row = its nnz (in-edges, +1 for the self-loop / own row); its update (GEMM)
        # work = row_weight nnz-equivalents. Without the latter, a power-law graph's many low-degree
        # rows all land in one part, whose dense work then sets every epoch's pace.
        vweights = (in_degrees() + 1 + int(round(row_weight))).astype(np.int64)
    opts = pymetis.Options(seed=int(seed), objtype=METIS_OBJECTIVES[objective])
    # only the k-way scheme takes the volume objective (recursive bisection always cuts edges)
    _, membership = pymetis.part_graph(
        k,
        xadj=xadj,
        adjncy=adjncy,
        vweights=vweights,
        options=opts,
        recursive=False if objective == "vol" else None,
    )
    parts = np.asarray(membership, dtype=np.int64)
    # METIS may leave a part empty on tiny graphs; every rank must own rows.
    if np.bincount(parts, minlength=k).min() == 0:
        raise PlanError(
            "partitioner",
            f"METIS left a part empty for k={k} on a {n}-node graph.",
            "use fewer ranks or partitioner=range",
        )
    return parts


def random_parts(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = np.arange(n, dtype=np.int64) % k  # balanced sizes
    rng.shuffle(parts)
    return parts


def range_parts(n: int, k: int) -> np.ndarray:
    bounds = np.linspace(0, n, k + 1).round().astype(np.int64)
    return np.repeat(np.arange(k, dtype=np.int64), np.diff(bounds))


def partition_nodes(
    src: np.ndarray, dst: np.ndarray, n: int, k: int, cfg, scratch_root=None
) -> np.ndarray:
    """Part id per node for the partitioner config ``cfg`` (KaMinPar writes its input file under
    ``scratch_root``)."""
    if k > n:
        raise PlanError(
            "world size",
            f"{k} parts requested for a graph of {n} nodes.",
            "use at most as many parts as nodes",
        )
    name = cfg.name
    objective, row_weight = (
        str(getattr(cfg, "objective", "cut")),
        float(getattr(cfg, "row_weight", 0)),
    )
    if name == "metis":
        return metis_parts(src, dst, n, k, cfg.seed, cfg.vertex_weights, objective, row_weight)
    if name == "kaminpar":  # from edge lists: a CSR with sorted rows, symmetrised on the way
        from gnntrain.partition.kaminpar import kaminpar_parts

        order = np.lexsort((src, dst))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        return kaminpar_parts(indptr, src[order], False, k, cfg, scratch_root)
    if name == "random":
        return random_parts(n, k, cfg.seed)
    if name == "range":
        return range_parts(n, k)
    if name == "ldg":  # from edge lists; partition_graph hands a CSR straight to the streaming pass
        from gnntrain.partition.streaming import csr_from_edges, ldg_parts

        return ldg_parts(*csr_from_edges(src, dst, n), k, cfg.vertex_weights, cfg.imbalance_eps)
    if name == "volume":
        parts = metis_parts(src, dst, n, k, cfg.seed, cfg.vertex_weights, objective, row_weight)
        return refine_max_send(
            src,
            dst,
            n,
            parts,
            k,
            cfg.imbalance_eps,
            cfg.max_volume_growth,
            max_moves=max(1, cfg.refine_rounds) * k * 4,
        )
    raise PlanError(
        "partitioner", f"unknown partitioner '{name}'.", f"use one of {', '.join(PARTITIONERS)}"
    )


class PartCounts:
    """counts[u, p] = how many of u's out-neighbours lie in part p, held sparsely.

    Only pairs that occur are stored, as sorted keys u*k + p with their counts: the initial ones (at
    most one per edge, so memory grows with E, not with n*k: a dense n x k matrix would need 29 GB
    for 14M nodes and 256 parts), and beside them the few pairs that refinement moves create.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, parts: np.ndarray, k: int):
        self.k = k
        # return_counts: numpy's sort path
        self.keys, counts = np.unique(  # noqa: TID251
            src.astype(np.int64) * k + parts[dst], return_counts=True
        )
        self.values = counts.astype(np.int32)
        self.row_start = np.searchsorted(self.keys, np.arange(parts.size + 1, dtype=np.int64) * k)
        self.new_keys = np.zeros(0, dtype=np.int64)  # sorted; pairs absent from keys
        self.new_values = np.zeros(0, dtype=np.int64)

    @staticmethod
    def _find(keys: np.ndarray, wanted: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        if keys.size == 0:
            return np.zeros(wanted.size, dtype=np.int64), np.zeros(wanted.size, dtype=bool)
        pos = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
        return pos, keys[pos] == wanted

    def get(self, nodes: np.ndarray, part: int) -> np.ndarray:
        """counts[nodes, part]."""
        wanted = nodes.astype(np.int64) * self.k + part
        pos, found = self._find(self.keys, wanted)
        out = np.where(found, self.values[pos], 0).astype(np.int64)
        if self.new_keys.size == 0:
            return out
        new_pos, new_found = self._find(self.new_keys, wanted)
        return np.where(new_found, self.new_values[new_pos], out)

    def row(self, u: int) -> np.ndarray:
        """counts[u, :] as a dense vector of k."""
        row = np.zeros(self.k, dtype=np.int64)
        lo, hi = self.row_start[u], self.row_start[u + 1]
        row[self.keys[lo:hi] - u * self.k] = self.values[lo:hi]
        if self.new_keys.size:
            lo, hi = np.searchsorted(self.new_keys, [u * self.k, (u + 1) * self.k])
            row[self.new_keys[lo:hi] - u * self.k] = self.new_values[lo:hi]
        return row

    def add(self, nodes: np.ndarray, part: int, amounts: np.ndarray) -> None:
        """counts[nodes, part] += amounts (nodes distinct)."""
        wanted = nodes.astype(np.int64) * self.k + part
        pos, found = self._find(self.keys, wanted)
        self.values[pos[found]] += amounts[found].astype(np.int32)
        wanted, amounts = wanted[~found], amounts[~found].astype(np.int64)
        new_pos, new_found = self._find(self.new_keys, wanted)
        self.new_values[new_pos[new_found]] += amounts[new_found]
        if (~new_found).any():
            keys = np.concatenate([self.new_keys, wanted[~new_found]])
            order = np.argsort(keys, kind="stable")
            self.new_keys = keys[order]
            self.new_values = np.concatenate([self.new_values, amounts[~new_found]])[order]

    def remote_parts(self, parts: np.ndarray, n: int) -> np.ndarray:
        """D(u) for every u: the number of other parts holding an out-neighbour of u (before any
        move)."""
        owner = self.keys // self.k
        remote = (self.values > 0) & (self.keys % self.k != parts[owner])
        return np.bincount(owner[remote], minlength=n).astype(np.int64)


def refine_max_send(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    parts: np.ndarray,
    k: int,
    eps: float,
    max_growth: float,
    max_moves: int,
    candidates: int = 48,
) -> np.ndarray:
    """Greedy refinement that lowers the maximum send volume.

    Send volume of part p = Σ_{u∈p} D(u), D(u) = number of other parts that
    hold an out-neighbour of u (u's row must be sent to each of them). Each
    step takes the heaviest sender s, evaluates moving boundary vertices u∈s
    to the part t where most of u's out-neighbours live, and applies the move
    that lowers max send the most, subject to

    * nnz balance: (max−avg)/avg of per-part nnz stays ≤ max(eps, initial);
    * total volume grows by at most ``max_growth`` of its initial value.

    Out-neighbours are read from the graph's edges src→dst; in-neighbours w→u
    are needed for the effect on other senders, so both are kept. The
    per-(node, part) counts are sparse (:class:`PartCounts`).
    """
    if k < 2:
        return parts
    parts = parts.copy()
    ones = np.ones(src.size, dtype=np.int32)
    in_adj = sp.csr_matrix((ones, (dst, src)), shape=(n, n))  # row u: the w with an edge w -> u
    in_adj.sum_duplicates()
    counts = PartCounts(src, dst, parts, k)
    d = counts.remote_parts(parts, n)
    send = np.bincount(parts, weights=d, minlength=k).astype(np.int64)
    row_nnz = in_degree(dst, n) + 1
    nnz = np.bincount(parts, weights=row_nnz, minlength=k).astype(np.int64)
    nnz_avg = nnz.sum() / k
    nnz_cap = nnz_avg * (1 + max(eps, nnz.max() / nnz_avg - 1))
    total0 = int(send.sum())
    volume_cap = total0 * (1 + max_growth)

    for _ in range(max_moves):
        s = int(np.argmax(send))
        members = np.flatnonzero((parts == s) & (d > 0))
        if members.size == 0:
            break
        # cheapest-looking first: many remote parts, few neighbours at home
        score = d[members] * 1000 - counts.get(members, s)
        members = members[np.argsort(-score, kind="stable")[:candidates]]
        best = None
        current_max = int(send.max())
        for u in members:
            row = counts.row(int(u))
            row[s] = -1
            t = int(np.argmax(row))
            delta = _move_delta(int(u), s, t, parts, counts, in_adj, k)
            new_send = send + delta
            # progress: max send drops, or stays while the heaviest sender s sheds load
            if new_send.max() > current_max or (
                new_send.max() == current_max and new_send[s] >= send[s]
            ):
                continue
            if nnz[t] + row_nnz[u] > nnz_cap:
                continue
            if new_send.sum() > volume_cap:
                continue
            key = (int(new_send.max()), int(new_send.sum()))
            if best is None or key < best[0]:
                best = (key, int(u), t)
        if best is None:
            break
        _, u, t = best
        _apply_move(u, s, t, parts, counts, d, send, in_adj)
        nnz[s] -= row_nnz[u]
        nnz[t] += row_nnz[u]
    return parts


def _in_neighbours(u: int, in_adj: sp.csr_matrix) -> Tuple[np.ndarray, np.ndarray]:
    """The w != u with edges w -> u, and each one's edge multiplicity."""
    start, end = in_adj.indptr[u], in_adj.indptr[u + 1]
    w, mult = in_adj.indices[start:end], in_adj.data[start:end]
    keep = w != u
    return w[keep], mult[keep]


def _move_delta(
    u: int, s: int, t: int, parts: np.ndarray, counts: PartCounts, in_adj: sp.csr_matrix, k: int
) -> np.ndarray:
    """Change of every part's send volume if u moves from s to t."""
    delta = np.zeros(k, dtype=np.int64)
    present = counts.row(u) > 0
    others = np.arange(k)
    delta[s] -= int((present & (others != s)).sum())
    delta[t] += int((present & (others != t)).sum())
    w, mult = _in_neighbours(u, in_adj)
    if w.size:
        pw = parts[w]
        loses_s = (counts.get(w, s) == mult) & (pw != s)  # u was w's last out-neighbour in s
        gains_t = (counts.get(w, t) == 0) & (pw != t)  # w had none in t
        np.add.at(delta, pw[loses_s], -1)
        np.add.at(delta, pw[gains_t], 1)
    return delta


def _apply_move(
    u: int,
    s: int,
    t: int,
    parts: np.ndarray,
    counts: PartCounts,
    d: np.ndarray,
    send: np.ndarray,
    in_adj: sp.csr_matrix,
) -> None:
    w, mult = _in_neighbours(u, in_adj)
    counts.add(w, s, -mult)
    counts.add(w, t, mult)
    parts[u] = t
    for v in np.concatenate([w, [u]]):
        r = counts.row(int(v)) > 0
        r[parts[v]] = False
        new_dv = int(r.sum())
        if v == u:
            send[s] -= d[u]
            send[t] += new_dv
        else:
            send[parts[v]] += new_dv - d[v]
        d[v] = new_dv


def rcm_order(src: np.ndarray, dst: np.ndarray, n: int, nodes: np.ndarray) -> np.ndarray:
    """Reverse Cuthill–McKee order of ``nodes`` (their induced subgraph)."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    local = -np.ones(n, dtype=np.int64)
    local[nodes] = np.arange(nodes.size)
    keep = (local[src] >= 0) & (local[dst] >= 0)
    sub = symmetric_csr(local[src[keep]], local[dst[keep]], nodes.size)
    return nodes[np.asarray(reverse_cuthill_mckee(sub, symmetric_mode=True), dtype=np.int64)]


def bandwidth(src: np.ndarray, dst: np.ndarray) -> int:
    """Matrix bandwidth max |row − col| of an edge list (after relabelling)."""
    return int(np.abs(src - dst).max()) if src.size else 0
