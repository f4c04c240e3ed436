"""One rank's HongTu engine: host store, device arena and the layer-major schedule.

On CUDA nothing in the chunk loop waits for the device (HongTu §4.2: transfers overlap compute):
loads are staged on one side stream (:class:`~gnntrain.modes.staging.HostToDeviceStager`),
write-backs run on another (:class:`~gnntrain.modes.staging.DeviceToHostQueue`) and land, with their
host-side ⊕-adds, only after the next chunk's loads and compute are issued; index tensors are on the
device before the loop needs them (:class:`~gnntrain.modes.hongtu.indices.DeviceIndices`); compute
and copies are timed with CUDA events (:class:`~gnntrain.metrics.clock.DeviceTimeline`), never by
settling the device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from gnntrain.metrics.clock import DeviceTimeline, StageClock
from gnntrain.models import SparseAdjacency, hidden_activation, transposed
from gnntrain.modes.base import RankShard
from gnntrain.modes.hongtu.arena import DeviceArena, cuda_peak_reader, tensor_bytes
from gnntrain.modes.hongtu.indices import DeviceIndices, Index
from gnntrain.modes.hongtu.payload import HongTuPayload
from gnntrain.modes.hongtu.schedule import _positions, build_sweep
from gnntrain.modes.hongtu.tiers import VertexTables
from gnntrain.modes.hongtu.transfer_model import STAGING_SLICE_BYTES, topology_bytes
from gnntrain.modes.hongtu.transfers import ChunkTransfers, add_rows
from gnntrain.modes.staging import DeviceToHostQueue, HostToDeviceStager
from gnntrain.partition.chunks import ChunkLayout
from gnntrain.sizing import DTYPE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from gnntrain.models.registry import ModelFamily


class HongTuEngine(ChunkTransfers):
    """One rank's host store, device arena and the layer-major schedule."""

    def __init__(
        self,
        shard: RankShard,
        ctx,
        family: "ModelFamily",
        dedup: str,
        cap: int,
        tables: Optional[VertexTables] = None,
        estimated_device_bytes: int = 0,
        keep_input_aggregation: bool = False,
    ):
        payload: HongTuPayload = shard.payload
        self.layout: ChunkLayout = payload.layout
        self.batches: np.ndarray = payload.batches
        self.ctx, self.comm, self.device, self.dtype = ctx, ctx.comm, ctx.device, ctx.dtype
        self.value_bytes = DTYPE_BYTES[ctx.plan.dtype]
        # elementwise: cache the aggregation; else recompute the layer
        self.family, self.dedup = (family, dedup)
        self.rank = shard.rank
        self.lo = int(self.layout.part_offsets[self.rank])
        self.pin = self.device.type == "cuda"
        allocator_peak = None
        if self.pin:  # the cap binds the CUDA allocator's real peak, counted from here
            torch.cuda.reset_peak_memory_stats(self.device)
            allocator_peak = cuda_peak_reader(self.device)
        self.arena = DeviceArena(cap, allocator_peak)
        self.tables = tables or VertexTables({}, None)  # the host tier only
        self.tables.pin = self.pin
        self.clock = StageClock(self.device)
        # compute and copy intervals: the overlap, per epoch
        self.timeline = DeviceTimeline(self.device)
        self.timeline_last: Dict[str, float] = {}  # ... of the last training epoch
        self.stager = HostToDeviceStager(self.device, timeline=self.timeline)
        self.d2h = DeviceToHostQueue(self.device, timeline=self.timeline)
        self.fwd = build_sweep(self.layout, self.batches, self.rank, dedup)
        self.bwd = build_sweep(self.layout, self.batches[::-1], self.rank, dedup)
        dst, src, w = shard.edges  # relabelled ids, dst-sorted, dst within this part
        self.topology: Dict[
            int, Tuple[SparseAdjacency, SparseAdjacency, torch.Tensor, torch.Tensor]
        ] = {}
        kernel = ctx.plan.kernel
        for step in self.fwd.steps:
            c = step.chunk
            v_lo, v_hi = self.layout.rows(c)
            e_lo, e_hi = (int(x) for x in torch.searchsorted(dst, torch.tensor([v_lo, v_hi])))
            rows = self.layout.neighbours[c]
            d_local = dst[e_lo:e_hi] - v_lo
            s_local = _positions(rows, src[e_lo:e_hi].numpy())
            v_pos = _positions(rows, np.arange(v_lo, v_hi))
            fwd = SparseAdjacency(
                d_local, s_local, w[e_lo:e_hi], v_hi - v_lo, rows.size, kernel=kernel
            )
            bwd = SparseAdjacency(
                s_local, d_local, transposed(w[e_lo:e_hi]), rows.size, v_hi - v_lo, kernel=kernel
            )
            self.topology[c] = (fwd, bwd, v_pos, torch.stack([d_local, s_local]))
        # what a device budget leaves above the planned working set (None: no cap) holds the index
        # packs (half of it at most) and the write-backs still in flight; beyond it the loop lands
        # them at once
        headroom = None if not cap else max(0, cap - int(estimated_device_bytes))
        self.indices = DeviceIndices(
            self.device,
            {"fwd": self.fwd.steps, "bwd": self.bwd.steps},
            {c: t[2] for c, t in self.topology.items()},
            self.fwd.p2p,
            None if headroom is None else headroom // 2,
        )
        # loads and write-backs in flight share the rest, each at least the two slices the estimate
        # counts
        share = None if headroom is None else max(0, headroom - self.indices.most_bytes_held()) // 2
        self.in_flight_limit = None if share is None else max(2 * STAGING_SLICE_BYTES, share)
        self.stager.in_flight_limit = self.in_flight_limit
        self.rows: Dict[Tuple[str, str], int] = {}  # (direction, kind) → rows of the current pass
        self.rows_last: Dict[
            Tuple[str, str], int
        ] = {}  # ... of the last training epoch (forward + backward)
        self.disk: Dict[
            str, int
        ] = {}  # disk-tier bytes (disk_read, disk_write) of the current pass
        self.disk_last: Dict[str, int] = {}  # ... of the last training epoch
        self.p = 0.0
        # the current chunk's only
        self.device_topology: Optional[Tuple[Tuple[int, int], SparseAdjacency]] = None
        self.acts: List[torch.Tensor] = []
        self.cache: List[Optional[torch.Tensor]] = []
        self.masks: List[Optional[Union[torch.Tensor, str]]] = []
        self.dropout = None
        self._pinned_inputs: Optional[Tuple[tuple, torch.Tensor]] = None
        # A·x of the fixed inputs, chunk by chunk: the first layer's cache table, kept from the pass
        # that wrote it while the inputs are unchanged (train.cache_input_aggregation; dropout never
        # touches the inputs)
        self.keep_input_aggregation = keep_input_aggregation and family.elementwise
        self._input_aggregation: Optional[Tuple[tuple, torch.Tensor]] = None
        self.input_kept = self.input_kept_last = False
        self._written: Dict[
            int, Optional[List[Tuple[int, int]]]
        ] = {}  # zeroed table → row ranges written

    # --------------------------------------------------------------- layers
    def _activation(self, model, out: torch.Tensor, layer: int, c: int, last: bool) -> torch.Tensor:
        """norm, relu, then the replayed dropout mask of the next layer's input (GNN.forward's
        order)."""
        if last:
            return out
        norm = model.hidden_norm(layer + 1)
        mask = self.masks[layer + 1]
        if mask is None:
            return hidden_activation(out, layer + 1, norm=norm)
        if isinstance(mask, torch.Tensor):
            keep = mask[self._local(c)].to(device=self.device, dtype=out.dtype)
        else:  # on a GPU: the chunk's rows of the mask drawn there (the same bits as the host's)
            keep = self.dropout.keep_mask(out.shape[1], layer + 1, self._local(c), self.device).to(
                out.dtype
            )
        return hidden_activation(out, layer + 1, lambda h, _layer: h * keep / (1.0 - self.p), norm)

    def _layer_forward(
        self, layer_mod, layer: int, c: int, h_n: torch.Tensor, cache: bool, v_pos: Index
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        if not self.family.elementwise:  # attention over the chunk's edges
            _, _, v_index, edges = self.topology[c]
            edges = edges.to(self.device)
            return layer_mod.update(
                None, layer_mod.attend(h_n, edges[0], edges[1], v_index.to(self.device))
            ), None
        agg = self._device_adj(c, 0).spmm(h_n)
        h_v = h_n[v_pos]
        return layer_mod.update(h_v, layer_mod.aggregate(h_v, lambda _, cached=agg: cached)), (
            agg if cache else None
        )

    def _device_adj(self, c: int, which: int) -> SparseAdjacency:
        """Chunk ``c``'s forward (``which=0``) or backward (1) adjacency on the device. Only the
        current chunk's topology lives there (HongTu §4: topology is streamed with its chunk): the
        previous one is released before the next is loaded, so the arena's "topology" entry (one
        chunk) is what the device holds."""
        adj = self.topology[c][which]
        if self.device.type == "cpu":
            return adj
        key = (c, which)
        if self.device_topology is None or self.device_topology[0] != key:
            self.device_topology = None  # free the last chunk's before allocating this one's
            self.device_topology = (key, adj.streamed_to(self.device, self.dtype))
        return self.device_topology[1]

    def _topology_bytes(self, c: int) -> int:
        fwd_adj = self.topology[c][0]
        return topology_bytes(
            fwd_adj.num_dst,
            fwd_adj.num_edges,
            fwd_adj.num_src,
            self.family.elementwise,
            self.value_bytes,
        )

    def run_forward(self, model, x: torch.Tensor, dropout, training: bool) -> torch.Tensor:
        """Layer-major forward over all batches; returns the host logits of this rank's rows."""
        self.rows, self.disk = {}, {}
        self.p = dropout.p if (training and dropout is not None) else 0.0
        layers = list(model.layers)
        self.masks = [None] * (len(layers) + 1)
        self.dropout = dropout
        if self.p > 0:
            # a GPU draws each chunk's rows where it uses them ("device")
            for i in range(1, len(layers)):
                self.masks[i] = "device" if self.pin else dropout.keep_mask(model.spec.dims[i], i)
        x_key = _inputs_key(x)
        if self.pin and not x.is_pinned():
            x = self._pinned(x)
        self.timeline.reset()
        self.acts = [x]
        self.cache = []
        kept = (
            self._input_aggregation if self.keep_input_aggregation and not x.requires_grad else None
        )
        if kept is not None and kept[0] != x_key:
            kept = self._input_aggregation = None
        # this pass's first layer reads A·x kept from an earlier pass
        self.input_kept = kept is not None
        for layer, layer_mod in enumerate(layers):
            last = layer == len(layers) - 1
            d_out = model.spec.dims[layer + 1]
            out_host = self._host(
                "logits" if last else f"act{layer + 1}", (x.shape[0], d_out), x, zeroed=False
            )
            if layer == 0 and kept is not None:
                self._kept_input_layer(model, layer_mod, x, kept[1], out_host, last)
                self.acts.append(out_host)
                self.cache.append(kept[1])
                continue
            keep = layer == 0 and self.keep_input_aggregation and not x.requires_grad
            cache_host = (
                self._host(f"cache{layer}", (x.shape[0], model.spec.dims[layer]), x, zeroed=False)
                if (training or keep) and self.family.elementwise
                else None
            )
            prev = None
            for t, step in enumerate(self.fwd.steps):
                c = step.chunk
                idx = self.indices.step("fwd", t)
                self.arena.hold("indices", self.indices.bytes_held())
                self.arena.hold("topology", self._topology_bytes(c))
                resident = self.gather(step, idx, self.fwd, self.acts[layer], prev, "fwd")
                h_n = resident if idx.need_pos is None else resident[idx.need_pos]
                with self.timeline.span("compute"):
                    out, agg = self._layer_forward(
                        layer_mod, layer, c, h_n, cache_host is not None, idx.v_pos
                    )
                    y = self._activation(model, out, layer, c, last)
                # + the SpMM's scaled copy of h_n and the chunk's own rows h_v (cost.batch_bytes),
                # freed by now but alive at the layer's peak
                self.arena.hold(
                    "chunk",
                    tensor_bytes(h_n if step.need_pos is not None else None, out, y, agg)
                    + (
                        (h_n.shape[0] + out.shape[0]) * h_n.shape[1] * h_n.element_size()
                        if self.family.elementwise
                        else 0
                    ),
                )
                local = self._local(c)
                self.to_host(out_host, local, y, "fwd", add=False)
                if cache_host is not None:
                    self.to_host(cache_host, local, agg, "fwd", add=False)
                self.d2h.then(
                    lambda lo=local.start, hi=local.stop, tables=(out_host, cache_host): (
                        self.tables.release_rows(lo, hi, *tables)
                    )
                )
                del out, y, agg, h_n
                self.arena.drop("chunk")
                # the previous chunk's write-backs: issued before this chunk's compute
                self._land(keep=1)
                prev = resident
                self.arena.rename("fwd_resident", "fwd_resident_prev")
            self._land(keep=0)  # the next layer reads this one's outputs
            self.arena.drop("fwd_resident_prev", "topology", "indices", "d2h_in_flight")
            self.acts.append(out_host)
            self.cache.append(cache_host)
            if keep:
                self._input_aggregation = (x_key, cache_host)
        if not training:
            self._close_timeline()
        return self.acts[-1]

    def _kept_input_layer(
        self,
        model,
        layer_mod,
        x: torch.Tensor,
        aggregated: torch.Tensor,
        out_host: torch.Tensor,
        last: bool,
    ) -> None:
        """The first layer from its kept aggregation A·x: each chunk loads its own rows of it (and
        of x where the update reads the row itself), with no neighbour gather and no SpMM, and
        writes its output."""
        for step in self.fwd.steps:
            c = step.chunk
            local = self._local(c)
            # own rows, not a gather
            agg = self.to_device(aggregated, local, "fwd", rows_kind="h2d_kept")
            h_v = (
                self.to_device(x, local, "fwd", rows_kind="h2d_kept")
                if self.family.self_row
                else None
            )
            with self.timeline.span("compute"):
                out = layer_mod.update(h_v, layer_mod.aggregate(h_v, lambda _, cached=agg: cached))
                y = self._activation(model, out, 0, c, last)
            self.arena.hold("chunk", tensor_bytes(agg, h_v, out, y))
            self.to_host(out_host, local, y, "fwd", add=False)
            self.tables.release_rows(local.start, local.stop, aggregated)
            self.d2h.then(
                lambda lo=local.start, hi=local.stop: self.tables.release_rows(lo, hi, out_host)
            )
            del out, y, agg, h_v
            self.arena.drop("chunk")
            self._land(keep=1)
        self._land(keep=0)
        self.arena.drop("d2h_in_flight")

    def _pinned(self, x: torch.Tensor) -> torch.Tensor:
        """A pinned copy of the input features, made once while they are unchanged (not at every
        epoch)."""
        key = _inputs_key(x)
        if self._pinned_inputs is None or self._pinned_inputs[0] != key:
            self._pinned_inputs = (key, x.pin_memory())
        return self._pinned_inputs[1]

    def _close_timeline(self) -> Dict[str, float]:
        """The pass's device intervals (:class:`DeviceTimeline`): compute into the stage clock, the
        rest kept."""
        figures = self.timeline.resolve()
        self.clock.add("device_compute", figures.get("compute_s", 0.0))
        self.timeline.reset()
        return figures

    # over the function budget: HongTu Algorithm 1's backward loop, whole as the paper prints it
    def run_backward(self, model, grad_logits: torch.Tensor) -> List[torch.Tensor]:  # noqa: PLR0915
        """Layer-major backward (HongTu Algorithm 1, backward loop: lines 14–21 as printed, 12–19 in
        the §4.3 prose); returns the parameter gradients."""
        layers = list(model.layers)
        params = list(model.parameters())
        sums = [torch.zeros_like(p) for p in params]
        grad_next = grad_logits.contiguous()
        for layer in range(len(layers) - 1, -1, -1):
            layer_mod = layers[layer]
            last = layer == len(layers) - 1
            want_input_grad = layer > 0
            grad_host = (
                self._host(f"grad{layer}", self.acts[layer].shape, grad_next)
                if want_input_grad
                else None
            )
            sequential = (
                [grad_next]
                + ([self.cache[layer]] if self.family.elementwise else [])
                + ([self.acts[layer]] if self.family.self_row else [])
            )
            # part of this layer's recomputed output
            norm = None if last else model.hidden_norm(layer + 1)
            layer_params = list(layer_mod.parameters()) + (
                [] if norm is None else list(norm.parameters())
            )
            index = {id(p): i for i, p in enumerate(params)}
            prev_inputs = prev_sums = None
            for index_in_sweep, step in enumerate(self.bwd.steps):
                c = step.chunk
                local = self._local(c)
                idx = self.indices.step("bwd", index_in_sweep)
                self.arena.hold("indices", self.indices.bytes_held())
                v_pos = idx.v_pos
                # the next chunk's own rows, read ahead
                if index_in_sweep + 1 < len(self.bwd.steps):
                    ahead = self._local(self.bwd.steps[index_in_sweep + 1].chunk)
                    self.tables.prefetch_rows(ahead.start, ahead.stop, *sequential)
                self.arena.hold("topology", self._topology_bytes(c))
                g = self.to_device(grad_next, local, "bwd")
                with torch.enable_grad():
                    if self.family.elementwise:
                        agg = self.to_device(self.cache[layer], local, "bwd").requires_grad_(True)
                        h_v = (
                            self.to_device(self.acts[layer], local, "bwd")
                            if self.family.self_row
                            else None
                        )
                        if h_v is not None and want_input_grad:
                            h_v.requires_grad_(True)
                        inputs = [agg] + ([h_v] if h_v is not None and want_input_grad else [])
                        # + autograd's gradient of agg and the backward SpMM's scaled copy of it
                        # (cost.batch_bytes)
                        self.arena.hold("chunk", tensor_bytes(g, agg, h_v) + 2 * tensor_bytes(agg))
                        with self.timeline.span("compute"):
                            with self.arena.saved_tensors(
                                "recompute", exclude=params + inputs + [g]
                            ):
                                out = layer_mod.update(
                                    h_v, layer_mod.aggregate(h_v, lambda _, cached=agg: cached)
                                )
                                y = self._activation(model, out, layer, c, last)
                            grads = torch.autograd.grad(
                                y, layer_params + inputs, g, allow_unused=True
                            )
                            block = None
                            if want_input_grad:
                                block = self._device_adj(c, 1).spmm(grads[len(layer_params)])
                                if h_v is not None:
                                    add_rows(block, v_pos, grads[len(layer_params) + 1])
                    else:  # GAT: recompute the whole layer from reloaded neighbour rows
                        resident = self.gather(
                            step, idx, self.bwd, self.acts[layer], prev_inputs, "bwd"
                        )
                        prev_inputs = resident
                        self.arena.rename("bwd_resident", "bwd_resident_prev")
                        h_n = resident if idx.need_pos is None else resident[idx.need_pos]
                        h_n = h_n.detach().requires_grad_(want_input_grad)
                        self.arena.hold_tensors("chunk", g)
                        with self.timeline.span("compute"):
                            with self.arena.saved_tensors(
                                "recompute", exclude=params + [h_n, resident, g]
                            ):
                                out, _ = self._layer_forward(layer_mod, layer, c, h_n, False, v_pos)
                                y = self._activation(model, out, layer, c, last)
                            inputs = [h_n] if want_input_grad else []
                            grads = torch.autograd.grad(
                                y, layer_params + inputs, g, allow_unused=True
                            )
                            block = grads[len(layer_params)] if want_input_grad else None
                for p, gp in zip(layer_params, grads[: len(layer_params)]):
                    if gp is not None:
                        sums[index[id(p)]] += gp
                self.arena.drop("recompute")
                if block is not None:
                    self.arena.hold_tensors("grad_block", block)
                    prev_sums = self.scatter_add(
                        step, idx, self.bwd, grad_host, block, prev_sums, "bwd"
                    )
                    self.arena.rename("bwd_grad_sums", "bwd_grad_sums_prev")
                del block, grads
                self.arena.drop("chunk", "grad_block")
                self.tables.release_rows(local.start, local.stop, *sequential)
                self._land(keep=1)
            self._land(keep=0)  # the next layer down reads this layer's input gradient
            self.arena.drop(
                "bwd_resident_prev", "bwd_grad_sums_prev", "topology", "indices", "d2h_in_flight"
            )
            grad_next = grad_host
        self.rows_last, self.disk_last = dict(self.rows), dict(self.disk)
        self.input_kept_last = self.input_kept
        self.timeline_last = self._close_timeline()
        return sums


class _HongTuEpoch(torch.autograd.Function):
    """The whole layer-major schedule as one autograd node: the shared loop's
    ``loss.backward()`` calls :meth:`HongTuEngine.run_backward`."""

    @staticmethod
    def forward(ctx, engine, model, x, dropout, *params):  # type: ignore[override]
        ctx.engine, ctx.model = engine, model
        return engine.run_forward(model, x, dropout, training=True)

    @staticmethod
    def backward(ctx, grad_logits):  # type: ignore[override]
        sums = ctx.engine.run_backward(ctx.model, grad_logits)
        return (None, None, None, None, *sums)


def _inputs_key(x: torch.Tensor) -> tuple:
    """What identifies the input features between passes: their storage, version, shape and dtype (a
    pinned copy or a kept A·x of them stays valid while it is unchanged)."""
    return (x.data_ptr(), x._version, tuple(x.shape), x.dtype, x.requires_grad)
