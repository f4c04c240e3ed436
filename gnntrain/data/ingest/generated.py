"""``gnntrain generate``: a generated graph (csbm, rmat) written block by block into the on-disk
format.

The generator's blocks (:class:`~gnntrain.data.generators.GraphBlocks`) go straight to disk: raw
edge blocks through the bounded-memory CSR build that ingest uses (:class:`CsrBuilder`), feature
rows appended to ``features.npy`` a block at a time, labels computed from the finished CSR. No stage
holds the edge list or the feature matrix: peak memory is a few arrays of N plus one block, so a
200M-edge graph is generated on a machine that could not hold it. The folder holds the same graph as
``dataset=<name>`` with the same options (the same blocks build both), so its digest equals that
graph's :func:`~gnntrain.data.graph.hash_tensors`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np

from gnntrain.data import ondisk
from gnntrain.data.generators import (
    ROW_BLOCK,
    generator_params,
    get_generator,
    pair_weights,
    row_blocks,
)
from gnntrain.data.ingest import _nothing
from gnntrain.data.ingest.csr import CsrBuilder, degree_summary
from gnntrain.errors import DatasetError


def _write_features(path: Path, blocks, progress) -> None:
    """``features.npy`` written front to back: the header, then each block of rows as drawn."""
    n, f = blocks.num_nodes, blocks.feat_dim
    with open(path, "wb") as out:
        np.lib.format.write_array_header_2_0(
            out,
            {
                "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                "fortran_order": False,
                "shape": (n, f),
            },
        )
        for lo, hi in row_blocks(n):
            out.write(
                memoryview(
                    np.ascontiguousarray(blocks.feature_rows(lo, hi), dtype=np.float32)
                ).cast("B")
            )
            progress("drawing features", hi, n)


def write_generated(
    ds, out: Path, overwrite: bool = False, name: str = "", progress=_nothing
) -> Dict[str, Any]:
    """Write the generated dataset section ``ds`` (source: generated) as the graph folder ``out``;
    returns its summary (also in meta.json). A killed run leaves only a hidden partial folder,
    removed by the next run that writes ``out``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gnntrain.data.graph import split_masks

    started = time.perf_counter()
    if ds.get("source") != "generated":
        raise DatasetError(
            f"generate: dataset={ds.get('name')} is not a generated graph (source: "
            f"{ds.get('source')}); "
            "use dataset=csbm or dataset=rmat, or gnntrain ingest for a graph in files."
        )
    out = Path(out).expanduser()
    if out.exists() and not overwrite:
        raise DatasetError(
            f"generate: {out} already exists. Pass --overwrite to replace it, or choose another "
            "--out."
        )
    generator = get_generator(ds.name)
    blocks = generator.blocks(ds)
    n = blocks.num_nodes
    out.parent.mkdir(parents=True, exist_ok=True)
    work = ondisk.partial_dir(out)
    work.mkdir(parents=True)
    try:
        weighted = bool(blocks.edge_weights)
        builder = CsrBuilder(work, n, blocks.symmetrize, "drop", "drop", str, weighted)
        drawn = 0
        expected = int(generator.directed_edges(ds)) // (2 if blocks.symmetrize else 1)
        for src, dst in blocks.edge_blocks():
            weights = pair_weights(blocks.seed, src, dst) if weighted else None
            builder.add(src, dst, lambda i: "a generated edge", weights)
            drawn += int(src.shape[0])
            progress("drawing edges", drawn, expected)
        stats = builder.finish(progress)
        _write_features(work / "features.npy", blocks, progress)
        indptr = np.load(work / "indptr.npy")
        indices = np.load(work / "indices.npy", mmap_mode="r")
        features = ondisk.NpyFile(work / "features.npy")
        progress("labels", 0, 0)
        labels = np.asarray(blocks.labels(indptr, indices, features.rows), dtype=np.int64)
        del indices
        masks = dict(
            zip(ondisk.MASKS, (m.numpy() for m in split_masks(n, blocks.fractions, blocks.seed)))
        )
        np.save(work / "labels.npy", labels)
        for mask_name, mask in masks.items():
            np.save(work / f"{mask_name}.npy", mask)
        pq.write_table(
            pa.table({"id": pa.array(np.arange(n, dtype=np.int64))}), work / ondisk.NODE_IDS
        )
        progress("content digest", 0, 0)
        digest = ondisk.content_digest(
            indptr,
            work / "indices.npy",
            work / "features.npy",
            labels,
            tuple(masks[m] for m in ondisk.MASKS),
            work / "weights.npy" if weighted else None,
        )
        summary = {
            "name": name or out.name,
            "num_nodes": n,
            "num_edges": stats.num_edges,
            "feat_dim": blocks.feat_dim,
            "num_classes": blocks.num_classes,
            "digest": digest,
            "index_dtype": str(np.dtype(builder.dtype)),
            "id_type": "int",
            "symmetrized": blocks.symmetrize,
            "weights": "float32" if weighted else None,
            "edges_read": stats.num_entries_read,
            "self_loops_dropped": stats.self_loops,
            "duplicates_dropped": stats.duplicates,
            "degree": degree_summary(indptr),
            "unlabeled": 0,
            "split": {m: int(v.sum()) for m, v in masks.items()},
            "generated": {
                "generator": blocks.name,
                "content_hash": blocks.content_hash,
                "row_block": ROW_BLOCK,
                "options": generator_params(ds),
            },
            "notes": [
                f"generated: the graph of dataset={blocks.name} with these options "
                f"({blocks.content_hash})"
            ],
            "ingest_seconds": round(time.perf_counter() - started, 3),
        }
        ondisk.finish(work, out, summary, overwrite)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return summary
