"""The total-volume refinement (gnntrain/partition/connectivity.py): on any graph (repeated
neighbours, self-loops, unsorted rows) and from any start, the volumes it reports before and after
are the ones ``csr_metrics`` counts, the volume never rises, and no part grows past the balance
bound; on a graph with locality it removes nearly all of a disturbed start's volume. KaMinPar's use
of it: tests/test_kaminpar.py."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gnntrain.partition.connectivity import refine_total_volume
from gnntrain.partition.streaming import csr_metrics


def _csr(src: np.ndarray, dst: np.ndarray, n: int, sort_rows: bool):
    """Destination-sorted CSR; rows sorted by source, or in the edges' own order."""
    order = np.lexsort((src, dst)) if sort_rows else np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, src[order].astype(np.int32)


@st.composite
def partitioned_graphs(draw):
    n = draw(st.integers(2, 60))
    k = draw(st.integers(2, min(5, n)))
    m = draw(st.integers(0, 6 * n))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    parts = rng.integers(0, k, n).astype(np.int64)
    weights = None if draw(st.booleans()) else rng.integers(1, 9, n).astype(np.int64)
    eps = draw(st.sampled_from([0.0, 0.03, 0.5]))
    return n, k, src, dst, parts, weights, eps, draw(st.booleans())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(partitioned_graphs())
def test_reported_volumes_are_counted_ones_and_never_rise_within_the_bound(case):
    n, k, src, dst, parts, weights, eps, sort_rows = case
    indptr, indices = _csr(src, dst, n, sort_rows)
    w = np.ones(n, dtype=np.int64) if weights is None else weights
    start = np.bincount(parts, weights=w, minlength=k)
    bound = max(start.max(), int((1 + eps) * w.sum() / k))
    before = csr_metrics(indptr, indices, parts.copy(), k).total_volume
    result = refine_total_volume(indptr, indices, parts, k, weights, eps)
    after = csr_metrics(indptr, indices, parts, k).total_volume
    assert (result.volume_before, result.volume_after) == (before, after)
    assert after <= before
    assert parts.min() >= 0 and parts.max() < k
    assert np.bincount(parts, weights=w, minlength=k).max() <= bound


def test_a_random_start_on_a_graph_with_locality_loses_most_of_its_volume():
    rng = np.random.default_rng(0)
    n, k = 4000, 4
    src = rng.integers(0, n, 40000)
    dst = (src + rng.integers(1, 30, src.size)) % n  # a ring of near neighbours
    indptr, indices = _csr(src, dst, n, True)
    parts = (np.arange(n) * k // n).astype(np.int64)  # contiguous blocks: little volume
    strays = rng.choice(n, n // 10, replace=False)
    parts[strays] = rng.integers(0, k, strays.size)  # a tenth of the nodes anywhere
    result = refine_total_volume(indptr, indices, parts, k, None, 0.03)
    assert result.moves > 0 and result.passes >= 2
    assert result.volume_after < 0.1 * result.volume_before, result
