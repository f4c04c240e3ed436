"""Sparse aggregation kernels: out[v] = Σ_{u→v} w_uv · h[u].

GCN's D^-1/2 (A+I) D^-1/2, SAGE-mean's 1/in-degree and GIN's sum all factor
as w_uv = src_scale[u] · dst_scale[v] (see :mod:`gnntrain.models.norm`), so
the aggregation is a source-row scale, an *unweighted* SpMM and a
destination-row scale, as DGL's ``GraphConv`` computes it. The unweighted
SpMM is several times faster than the edge-weighted one on CPU (DGL's
``copy_u_sum`` against ``u_mul_e_sum``: docs/BENCHMARKS.md, ``kernels``).
Edge weights that do not factor (a future edge-weighted model) keep the
weighted kernel.

Three interchangeable SpMM paths behind :class:`SparseAdjacency`:

* ``native``: gnntrain's own CPU kernel (:mod:`gnntrain.models._native`; C compiled at first
  use, or numba where no compiler works): scale → SpMM → scale fused in one pass, forward and
  backward;
* ``dgl``: DGL's ``copy_u_sum`` / ``u_mul_e_sum`` on a bipartite block
  (CPU only: DGL from PyPI has no CUDA build; the ``dgl`` extra);
* ``torch``: torch-native CSR SpMM with a prebuilt transpose for backward
  (cuSPARSE on CUDA).

``kernel=auto`` is resolved by :func:`gnntrain.models.kernel_choice.choose_kernel`, which times
every path that runs here on a graph of the run's average degree, feature width, dtype and thread
count, and caches the result per host. DGL is imported lazily.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections import Counter
from typing import Dict, Optional, Tuple

import torch

from gnntrain.backends import dgl_available
from gnntrain.models._native import NativeSpmm

KERNELS = ("dgl", "native", "torch")
# SpMMs run in this process by path: "unweighted" (row scales) | "weighted"
SPMM_CALLS: Counter = Counter()


def kernel_problem(kernel: str, device: str, dtype: torch.dtype) -> Optional[str]:
    """Why ``kernel`` cannot aggregate ``dtype`` rows on ``device`` (None: it can).

    Probed with a 2×2 product, so the answer is the installed build's, not a list kept by hand."""
    if kernel not in KERNELS:
        return f"unknown kernel {kernel!r}; use auto, {' or '.join(KERNELS)}"
    if kernel == "dgl":
        if device != "cpu":
            return "the DGL kernel path is CPU-only in this stack (PyPI DGL has no CUDA build)"
        if not dgl_available():
            return "DGL is not installed (or does not import with this torch)"
    if kernel == "native":
        from gnntrain.models._native import SUPPORTED_DTYPES, native_problem

        if device != "cpu":
            return "the native kernel is CPU-only (on CUDA, torch's CSR path runs cuSPARSE)"
        if dtype not in SUPPORTED_DTYPES:
            name = str(dtype).replace("torch.", "")
            return f"the native kernel computes in float32 or float64, not {name}"
        problem = native_problem()
        if problem is not None:
            return problem
    try:
        adj = SparseAdjacency(
            torch.tensor([0, 1]),
            torch.tensor([1, 0]),
            torch.ones(2, dtype=torch.float64),
            2,
            2,
            kernel=kernel,
            device=torch.device(device),
        )
        adj.spmm(torch.ones(2, 1, dtype=dtype, device=device))
    except Exception as exc:  # the build's own refusal, e.g. "not implemented for 'Half'"
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        name = str(dtype).replace("torch.", "")
        return f"the {kernel} kernel does not support {name} on {device}: {first_line}"
    return None


def _unit_csr(
    rows: torch.Tensor,
    cols: torch.Tensor,
    values: Optional[torch.Tensor],
    shape: Tuple[int, int],
    dtype: torch.dtype,
) -> torch.Tensor:
    """CSR of (rows, cols) with ``values`` (ones if None); duplicate entries are summed."""
    vals = (
        torch.ones(rows.numel(), dtype=dtype, device=rows.device)
        if values is None
        else values.to(dtype)
    )
    coo = torch.sparse_coo_tensor(
        torch.stack([rows, cols]), vals, shape, check_invariants=False
    ).coalesce()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return coo.to_sparse_csr()


