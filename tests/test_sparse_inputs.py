"""A fixed sparse input times a weight runs as a sparse product (gnntrain/models/sparse_inputs.py):
the same values and gradients as the dense product, the CSR copy kept per tensor and version."""

from __future__ import annotations

import torch

from gnntrain.models import sparse_inputs
from gnntrain.models.sparse_inputs import times_weight


def _bag_of_words(n=200, f=300, density=0.02, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, f, generator=gen, dtype=torch.float64)
    return torch.where(torch.rand(n, f, generator=gen, dtype=torch.float64) < density, x, 0.0)


def test_a_sparse_fixed_input_gives_the_dense_products_values_and_gradients():
    x = _bag_of_words()
    w = torch.randn(300, 16, dtype=torch.float64, requires_grad=True)
    b = torch.randn(16, dtype=torch.float64, requires_grad=True)
    dense = torch.addmm(b, x, w)
    (dense**2).sum().backward()
    grads = (w.grad.clone(), b.grad.clone())
    w.grad = b.grad = None
    sparse = times_weight(x, w, b)
    (sparse**2).sum().backward()
    assert sparse_inputs._COPIES[id(x)][2] is not None  # it did run sparse
    assert torch.allclose(sparse, dense, rtol=1e-13, atol=1e-15)
    assert torch.allclose(w.grad, grads[0], rtol=1e-12) and torch.allclose(b.grad, grads[1])


def test_the_copy_is_kept_per_tensor_and_version_and_dense_inputs_stay_dense():
    x = _bag_of_words(seed=1)
    w = torch.randn(300, 8, dtype=torch.float64)
    times_weight(x, w)
    first = sparse_inputs._COPIES[id(x)][2]
    times_weight(x, w)
    assert sparse_inputs._COPIES[id(x)][2] is first  # kept, not copied again
    x[0, 0] = 5.0  # changed in place: a new copy with the new value
    assert torch.allclose(times_weight(x, w), x @ w)
    assert sparse_inputs._COPIES[id(x)][2] is not first
    full = torch.rand(50, 300, dtype=torch.float64)  # dense: recorded as such, multiplied dense
    times_weight(full, w)
    assert sparse_inputs._COPIES[id(full)][2] is None
    view = x[10:20]  # a view (a chunk of rows) is never kept
    assert torch.allclose(times_weight(view, w), view @ w) and id(view) not in sparse_inputs._COPIES
    key = id(x)
    del x, first, view
    assert key not in sparse_inputs._COPIES  # dropped with its tensor
