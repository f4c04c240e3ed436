"""Inference with a run's own mode and world size (``gnntrain predict``, ``predict.out=...``).

Every rank loads the trained weights, runs the mode's own full-graph forward over the rows it holds
(HyScale: rank 0's full-neighbour forward, layer by layer, as its evaluation does) and writes those
rows with their global node ids to a part file; after a barrier rank 0 assembles one output in node
order: a ``.npy`` of values, or a Parquet file whose first column holds the user's own node IDs
(``node_ids.parquet`` of an ingested graph; 0..N-1 otherwise).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch import nn

from gnntrain.errors import GnnTrainError
from gnntrain.models.export import load_weights

# per node; "values" (node regression, in the targets' units); link prediction's "scores" of given
# pairs and "topk" candidates are computed from the "logits" (the embeddings) by
# gnntrain.launch.predict_links
WHATS = ("logits", "probs", "labels", "embeddings", "values")
PARTS = ".parts"
ROWS_PER_WRITE = 1 << 16


def write_part(out_dir: Path, rank: int, ids: torch.Tensor, values: torch.Tensor) -> None:
    parts = Path(out_dir) / PARTS
    parts.mkdir(parents=True, exist_ok=True)
    np.save(parts / f"ids-{rank:05d}.npy", ids.detach().cpu().numpy().astype(np.int64))
    np.save(parts / f"values-{rank:05d}.npy", values.detach().cpu().numpy())


def _user_ids(cfg, num_nodes: int):
    import pyarrow as pa

    ds = cfg.dataset
    if ds.get("source") == "files" and ds.get("path"):
        from gnntrain.data.ondisk import open_graph_dir

        return open_graph_dir(ds.path).node_ids()
    return pa.array(np.arange(num_nodes, dtype=np.int64))


def assemble(cfg, out: Path, fmt: str, what: str, num_nodes: int, world: int) -> Dict[str, Any]:
    """Rank 0, after every rank wrote its part: one output in node order (every node exactly
    covered)."""
    out = Path(out)
    parts = out.parent / PARTS
    values: Optional[np.ndarray] = None
    seen = np.zeros(num_nodes, dtype=bool)
    tmp = out.parent / f".{out.name}.partial.npy"
    for rank in range(world):
        ids_path = parts / f"ids-{rank:05d}.npy"
        if not ids_path.exists():
            continue
        ids = np.load(ids_path)
        vals = np.load(parts / f"values-{rank:05d}.npy", mmap_mode="r")
        if values is None:
            shape = (num_nodes,) + tuple(vals.shape[1:])
            values = np.lib.format.open_memmap(tmp, mode="w+", dtype=vals.dtype, shape=shape)
        values[ids] = vals
        seen[ids] = True
    if values is None or not seen.all():
        missing = int((~seen).sum())
        raise GnnTrainError(
            f"predict: {missing} of {num_nodes} nodes got no prediction (a rank wrote no rows)."
        )
    values.flush()
    if fmt == "npy":
        del values
        tmp.replace(out)
    else:
        _write_parquet(cfg, out, values, what, num_nodes)
        del values
        tmp.unlink()
    shutil.rmtree(parts, ignore_errors=True)
    return {"out": str(out), "format": fmt, "what": what, "rows": num_nodes}


def _write_parquet(cfg, out: Path, values: np.ndarray, what: str, num_nodes: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = _user_ids(cfg, num_nodes)
    prefix = {"logits": "logit", "probs": "prob", "embeddings": "emb", "values": "value"}.get(
        what, "label"
    )
    width = 1 if values.ndim == 1 else values.shape[1]
    names = ["label"] if values.ndim == 1 else [f"{prefix}_{j}" for j in range(width)]
    schema = pa.schema([("id", ids.type)] + [(n, pa.from_numpy_dtype(values.dtype)) for n in names])
    tmp = out.parent / f".{out.name}.partial"
    with pq.ParquetWriter(tmp, schema) as writer:
        for lo in range(0, num_nodes, ROWS_PER_WRITE):
            hi = min(num_nodes, lo + ROWS_PER_WRITE)
            block = np.asarray(values[lo:hi])
            cols = [ids.slice(lo, hi - lo)] + (
                [pa.array(block)]
                if block.ndim == 1
                else [pa.array(block[:, j]) for j in range(width)]
            )
            writer.write_table(pa.Table.from_arrays(cols, schema=schema))
    tmp.replace(out)


def run_predict(ctx, model: nn.Module, task, num_nodes: int) -> Dict[str, Any]:
    """What EpochLoop runs instead of training when ``predict.out`` is set."""
    cfg = ctx.plan.config_obj
    p = cfg.predict
    what, fmt, out = str(p.what), str(p.format), Path(str(p.out))
    start = time.perf_counter()
    load_weights(model, str(p.checkpoint))
    model.eval()
    with torch.no_grad():
        got: Optional[Tuple[torch.Tensor, torch.Tensor]] = task.predict(what, int(p.layer))
    if got is not None:
        write_part(out.parent, ctx.comm.rank, *got)
    ctx.comm.barrier()
    info: Dict[str, Any] = {}
    if ctx.comm.rank == 0:
        info = assemble(cfg, out, fmt, what, num_nodes, ctx.comm.world_size)
    ctx.comm.barrier()
    info["seconds"] = round(time.perf_counter() - start, 3)
    info["weights"] = str(p.checkpoint)
    return info