class _CsrSpmm(torch.autograd.Function):
    """y = A·x with dL/dx = Aᵀ·dL/dy; A and Aᵀ are prebuilt CSR tensors."""

    @staticmethod
    # type: ignore[override]
    def forward(ctx, x: torch.Tensor, a: torch.Tensor, a_t: torch.Tensor) -> torch.Tensor:
        ctx.a_t = a_t
        return a @ x

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
        # a streamed adjacency builds it on demand
        a_t = ctx.a_t() if callable(ctx.a_t) else ctx.a_t
        return a_t.to(grad_out.device) @ grad_out.contiguous(), None, None


def _row_scale(
    index: torch.Tensor, per_edge: torch.Tensor, rows: int
) -> Tuple[bool, Optional[torch.Tensor]]:
    """The per-row factor behind ``per_edge`` (indexed by ``index``): (consistent, scale or None if
    all ones)."""
    if per_edge.numel() == 0 or bool((per_edge == 1).all()):
        return True, None
    scale = torch.zeros(rows, dtype=per_edge.dtype, device=per_edge.device).index_put_(
        (index,), per_edge
    )
    return bool(torch.equal(scale[index], per_edge)), scale


class SparseAdjacency:
    """A bipartite adjacency from ``num_src`` source rows to ``num_dst`` destination rows.

    ``dst``/``src`` index the destination and source spaces. ``weight`` is
    either one value per edge (E,), or the factors (E, 2) = (src_scale[u],
    dst_scale[v]) of each edge's weight (:func:`gnntrain.models.norm.edge_weights`;
    global normalisation already applied). Factors that are one value per row
    (what every model's normalisation gives) take the unweighted SpMM between
    two row scales; otherwise their products take the weighted one.
    """

    def __init__(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        weight: torch.Tensor,
        num_dst: int,
        num_src: int,
        kernel: str = "torch",
        device: Optional[torch.device] = None,
    ):
        self.device = device or torch.device("cpu")
        if kernel not in KERNELS:
            raise ValueError(
                f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)} "
                "(the plan resolves auto)"
            )
        self.kernel = kernel
        self.num_dst, self.num_src = int(num_dst), int(num_src)
        self.num_edges = int(dst.numel())
        self._dst, self._src = dst.to(self.device), src.to(self.device)
        self.weight = weight  # as given, so the adjacency can be rebuilt on another device
        w = weight.to(self.device)
        self.separable = w.dim() == 2
        self._src_scale = self._dst_scale = self._edge_weight = None
        if self.separable:
            src_ok, self._src_scale = _row_scale(self._src, w[:, 0], self.num_src)
            dst_ok, self._dst_scale = _row_scale(self._dst, w[:, 1], self.num_dst)
            self.separable = src_ok and dst_ok
            if not self.separable:
                self._src_scale = self._dst_scale = None
                w = w[:, 0] * w[:, 1]
        if not self.separable:
            self._edge_weight = w
        self._by_dtype: Dict[torch.dtype, tuple] = {}
        self._streamed: Dict[
            torch.dtype, tuple
        ] = {}  # streamed_to's host-side operands, pinned on CUDA
        if self.kernel == "dgl":
            os.environ.setdefault("DGLBACKEND", "pytorch")
            import dgl

            self._block = dgl.create_block(
                (self._src, self._dst), num_src_nodes=self.num_src, num_dst_nodes=self.num_dst
            )
        self._native = None
        if self.kernel == "native":
            from gnntrain.models._native import NativeCsr

            self._native = NativeCsr(
                self._dst, self._src, self.num_dst, self.num_src, self._edge_weight
            )

    def streamed_to(self, device: torch.device, dtype: torch.dtype) -> "SparseAdjacency":
        """A torch-CSR copy of this adjacency on ``device`` whose operands were built here, on the
        host: only the forward CSR and the row scales are copied (from pinned memory,
        asynchronously), so the device never holds the edge lists, the COO or its sort buffers
        (HongTu §4: a chunk's topology streams to the device with the chunk). The transposed CSR
        stays here; autograd copies it over only if a backward pass through this SpMM asks for
        it."""
        edge_w = self._edge_weight
        if dtype not in self._streamed:
            self._require_edge_lists("streamed_to")
            csr = _unit_csr(self._dst, self._src, edge_w, (self.num_dst, self.num_src), dtype)
            parts = (
                csr.crow_indices(),
                csr.col_indices(),
                csr.values(),
                *(
                    None if s is None else s.to(dtype).unsqueeze(1)
                    for s in (self._src_scale, self._dst_scale)
                ),
            )
            if device.type == "cuda":
                parts = tuple(None if t is None else t.pin_memory() for t in parts)
            self._streamed[dtype] = parts
        crow, col, val, src_scale, dst_scale = (
            None if t is None else t.to(device, non_blocking=True) for t in self._streamed[dtype]
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            warnings.filterwarnings("ignore", message="Sparse invariant checks")
            a = torch.sparse_csr_tensor(
                crow, col, val, (self.num_dst, self.num_src), check_invariants=False
            )
        moved = copy.copy(self)
        moved.device, moved.kernel, moved._dst, moved._src = device, "torch", None, None
        moved._streamed, moved._native = {}, None

        def transposed() -> torch.Tensor:
            return _unit_csr(self._src, self._dst, edge_w, (self.num_src, self.num_dst), dtype)

        moved._by_dtype = {dtype: (src_scale, dst_scale, edge_w, (a, transposed))}
        return moved

    def _operands(self, dtype: torch.dtype) -> tuple:
        """(src scale column, dst scale column, edge weights, CSR pair) in ``dtype``, built once."""
        if dtype not in self._by_dtype:

            def col(s):
                if s is None:
                    return None
                # the native kernel reads the 1-D scale; the others broadcast its column view
                return s.to(dtype) if self.kernel == "native" else s.to(dtype).unsqueeze(1)

            edge_w = None if self._edge_weight is None else self._edge_weight.to(dtype)
            csr = None
            if self.kernel == "torch":
                csr = (
                    _unit_csr(self._dst, self._src, edge_w, (self.num_dst, self.num_src), dtype),
                    _unit_csr(self._src, self._dst, edge_w, (self.num_src, self.num_dst), dtype),
                )
            self._by_dtype[dtype] = (col(self._src_scale), col(self._dst_scale), edge_w, csr)
        return self._by_dtype[dtype]

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return self.spmm(h)

    def edge_index(self):
        """(dst, src) on the device: for aggregations that weigh edges themselves (GAT)."""
        self._require_edge_lists("edge_index")
        return self._dst, self._src

    def release_edge_lists(self) -> bool:
        """Drop the COO edge lists and per-edge weights where the kernel holds its own copy of the
        graph (the native CSR pair with its row scales): about 24 bytes per edge that training never
        reads again. After this only :meth:`spmm` works. Returns whether they were released."""
        if self.kernel != "native" or self._native is None:
            return False
        self._dst = self._src = self.weight = None
        return True

    def _require_edge_lists(self, what: str) -> None:
        if self._dst is None and self.kernel == "native":
            raise RuntimeError(
                f"SparseAdjacency.{what}: the edge lists were released (release_edge_lists); "
                "keep them where edges are read again"
            )

    def spmm(self, h: torch.Tensor) -> torch.Tensor:
        if h.shape[0] != self.num_src:
            raise ValueError(f"aggregation expects {self.num_src} source rows, got {h.shape[0]}")
        src_scale, dst_scale, edge_w, csr = self._operands(h.dtype)
        SPMM_CALLS["unweighted" if edge_w is None else "weighted"] += 1
        if self.kernel == "native":  # both row scales inside the one pass
            return NativeSpmm.apply(h, self._native, src_scale, dst_scale)
        if src_scale is not None:
            h = h * src_scale
        if self.kernel == "dgl":
            import dgl

            out = (
                dgl.ops.copy_u_sum(self._block, h)
                if edge_w is None
                else dgl.ops.u_mul_e_sum(self._block, h, edge_w.unsqueeze(-1))
            )
        else:
            out = _CsrSpmm.apply(h, *csr)
        # out is fresh and no backward reads it
        return out if dst_scale is None else out.mul_(dst_scale)

    def flops(self, width: int) -> int:
        """Multiply-adds of one SpMM at feature width ``width`` (2 per edge and column)."""
        return 2 * self.num_edges * int(width)
