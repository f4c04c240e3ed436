"""Checksummed on-disk artifacts: a folder of files and a ``meta.json`` that lists each file's size,
modification time and (optionally) BLAKE2b digest, published so that a reader who sees the meta sees
every file, and verified lazily.

The partition store (:mod:`gnntrain.partition.store`) and ingested graphs
(:mod:`gnntrain.data.ondisk`) are such folders. A file is checked by size on every open and by
digest only when its modification time moved since it was published (or always, with
``GNNTRAIN_VERIFY_PARTS=1``), so opening an artifact does not page its data in. (The partition cache
is a single ``.npz`` written atomically with a checksum of its arrays inside: one file needs no
folder protocol.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from gnntrain.atomic import atomic_write_bytes

META = "meta.json"


class ArtifactError(RuntimeError):
    """A file of an artifact that is missing, of the wrong size, or does not match its digest."""


def file_digest(path: Path) -> str:
    """BLAKE2b (128 bits) of a file, read in 4 MiB blocks."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def describe_files(
    folder: Path, rels: Iterable[str], digests: bool = True
) -> Dict[str, Dict[str, Any]]:
    """{relative path: {bytes, mtime_ns[, digest]}} of the files of ``folder`` (a rename keeps the
    mtime: "untouched since published")."""
    entries: Dict[str, Dict[str, Any]] = {}
    for rel in rels:
        stat = (Path(folder) / rel).stat()
        entries[rel] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        if digests:
            entries[rel]["digest"] = file_digest(Path(folder) / rel)
    return entries


def publish(staging: Path, directory: Path, meta: Dict[str, Any], replace: bool = True) -> Path:
    """Write ``meta.json`` into the finished folder ``staging`` (atomically), then rename the folder
    to ``directory``: the artifact appears whole, with its meta, or not at all (a folder without its
    meta is incomplete and never read). An existing ``directory`` is moved aside and removed once
    the new one is in place (only with ``replace``; else FileExistsError); folders moved aside by a
    publish that crashed are swept."""
    staging, directory = Path(staging), Path(directory)
    atomic_write_bytes(
        staging / META, json.dumps(meta, indent=1, sort_keys=True, default=str).encode()
    )
    old = None
    if directory.exists():
        if not replace:
            raise FileExistsError(directory)
        old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(staging, directory)
    dir_fd = os.open(directory.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    for stale in directory.parent.glob(f".{directory.name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return directory


def verify_files(
    directory: Path, files: Dict[str, Dict[str, Any]], rels: Optional[Iterable[str]] = None
) -> None:
    """Raise :class:`ArtifactError` for the first of ``rels`` (default: every listed file) that is
    missing, has the wrong size, or was written since it was published (its mtime moved) and no
    longer matches its digest. ``GNNTRAIN_VERIFY_PARTS=1`` checks every digest."""
    full = os.environ.get("GNNTRAIN_VERIFY_PARTS", "") not in ("", "0")
    for rel in files if rels is None else rels:
        path = Path(directory) / rel
        entry = files.get(rel)
        stat = path.stat() if path.is_file() else None
        if entry is None or stat is None or stat.st_size != int(entry["bytes"]):
            raise ArtifactError(f"{path} is missing or has the wrong size")
        if (
            "digest" in entry
            and (full or stat.st_mtime_ns != entry.get("mtime_ns"))
            and file_digest(path) != entry["digest"]
        ):
            raise ArtifactError(f"{path} does not match its checksum in {META}")
