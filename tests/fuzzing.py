"""What the fuzz modules share (issue #57, "Fuzzed inputs"): the hypothesis settings, the check that
an ingest either succeeds or fails with one line naming one of its input files (and leaves nothing
partial behind), and a plain NumPy reading of an ingested folder to compare with a reference.

``GNNTRAIN_FUZZ_EXAMPLES`` sets the examples per property (``make fuzz``: 2000; the default suite:
200 each, as the issue asks of CI)."""

from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from hypothesis import HealthCheck, settings

from gnntrain.data.ingest import IngestOptions, ingest
from gnntrain.data.ondisk import open_graph_dir
from gnntrain.errors import DatasetError

EXAMPLES = int(os.environ.get("GNNTRAIN_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same inputs in every run: a failure is a regression case by its seed
)


def one_line_or_graph(opts: IngestOptions, files: Sequence[str]) -> Optional[Path]:
    """Ingest ``opts``: the finished folder, or None after one DatasetError of one line that names
    one of ``files`` (file names); either way nothing partial is left beside ``--out``, and NumPy
    said nothing on the way (an overflow or invalid cast warning is an error here: a value read
    wrong)."""
    out = Path(opts.out)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            ingest(opts)
    except DatasetError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith("ingest: "), message
        assert any(name in message for name in files), message
        assert not out.exists(), message
        return None
    finally:
        assert not list(out.parent.glob(f".{out.name}.partial-*"))
    return out


@dataclass
class Folder:
    """An ingested folder read with plain NumPy (and pyarrow for the node IDs)."""

    ids: list  # the user's node IDs in node order
    edges: Dict[Tuple[int, int], float]  # (src, dst) node index -> weight (1.0 when unweighted)
    features: np.ndarray
    labels: np.ndarray
    masks: Dict[str, np.ndarray]
    targets: Optional[np.ndarray]
    meta: dict


def read_folder(out: Path) -> Folder:
    """``out`` as arrays; also checks what loading checks (meta.json, every file's size)."""
    import pyarrow.parquet as pq

    g = open_graph_dir(out)
    load = lambda name: np.load(out / f"{name}.npy", allow_pickle=False)
    indptr, indices = load("indptr"), load("indices")
    weights = load("weights") if g.weighted else np.ones(indices.shape[0])
    dst = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    edges = {(int(s), int(d)): float(w) for s, d, w in zip(indices, dst, weights)}
    assert len(edges) == indices.shape[0], "a repeated CSR entry"
    return Folder(
        ids=pq.read_table(out / "node_ids.parquet").column("id").to_pylist(),
        edges=edges,
        features=load("features"),
        labels=load("labels"),
        masks={m: load(m) for m in ("train_mask", "val_mask", "test_mask")},
        targets=load("targets") if g.target_names else None,
        meta=g.meta,
    )


def reference_edges(
    src, dst, weights=None, symmetrize: bool = True
) -> Dict[Tuple[int, int], float]:
    """The graph's edges as ingest documents them, in plain Python: self-loops dropped, each edge
    with its reverse where symmetrised, a repeated edge once with its largest weight (float32)."""
    ws = [1.0] * len(src) if weights is None else [float(np.float32(w)) for w in weights]
    edges: Dict[Tuple[int, int], float] = {}
    for s, d, w in zip(src, dst, ws):
        if s == d:
            continue
        for key in ((int(s), int(d)), (int(d), int(s))) if symmetrize else ((int(s), int(d)),):
            edges[key] = max(edges.get(key, w), w)
    return edges


def same_array(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal shape and values, NaN equal to NaN."""
    return got.shape == want.shape and np.array_equal(got, want, equal_nan=got.dtype.kind == "f")


def remove(out: Optional[Path]) -> None:
    if out is not None:
        shutil.rmtree(out)
