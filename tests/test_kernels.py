"""DGL's message-passing path and the torch-native CSR path agree, forward
and backward, for every model's edge weights."""
from __future__ import annotations

import pytest
import torch

from gnntrain.models import SparseAdjacency, edge_weights


def _graph(n=60, e=300, seed=0, bipartite_src=None):
    g = torch.Generator().manual_seed(seed)
    n_src = bipartite_src or n
    src = torch.randint(0, n_src, (e,), generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    return src, dst, n_src


@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dgl_and_torch_paths_agree(model, dtype):
    src, dst, n_src = _graph()
    w = edge_weights(model, src, dst, 60)
    h = torch.randn(n_src, 5, dtype=dtype, requires_grad=True)
    outs, grads = [], []
    for kernel in ("dgl", "torch"):
        adj = SparseAdjacency(dst, src, w, 60, n_src, kernel=kernel)
        assert adj.kernel == kernel
        h.grad = None
        out = adj.spmm(h)
        (out * torch.arange(out.numel(), dtype=dtype).reshape(out.shape)).sum().backward()
        outs.append(out.detach())
        grads.append(h.grad.clone())
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(outs[0], outs[1], rtol=tol, atol=tol)
    torch.testing.assert_close(grads[0], grads[1], rtol=tol, atol=tol)


def test_rectangular_block_matches_dense():
    """A halo block (more source rows than destination rows) equals the dense product."""
    src, dst, n_src = _graph(n=20, e=120, bipartite_src=35)
    w = torch.rand(src.numel(), dtype=torch.float64)
    dense = torch.zeros(20, 35, dtype=torch.float64).index_put_((dst, src), w, accumulate=True)
    h = torch.randn(35, 3, dtype=torch.float64)
    for kernel in ("dgl", "torch"):
        torch.testing.assert_close(SparseAdjacency(dst, src, w, 20, 35, kernel=kernel).spmm(h), dense @ h)


def test_gcn_weights_are_symmetric_normalisation():
    src = torch.tensor([0, 1, 1, 2, 0, 1, 2])
    dst = torch.tensor([1, 0, 2, 1, 0, 1, 2])  # with self-loops
    w = edge_weights("gcn", src, dst, 3)
    deg = torch.tensor([2.0, 3.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(w, (deg[src] * deg[dst]).rsqrt())
