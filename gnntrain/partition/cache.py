"""On-disk cache of partitionings, keyed by (dataset hash, partitioner, k, options).

Entries are plain ``.npz`` arrays (never pickles) written to a temp file and
renamed, so a killed run never leaves a half-written entry. Each entry stores
its key and a SHA-1 of its arrays; a corrupt or foreign file is detected,
reported with a warning and rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from gnntrain.artifact import ArtifactError, read_sealed_json, sealed_json
from gnntrain.atomic import atomic_write_bytes, on_disk_full

ARRAYS = ("parts", "perm", "inverse", "offsets")


def cache_key(dataset_hash: str, partitioner: Dict[str, object], k: int) -> str:
    payload = json.dumps(
        {"dataset": dataset_hash, "partitioner": partitioner, "k": int(k), "v": 1}, sort_keys=True
    )
    return hashlib.sha1(payload.encode()).hexdigest()[:20]


def _checksum(arrays: Dict[str, np.ndarray], names: Tuple[str, ...] = ARRAYS) -> str:
    h = hashlib.sha1()
    for name in names:
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


class PartitionCache:
    """Entries hold the arrays named in ``arrays``: a partitioning by default, or
    data derived from one (e.g. HongTu's chunk-to-batch assignment)."""

    def __init__(self, root: Path, arrays: Tuple[str, ...] = ARRAYS):
        self.root = Path(root) / "partitions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.arrays = tuple(arrays)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.npz"

    def load(self, key: str) -> Optional[Tuple[Dict[str, np.ndarray], Dict[str, object]]]:
        """The cached arrays and metadata, or None (missing, corrupt or foreign: then warn)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            # our own handle: np.load leaves its file open where the zip does not parse
            with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as z:
                arrays = {name: z[name] for name in self.arrays}
                meta = json.loads(bytes(z["meta"]).decode())
        except Exception as exc:  # truncated zip, bad header, missing member ...
            warnings.warn(
                f"partition cache entry {path} is unreadable ({type(exc).__name__}); rebuilding it",
                stacklevel=2,
            )
            return None
        if meta.get("key") != key or meta.get("checksum") != _checksum(arrays, self.arrays):
            warnings.warn(
                f"partition cache entry {path} failed its checksum or belongs to another "
                "partitioning; rebuilding it",
                stacklevel=2,
            )
            return None
        return arrays, meta

    def store(self, key: str, arrays: Dict[str, np.ndarray], meta: Dict[str, object]) -> Path:
        meta = dict(meta, key=key, checksum=_checksum(arrays, self.arrays))
        buffer = io.BytesIO()
        np.savez(
            buffer,
            meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            **{name: arrays[name] for name in self.arrays},
        )
        from gnntrain.partition.store import CACHE_FULL_FIX

        data = buffer.getvalue()
        path = self.path(key)
        with on_disk_full(
            self.root, f"the partition cache entry {path.name}", len(data), CACHE_FULL_FIX
        ):
            atomic_write_bytes(path, data)
        return path

    def metrics_path(self, key: str) -> Path:
        return self.root / f"{key}.metrics.json"

    def store_metrics(self, key: str, metrics: Dict[str, object]) -> None:
        """The partitioning's volumes beside its entry, so a plan can read them before loading the
        graph (``partition.known_metrics``)."""
        from gnntrain.partition.store import CACHE_FULL_FIX

        data, path = sealed_json(metrics, indent=None), self.metrics_path(key)
        with on_disk_full(
            self.root, f"the partition cache entry {path.name}", len(data), CACHE_FULL_FIX
        ):
            atomic_write_bytes(path, data)

    def metrics(self, key: str) -> Optional[Dict[str, object]]:
        """The stored volumes of entry ``key``, or None (none stored, the entry is gone, or they
        are corrupt: then with a warning, and stored again by the next partitioning)."""
        if not self.path(key).exists():
            return None
        try:
            return read_sealed_json(self.metrics_path(key), required=False)  # older: unsealed
        except OSError:
            return None
        except ArtifactError as exc:
            warnings.warn(
                f"partition cache entry {exc.path} is corrupt ({exc.why}); rebuilding it",
                stacklevel=2,
            )
            return None

    def get_or_build(
        self, key: str, build: Callable[[], Tuple[Dict[str, np.ndarray], Dict[str, object]]]
    ) -> Tuple[Dict[str, np.ndarray], Dict[str, object], bool]:
        """(arrays, meta, hit)."""
        cached = self.load(key)
        if cached is not None:
            return cached[0], cached[1], True
        arrays, meta = build()
        self.store(key, arrays, meta)
        return arrays, meta, False
