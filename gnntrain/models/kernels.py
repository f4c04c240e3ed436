"""Weighted sparse aggregation kernels: out[v] = Σ_{u→v} w_uv · h[u].

Two interchangeable paths behind :class:`SparseAdjacency`:

* ``dgl``: DGL's fused ``u_mul_e_sum`` SpMM on a bipartite block (CPU default;
  DGL from PyPI is CPU-only).
* ``torch``: torch-native CSR SpMM with an explicit transpose for backward,
  usable on CUDA devices without a DGL build.

DGL is imported lazily, only when the ``dgl`` path is used.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch


def resolve_kernel(kernel: str, device: torch.device) -> str:
    if kernel == "auto":
        return "dgl" if device.type == "cpu" and dgl_available() else "torch"
    return kernel


def dgl_available() -> bool:
    try:
        import dgl  # noqa: F401
    except Exception:  # pragma: no cover - depends on the install
        return False
    return True


def _csr(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, shape) -> torch.Tensor:
    order = torch.argsort(rows * shape[1] + cols)
    rows, cols, vals = rows[order], cols[order], vals[order]
    crow = torch.zeros(shape[0] + 1, dtype=torch.int64, device=rows.device)
    crow[1:] = torch.cumsum(torch.bincount(rows, minlength=shape[0]), 0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, cols, vals, size=shape)


class _CsrSpmm(torch.autograd.Function):
    """y = A·x with dL/dx = Aᵀ·dL/dy; A and Aᵀ are prebuilt CSR tensors."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, a: torch.Tensor, a_t: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.a_t = a_t
        return a @ x

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        return ctx.a_t @ grad_out.contiguous(), None, None


class SparseAdjacency:
    """A weighted bipartite adjacency from ``num_src`` source rows to ``num_dst`` rows.

    ``dst``/``src`` index the destination and source spaces; ``weight`` holds
    one value per edge (global normalisation already applied).
    """

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor,
                 num_dst: int, num_src: int, kernel: str = "auto",
                 device: Optional[torch.device] = None):
        self.device = device or torch.device("cpu")
        self.kernel = resolve_kernel(kernel, self.device)
        self.num_dst, self.num_src = int(num_dst), int(num_src)
        self.num_edges = int(dst.numel())
        self._weights = {}
        self._dst, self._src = dst.to(self.device), src.to(self.device)
        self._weight = weight
        if self.kernel == "dgl":
            import dgl

            self._block = dgl.create_block((src, dst), num_src_nodes=self.num_src, num_dst_nodes=self.num_dst)
        elif self.kernel == "torch":
            self._csr_cache = {}
        else:
            raise ValueError(f"unknown kernel {kernel!r}; use auto, dgl or torch")

    def _weight_as(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in self._weights:
            self._weights[dtype] = self._weight.to(device=self.device, dtype=dtype)
        return self._weights[dtype]

    def _csr_pair(self, dtype: torch.dtype):
        if dtype not in self._csr_cache:
            w = self._weight_as(dtype)
            a = _csr(self._dst, self._src, w, (self.num_dst, self.num_src))
            a_t = _csr(self._src, self._dst, w, (self.num_src, self.num_dst))
            self._csr_cache[dtype] = (a, a_t)
        return self._csr_cache[dtype]

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return self.spmm(h)

    def edge_index(self):
        """(dst, src) on the device: for aggregations that weigh edges themselves (GAT)."""
        return self._dst, self._src

    def spmm(self, h: torch.Tensor) -> torch.Tensor:
        if h.shape[0] != self.num_src:
            raise ValueError(f"aggregation expects {self.num_src} source rows, got {h.shape[0]}")
        if self.kernel == "dgl":
            import dgl

            w = self._weight_as(h.dtype)
            return dgl.ops.u_mul_e_sum(self._block, h, w.unsqueeze(-1))
        a, a_t = self._csr_pair(h.dtype)
        return _CsrSpmm.apply(h, a, a_t)

    def flops(self, width: int) -> int:
        """Multiply-adds of one SpMM at feature width ``width`` (2 per edge and column)."""
        return 2 * self.num_edges * int(width)
