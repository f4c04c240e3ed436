"""The compiled loops of :mod:`gnntrain.partition.connectivity` (imported only when a refinement
runs: numba loads here, not on the rank path). Net u is {u} ∪ out(u); row v of the
destination-sorted CSR lists v's in-neighbours, the nets that hold v besides its own. Repeated
neighbours (adjacent in a sorted row) and self-loops count once; a neighbour listed twice apart (an
unsorted row) counts as two pins, which keeps the table consistent and makes a gain an
underestimate, so a move made never raises the volume."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def pin_counts(indptr, indices, parts, lo, hi, phi):  # pragma: no cover - compiled
    """Add rows lo..hi's pins to ``phi``: v is a pin of its own net and of each in-neighbour's."""
    for v in range(lo, hi):
        pv = parts[v]
        phi[v, pv] += 1
        last = -1
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u != v and u != last:
                phi[u, pv] += 1
            last = u


@njit(cache=True, nogil=True)
def volume(phi):  # pragma: no cover - compiled
    """Σ_u (λ(u) − 1): the parts each net touches, less its own."""
    total = 0
    for u in range(phi.shape[0]):
        for p in range(phi.shape[1]):
            if phi[u, p] > 0:
                total += 1
        total -= 1
    return total


@njit(cache=True, nogil=True)
def leave_gain(indptr, indices, phi, v, a):  # pragma: no cover - compiled
    """Nets where v is part a's only pin: each loses a part if v leaves a."""
    gain = 1 if phi[v, a] == 1 else 0
    last = -1
    for e in range(indptr[v], indptr[v + 1]):
        u = indices[e]
        if u != v and u != last and phi[u, a] == 1:
            gain += 1
        last = u
    return gain


@njit(cache=True, nogil=True)
def join_penalties(indptr, indices, phi, v, penalty):  # pragma: no cover - compiled
    """Per part p, the nets holding v that do not touch p yet: each gains a part if v joins p."""
    k = phi.shape[1]
    for p in range(k):
        penalty[p] = 1 if phi[v, p] == 0 else 0
    last = -1
    for e in range(indptr[v], indptr[v + 1]):
        u = indices[e]
        if u != v and u != last:
            for p in range(k):
                if phi[u, p] == 0:
                    penalty[p] += 1
        last = u


@njit(cache=True, nogil=True)
def move(indptr, indices, parts, phi, v, a, b):  # pragma: no cover - compiled
    """Move v from part a to b, its pins with it."""
    parts[v] = b
    phi[v, a] -= 1
    phi[v, b] += 1
    last = -1
    for e in range(indptr[v], indptr[v + 1]):
        u = indices[e]
        if u != v and u != last:
            phi[u, a] -= 1
            phi[u, b] += 1
        last = u


@njit(cache=True, nogil=True)
def refine_pass(indptr, indices, parts, phi, node_w, part_w, max_w):  # pragma: no cover
    """One label-propagation pass over every node in id order, each to the part that lowers the
    volume most within ``max_w``; the number of moves."""
    n, k = phi.shape
    penalty = np.zeros(k, dtype=np.int64)
    moves = 0
    for v in range(n):
        a = parts[v]
        base = leave_gain(indptr, indices, phi, v, a)
        if base == 0:  # no move can gain: a penalty is never negative
            continue
        join_penalties(indptr, indices, phi, v, penalty)
        best, best_gain = -1, 0
        for p in range(k):
            if p != a and base - penalty[p] > best_gain and part_w[p] + node_w[v] <= max_w:
                best, best_gain = p, base - penalty[p]
        if best >= 0:
            move(indptr, indices, parts, phi, v, a, best)
            part_w[a] -= node_w[v]
            part_w[best] += node_w[v]
            moves += 1
    return moves
