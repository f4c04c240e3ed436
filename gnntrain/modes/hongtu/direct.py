"""HongTu's direct path: one rank on a CPU device reads its chunks' neighbours where they lie.

HongTu (Scalable Full-Graph GNN Training on Multiple GPUs, §4) gathers a chunk's in-neighbour rows
into device memory because a GPU cannot read host memory at full speed. A CPU can: with
``mode.direct=true`` the native SpMM reads source rows straight from the vertex tables (host
tensors, or the disk tier's memory-mapped files) by their global row numbers, and a chunk's topology
is a slice of the graph's CSR (``indptr[lo:hi + 1]`` over the whole ``indices``), memory-mapped from
an ingested folder. No gather, no per-chunk adjacency, no COO: a chunk's working set is its own
rows, and the graph is never held as an edge list (docs/design.md#hongtu, "The direct path").

The schedule stays HongTu's: forward is layer-major over row chunks, writing each layer's output and
its aggregation (the cache) chunk by chunk; backward reloads a chunk's output gradient and cached
aggregation, recomputes the update, and writes the aggregation's gradient over the cache in place.
The input gradient is then one more pass: a chunk's rows of ∇x^l pull from that table through the
transposed CSR (the same arrays when the graph is symmetric), so every write is a sequential chunk
range, never a scatter. The first layer's aggregation of the fixed input features is computed once
per run (dropout never touches the inputs). Exact: the same products as ``mode=single`` in another
order of summation (float64 agrees to 1e-12).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import torch

from gnntrain.metrics.clock import StageClock
from gnntrain.models import hidden_activation
from gnntrain.models.gnn import row_hash_keep_mask
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.modes.hongtu.direct_graph import DirectGraph
from gnntrain.modes.hongtu.tiers import VertexTables

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.models.registry import ModelFamily


def _process_io() -> Dict[str, int]:
    """The kernel's block-device bytes of this process (/proc/self/io); empty where there is
    none."""
    try:
        text = open("/proc/self/io").read()
    except OSError:
        return {}
    fields = dict(line.split(": ") for line in text.strip().splitlines())
    return {
        k: int(fields[k])
        for k in ("read_bytes", "write_bytes", "cancelled_write_bytes")
        if k in fields
    }


class DirectEngine:
    """One CPU rank's layer-major schedule over row chunks, reading neighbours in place (module
    docstring)."""

    def __init__(
        self,
        graph: DirectGraph,
        chunks: List[Tuple[int, int]],
        family: "ModelFamily",
        dtype: torch.dtype,
        tables: VertexTables,
        comm,
    ):
        from gnntrain.models._native import _compiled

        self.graph, self.chunks, self.family = graph, chunks, family
        self.tables, self.comm = tables, comm
        self.scaled_spmm, self.weighted_spmm = _compiled()
        # model.edge_weight: each entry's whole weight, forward and transposed (the weighted loop)
        self.entry_values = (
            None
            if graph.values is None
            else {t: graph.entry_values(t, dtype) for t in (False, True)}
        )
        src_scale, dst_scale = graph.scales()
        self.src_scale, self.dst_scale = src_scale.to(dtype), dst_scale.to(dtype)
        self.loop_scale = (
            (src_scale * dst_scale).to(dtype).unsqueeze(1) if graph.self_loop else None
        )
        self.clock = StageClock(torch.device("cpu"))
        self.value_bytes = torch.empty((), dtype=dtype).element_size()
        self.disk: Dict[str, int] = {}
        self.disk_last: Dict[str, int] = {}
        self.disk_once: Dict[str, int] = {}  # cache0's write, once per run
        self.io_last: Dict[str, int] = {}
        self._io_start: Dict[str, int] = {}
        self.fixed_input: Optional[torch.Tensor] = None  # the features whose product cache0 holds
        self.input_cache: Optional[torch.Tensor] = None
        self._input_version = -1
        self.acts: List[torch.Tensor] = []
        self.cache: List[Optional[torch.Tensor]] = []
        self.dropout = None

    # -------------------------------------------------------------- tables
    def _count(self, table: Optional[torch.Tensor], kind: str, rows: int, width: int) -> None:
        if table is not None and rows and self.tables.holds(table):
            nbytes = rows * width * self.value_bytes
            self.comm.record_copy(kind, nbytes, 0.0)
            self.disk[kind] = self.disk.get(kind, 0) + nbytes

    def _read(self, table: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        self._count(table, "disk_read", hi - lo, table.shape[1])
        return table[lo:hi]

    def _write(
        self, table: torch.Tensor, lo: int, hi: int, rows: torch.Tensor, keep_cached: bool = False
    ) -> None:
        table[lo:hi] = rows
        self._count(table, "disk_write", hi - lo, table.shape[1])
        # the next layer reads it at random: out of this process, but kept in the page cache
        if keep_cached:
            self.tables.release_rows(lo, hi, table)
        else:  # read again only by the backward pass, in order: its write-back starts now
            self.tables.evict_rows(lo, hi, table)

    def _product(self, h: torch.Tensor, lo: int, hi: int, transpose: bool) -> torch.Tensor:
        """Rows [lo, hi) of Â·h (or Âᵀ·h): the native scaled SpMM over the CSR slice, source rows
        read from ``h`` in place (a whole pass of it), plus the self-loop diagonal."""
        g = self.graph
        indptr, indices = (g.t_indptr, g.t_indices) if transpose else (g.indptr, g.indices)
        col, row = (
            (self.dst_scale, self.src_scale) if transpose else (self.src_scale, self.dst_scale)
        )
        out = torch.empty(hi - lo, h.shape[1], dtype=h.dtype)
        self._count(h, "disk_read", hi - lo, h.shape[1])  # chunk by chunk, one whole pass of h
        with self.clock.span("spmm"):
            if self.entry_values is not None:
                self.weighted_spmm(
                    indptr[lo : hi + 1],
                    indices,
                    self.entry_values[transpose],
                    h.detach().numpy(),
                    out.numpy(),
                )
            else:
                self.scaled_spmm(
                    indptr[lo : hi + 1],
                    indices,
                    col.numpy(),
                    row[lo:hi].numpy(),
                    h.detach().numpy(),
                    out.numpy(),
                )
            if self.loop_scale is not None:
                out.addcmul_(self.loop_scale[lo:hi], h[lo:hi])
        return out

    # ---------------------------------------------------------------- layers
    def _activation(
        self, model, out: torch.Tensor, layer: int, lo: int, hi: int, last: bool
    ) -> torch.Tensor:
        """norm, relu, then the dropout of the next layer's input, its mask drawn for rows [lo, hi)
        only."""
        if last:
            return out
        norm = model.hidden_norm(layer + 1)
        p = self.dropout.p if self.dropout is not None else 0.0
        if p <= 0:
            return hidden_activation(out, layer + 1, norm=norm)
        keep = row_hash_keep_mask(
            torch.arange(lo, hi), out.shape[1], self.dropout.stream(layer + 1), p
        )
        return hidden_activation(
            out, layer + 1, lambda h, _layer: h * keep.to(h.dtype) / (1.0 - p), norm
        )

    def _input_aggregation(self, x: torch.Tensor, training: bool) -> Optional[torch.Tensor]:
        """cache0: Â·x of the fixed input features, computed (chunk by chunk) once per run."""
        fixed = not x.requires_grad
        if (
            fixed
            and self.fixed_input is x
            and self._input_version == x._version
            and self.input_cache is not None
        ):
            return self.input_cache
        if not (fixed and training):
            return None
        cache = self.tables.allocate("cache0", tuple(x.shape), x.dtype)
        for lo, hi in self.chunks:  # x is no table: only the write can touch the disk tier
            cache[lo:hi] = self._product(x, lo, hi, transpose=False)
            self.tables.evict_rows(lo, hi, cache)
        # once per run, not per epoch: reported apart, not recorded as traffic
        if self.tables.holds(cache):
            self.disk_once = {"disk_write": cache.numel() * self.value_bytes}
        self.fixed_input, self.input_cache, self._input_version = x, cache, x._version
        return cache

    def run_forward(self, model, x: torch.Tensor, dropout, training: bool) -> torch.Tensor:
        """Layer-major forward over the chunks; returns the logits (host)."""
        if training:
            self.disk, self._io_start = {}, _process_io()
        self.dropout = dropout if training else None
        layers = list(model.layers)
        dims = model.spec.dims
        n = x.shape[0]
        self.acts, self.cache = [x], []
        cached_input = self._input_aggregation(x, training) if self.family.elementwise else None
        for layer, layer_mod in enumerate(layers):
            last = layer == len(layers) - 1
            h = self.acts[layer]
            out_table = self.tables.allocate(
                "logits" if last else f"act{layer + 1}", (n, dims[layer + 1]), x.dtype
            )
            given = cached_input if layer == 0 else None
            cache = (
                given
                if given is not None
                else (
                    self.tables.allocate(f"cache{layer}", (n, dims[layer]), x.dtype)
                    if training
                    else None
                )
            )
            for lo, hi in self.chunks:
                agg = (
                    self._read(given, lo, hi)
                    if given is not None
                    else self._product(h, lo, hi, transpose=False)
                )
                h_v = self._read(h, lo, hi) if self.family.self_row else None
                with self.clock.span("update"):
                    out = layer_mod.update(
                        h_v, layer_mod.aggregate(h_v, lambda _, cached=agg: cached)
                    )
                    y = self._activation(model, out, layer, lo, hi, last)
                self._write(out_table, lo, hi, y, keep_cached=True)
                if cache is not None and given is None:
                    self._write(cache, lo, hi, agg)
            # backward never reads this layer's input again
            if layer > 0 and not self.family.self_row:
                self.tables.evict_rows(0, None, h)
            self.acts.append(out_table)
            self.cache.append(cache)
        return self.acts[-1]

    def run_backward(self, model, grad_logits: torch.Tensor) -> List[torch.Tensor]:
        """Layer-major backward: per chunk the update is recomputed from the cached aggregation
        (HongTu §4.3); the aggregation's gradient replaces the cache, then ∇x^l pulls it through the
        transposed CSR."""
        layers = list(model.layers)
        params = list(model.parameters())
        index = {id(p): i for i, p in enumerate(params)}
        sums = [torch.zeros_like(p) for p in params]
        grad_next = grad_logits.contiguous()
        for layer in range(len(layers) - 1, -1, -1):
            layer_mod, last = layers[layer], layer == len(layers) - 1
            want_input_grad = layer > 0
            cache, h = self.cache[layer], self.acts[layer]
            grad_table = (
                self.tables.allocate(f"grad{layer}", tuple(h.shape), h.dtype)
                if want_input_grad
                else None
            )
            norm = None if last else model.hidden_norm(layer + 1)
            layer_params = list(layer_mod.parameters()) + (
                [] if norm is None else list(norm.parameters())
            )
            for i, (lo, hi) in enumerate(self.chunks):
                if i + 1 < len(self.chunks):  # the next chunk's rows, read ahead
                    self.tables.prefetch_rows(*self.chunks[i + 1], grad_next, cache)
                g = self._read(grad_next, lo, hi)
                agg = self._read(cache, lo, hi).clone().requires_grad_(want_input_grad)
                h_v = (
                    self._read(h, lo, hi).clone().requires_grad_(want_input_grad)
                    if self.family.self_row
                    else None
                )
                inputs = [t for t in (agg, h_v) if t is not None and want_input_grad]
                with self.clock.span("update"), torch.enable_grad():
                    out = layer_mod.update(
                        h_v, layer_mod.aggregate(h_v, lambda _, cached=agg: cached)
                    )
                    y = self._activation(model, out, layer, lo, hi, last)
                    grads = torch.autograd.grad(y, layer_params + inputs, g, allow_unused=True)
                for p, gp in zip(layer_params, grads[: len(layer_params)]):
                    if gp is not None:
                        sums[index[id(p)]] += gp
                if want_input_grad:
                    self._write(cache, lo, hi, grads[len(layer_params)], keep_cached=True)
                    if h_v is not None:
                        self._write(grad_table, lo, hi, grads[len(layer_params) + 1])
                self.tables.evict_rows(lo, hi, grad_next)
            if want_input_grad:  # ∇x^l = Âᵀ·(the aggregation's gradient) [+ the own rows' gradient]
                for lo, hi in self.chunks:
                    block = self._product(cache, lo, hi, transpose=True)
                    if self.family.self_row:
                        block += self._read(grad_table, lo, hi)
                    self._write(grad_table, lo, hi, block)
                self.tables.evict_rows(0, None, cache)
            grad_next = grad_table
        self._finish_pass()
        return sums

    def _finish_pass(self) -> None:
        """The training epoch's disk-tier bytes (counted) and the kernel's block I/O of this
        process."""
        end = _process_io()
        self.disk_last = dict(self.disk)
        self.io_last = {k: end[k] - self._io_start.get(k, 0) for k in end}


class DirectStrategy(FullGraphStrategy):
    """The direct path's rank: features, labels, logits and the loss on the host; the whole schedule
    is one autograd node (engine._HongTuEpoch) over :class:`DirectEngine`."""

    inputs_on_host = True

    def __init__(self, shard, ctx, settings, model, optimizer):
        from gnntrain.models.registry import model_family

        payload = shard.payload  # a DirectPayload
        self.figures = payload.figures
        tables = VertexTables.for_rank(self.figures["tiers"], ctx, shard.rank)
        self.engine = DirectEngine(
            payload.graph,
            payload.chunks,
            model_family(settings.model.name, settings.model.target),
            ctx.dtype,
            tables,
            ctx.comm,
        )
        self.clock = self.engine.clock
        super().__init__(shard, ctx, settings, model, optimizer)

    def forward(self, model, x, dropout):
        from gnntrain.modes.hongtu.engine import _HongTuEpoch

        if torch.is_grad_enabled():
            return _HongTuEpoch.apply(self.engine, model, x, dropout, *self.params)
        return self.engine.run_forward(model, x, None, training=False)

    def close(self) -> None:
        self.engine.tables.close()

    def finish(self, result: Dict[str, object]) -> None:
        engine = self.engine
        report = dict(self.figures)
        report["tiers"] = dict(
            report["tiers"],
            measured_disk_bytes_per_epoch={
                "disk_read": int(engine.disk_last.get("disk_read", 0)),
                "disk_write": int(engine.disk_last.get("disk_write", 0)),
            },
            disk_bytes_once_per_run=dict(engine.disk_once),
            block_io_bytes_last_epoch=dict(engine.io_last),
        )
        result["mode_report"] = report
