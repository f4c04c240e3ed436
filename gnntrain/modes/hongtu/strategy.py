"""A HongTu rank's strategy: the shared full-graph epoch around
:class:`~gnntrain.modes.hongtu.engine.HongTuEngine` (HongTu §4: features, labels and the loss on the
host; the layers stream their chunks through the device)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from gnntrain.models.registry import model_family
from gnntrain.modes.base import RankShard
from gnntrain.modes.fullgraph import FullGraphStrategy
from gnntrain.modes.hongtu.arena import tensor_bytes
from gnntrain.modes.hongtu.engine import HongTuEngine, _HongTuEpoch
from gnntrain.modes.hongtu.tiers import VertexTables
from gnntrain.plan_types import RunSettings


class HongTuStrategy(FullGraphStrategy):
    """A HongTu rank: features, labels and the loss stay in host memory; every layer streams its
    chunks through the device (:class:`HongTuEngine`), forward and a recomputing backward."""

    inputs_on_host = True

    def __init__(self, shard: RankShard, ctx, settings: RunSettings, dedup: str, model, optimizer):
        figures = shard.payload.figures
        tables = VertexTables.for_rank(figures["tiers"], ctx, shard.rank)
        self.engine = HongTuEngine(
            shard,
            ctx,
            model_family(settings.model.name, settings.model.target),
            dedup,
            int(figures["device_memory_cap"]),
            tables,
            int(figures["estimated_device_bytes"]),
            keep_input_aggregation=settings.train.cache_input_aggregation
            and settings.model.name != "custom",
        )
        self.clock = self.engine.clock
        self.figures = shard.payload.figures
        self.held_params: Optional[List[torch.nn.Parameter]] = None
        super().__init__(shard, ctx, settings, model, optimizer)

    def forward(self, model, x, dropout):
        engine = self.engine
        if self.held_params is None:
            self.held_params = list(model.parameters())
            engine.arena.hold("parameters", 5 * tensor_bytes(*self.held_params))
        if torch.is_grad_enabled():
            return _HongTuEpoch.apply(engine, model, x, dropout, *self.held_params)
        return engine.run_forward(model, x, None, training=False)

    def close(self) -> None:
        self.engine.tables.close()

    def finish(self, result: Dict[str, Any]) -> None:
        comm, engine = self.ctx.comm, self.engine
        keys = [
            (d, k) for d in ("fwd", "bwd") for k in ("h2d", "h2d_kept", "d2h", "peer", "reused")
        ]
        totals = comm.reduce_stats([float(engine.rows_last.get(key, 0)) for key in keys])
        peaks = comm.reduce_stats(
            [float(engine.arena.peak), float(engine.arena.allocator_max)], op="max"
        )
        # those that gathered their inputs
        layers = len(self.model.layers) - int(engine.input_kept_last)
        rows = {
            d: {k: int(v) for (dd, k), v in zip(keys, totals) if dd == d} for d in ("fwd", "bwd")
        }
        report = dict(self.figures)
        report.update(
            {
                "rows_per_epoch": rows,
                "measured_gather_rows_per_layer": {
                    k: rows["fwd"][k] // max(1, layers) for k in ("h2d", "peer", "reused")
                },
                "peak_device_arena_bytes": int(peaks[0]),
                "peak_device_allocator_bytes": int(peaks[1])
                if engine.arena.allocator_peak is not None
                else None,
                # the last training epoch's device intervals (rank 0): compute, h2d and d2h busy
                # seconds, how many copy seconds ran under compute, the wall span; on a CPU device
                # nothing overlaps
                "timeline_s": dict(engine.timeline_last),
                "host_accumulate_s": engine.clock.seconds.get("host_accumulate", 0.0),
                "index_packs": {
                    "on_device_for_the_run": engine.indices.resident,
                    "uploads": engine.indices.uploads,
                    "bytes": engine.indices.total_bytes,
                },
            }
        )
        disk = comm.reduce_stats(
            [float(engine.disk_last.get(k, 0)) for k in ("disk_read", "disk_write")]
        )
        report["tiers"] = dict(
            report["tiers"],
            measured_disk_bytes_per_epoch={"disk_read": int(disk[0]), "disk_write": int(disk[1])},
        )
        result["mode_report"] = report
        result["peak_memory_bytes"]["device_arena_max_rank"] = int(peaks[0])
        # CUDA: what the allocator really held, transients included
        if engine.arena.allocator_peak is not None:
            result["peak_memory_bytes"]["device_allocator_max_rank"] = int(peaks[1])
