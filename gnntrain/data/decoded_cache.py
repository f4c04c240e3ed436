"""The decoded arrays of a named dataset, kept beside its link farm so that later loads skip the
library that decoded them (docs/design.md#backends).

Reading Cora through PyG imports ``torch_geometric.datasets`` (pandas, numba and PyG's LLM
modules) and has Planetoid re-read its processed file. Every rank, CLI and SLURM job paid that on
every run: about 0.6 s of a 3.5 s Cora run (docs/design.md §13a), the rest of the 2 s import
overlapping with ``torch._dynamo``, which the optimizer imports anyway. The first load
now saves what the reader produced (edges before cleaning, features, labels, masks, the class
count) with ``torch.save``; later loads read that file and go through the same
:func:`gnntrain.data.loaders.graph_data`, so the GraphData (and its content hash) is the one the
library would have given.

The file lives in the farm folder, whose root is keyed by the raw files' content
(:func:`gnntrain.data.farm.locate`): other files get another folder, and a farm rebuilt for
changed files drops it. Its name carries this format's version and the reader's version, so an
upgraded library decodes again. It is written atomically with a sealed digest; one that is
missing, truncated or altered is decoded again with a warning (it is a cache: never an error).
"""

from __future__ import annotations

import io
import json
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch

from gnntrain.artifact import ArtifactError, bytes_digest, read_sealed_json, sealed_json
from gnntrain.atomic import CACHE_FULL_FIX, atomic_write_bytes, on_disk_full

FORMAT_VERSION = 1

Decoded = Dict[str, Any]  # tensors and ints, as torch.load(weights_only=True) reads them back


def reader_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution``, read from its metadata (no import); None where it
    is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def decoded_path(farm_dir: Path, reader: str, version: str) -> Path:
    return Path(farm_dir) / f"gnntrain-decoded-v{FORMAT_VERSION}-{reader}-{version}.pt"


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def read_decoded(path: Path) -> Optional[Decoded]:
    """The arrays saved at ``path``; None where there are none, or (with a warning) where the file
    does not match its sealed digest or does not load."""
    if not path.exists() or not _meta_path(path).exists():
        return None
    try:
        meta = read_sealed_json(_meta_path(path))
        blob = path.read_bytes()
        if bytes_digest(blob) != meta.get("digest"):
            raise ArtifactError(f"{path} does not match its checksum", path)
        return torch.load(io.BytesIO(blob), weights_only=True)
    except (
        ArtifactError,
        OSError,
        RuntimeError,
        EOFError,
        ValueError,
        json.JSONDecodeError,
    ) as exc:
        warnings.warn(f"decoded dataset cache {path}: {exc}; decoding it again", stacklevel=2)
        return None


def write_decoded(path: Path, decoded: Decoded) -> None:
    """Save ``decoded`` at ``path``: the data first, then its sealed digest (a reader that finds
    the digest finds the whole file). A full disk is a :class:`~gnntrain.errors.DiskFullError`
    naming the folder, as the partition cache's is."""
    buffer = io.BytesIO()
    torch.save(decoded, buffer)
    blob = buffer.getvalue()
    meta = sealed_json({"digest": bytes_digest(blob), "bytes": len(blob)})
    with on_disk_full(
        path.parent, f"the decoded dataset {path.name}", len(blob) + len(meta), CACHE_FULL_FIX
    ):
        atomic_write_bytes(path, blob)
        atomic_write_bytes(_meta_path(path), meta)


def cached_decode(path: Optional[Path], decode: Callable[[], Decoded]) -> Decoded:
    """What is saved at ``path``, or ``decode()``, saved there (``path`` None: no cache)."""
    if path is not None:
        found = read_decoded(path)
        if found is not None:
            return found
    decoded = decode()
    if path is not None:
        write_decoded(path, decoded)
    return decoded
