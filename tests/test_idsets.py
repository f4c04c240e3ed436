"""gnntrain.idsets: the sort-based unique and union return what numpy's do."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gnntrain.idsets import union_ids, unique_ids

IDS = st.sampled_from([np.int32, np.int64, np.uint8]).flatmap(
    lambda dtype: arrays(dtype, st.integers(0, 60), elements=st.integers(0, 40))
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(IDS)
def test_unique_ids_is_numpys_unique(values):
    got = unique_ids(values)
    want = np.unique(values)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(IDS, min_size=1, max_size=4))
def test_union_ids_is_numpys_union(parts):
    got = union_ids(*parts)
    want = parts[0] if len(parts) == 1 else np.union1d(parts[0], parts[1])
    for more in parts[2:]:
        want = np.union1d(want, more)
    np.testing.assert_array_equal(got, np.unique(want))
    assert got.dtype == np.concatenate(parts).dtype


def test_a_two_dimensional_array_and_no_arrays():
    np.testing.assert_array_equal(unique_ids(np.array([[3, 1], [3, 2]])), [1, 2, 3])
    assert union_ids().size == 0 and union_ids().dtype == np.int64
