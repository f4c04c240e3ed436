"""Part-wise stores: each part published on its own, so any process can build any subset of parts
(docs/design.md#partition-store, "Part by part").

A store whose parts a mode prepares from the graph's CSR (an ingested or on-disk generated graph)
is not built by one process: each builder takes a part's own lock, builds that part alone (the
graph memory-mapped, the partitioning from the shared cache) and publishes it, so under torchrun or
srun across hosts that share the cache folder each host builds only the parts its ranks open, once.
A part is published like a whole store: its files go to a hidden staging folder, its ``part.json``
(files, sizes, BLAKE2b digests, the figures) is written last, and the folder is renamed into place.
A part found already published, on whichever host built it, is verified against its ``part.json``
and opened, never rebuilt; a corrupt one is rebuilt alone. Once every part is there, whoever
published the last writes the store's ``meta.json`` from the parts' records: the same meta a whole
store has, so every reader of :mod:`gnntrain.partition.store` opens it unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from gnntrain.artifact import (
    ArtifactError,
    describe_files,
    read_sealed_json,
    sealed_json,
    verify_files,
)
from gnntrain.atomic import atomic_write_bytes, file_lock, on_disk_full
from gnntrain.partition.store import (
    CACHE_FULL_FIX,
    FORMAT_VERSION,
    StoreError,
    _decode,
    _Writer,
    parts_bytes,
    read_meta,
)

PART_META = "part.json"


def part_lock(directory: Path, rank: int):
    """The lock a builder of part ``rank`` holds (beside the store, like the store's own)."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    return file_lock(directory.with_name(f".{directory.name}.part{rank}.lock"))


def read_part_meta(directory: Path, rank: int) -> Optional[Dict[str, Any]]:
    """Part ``rank``'s record, or None where it is not published (or of another format); a
    StoreError where its part.json is corrupt."""
    path = Path(directory) / f"part{rank}" / PART_META
    try:
        meta = read_sealed_json(path)
    except OSError:
        return None
    except ArtifactError as exc:
        raise StoreError(str(exc)) from None
    return meta if meta.get("format_version") == FORMAT_VERSION else None


def _published(directory: Path, rank: int) -> Optional[Dict[str, Any]]:
    """read_part_meta, a corrupt record read as none (its part is rebuilt by whoever opens it)."""
    try:
        return read_part_meta(directory, rank)
    except StoreError:
        return None


def write_part(
    directory: Path, rank: int, fields: Dict[str, Any], figures: Dict[str, Any]
) -> Dict[str, Any]:
    """Publish part ``rank`` (its fields, as a whole store writes a part) with ``figures``; returns
    its record."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f".part{rank}.tmp{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    part_dir = f"part{rank}"
    with on_disk_full(
        directory.parent,
        f"part {rank} of the partition store {directory.name}",
        lambda: parts_bytes([fields], {}, first=rank),
        CACHE_FULL_FIX,
    ):
        try:
            writer = _Writer(staging, {})
            writer.encode_part(rank, fields, {})
            record = dict(
                figures,
                format_version=FORMAT_VERSION,
                rank=rank,
                built_at=time.time(),
                built_by=f"{socket.gethostname()}:{os.getpid()}",
                files=describe_files(staging, writer.files),
            )
            atomic_write_bytes(staging / part_dir / PART_META, sealed_json(record, indent=None))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    final = directory / part_dir
    if final.exists():  # a corrupt part being replaced
        shutil.rmtree(final, ignore_errors=True)
    os.replace(staging / part_dir, final)
    shutil.rmtree(staging, ignore_errors=True)
    return record


def open_published_part(
    directory: Path, rank: int, verify: bool = True
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(part ``rank``'s fields, its record); StoreError where it is missing or corrupt."""
    directory = Path(directory)
    record = read_part_meta(directory, rank)
    if record is None:
        raise StoreError(f"{directory / f'part{rank}' / PART_META} is missing")
    if verify:
        try:
            verify_files(directory, record["files"])
        except ArtifactError as exc:
            raise StoreError(str(exc)) from None
    tree = json.loads((directory / f"part{rank}" / "tree.json").read_text())
    return {k: _decode(v, directory) for k, v in tree.items()}, record


def complete(directory: Path, num_parts: int) -> Optional[Dict[str, Any]]:
    """The store's meta.json, written from the parts' records once all ``num_parts`` are published
    (under the store's lock, once); None while some part is missing."""
    directory = Path(directory)
    records = [_published(directory, r) for r in range(num_parts)]
    if any(r is None for r in records):
        return None
    with file_lock(directory.with_name(f".{directory.name}.lock")):
        meta = read_meta(directory)
        if meta is not None:
            return meta
        files: Dict[str, Any] = {}
        for record in records:
            files.update(record["files"])
        first = records[0]
        meta = {
            k: v
            for k, v in first.items()
            if k not in ("files", "rank", "built_at", "built_by", "preprocess_s")
        }
        meta.update(
            format_version=FORMAT_VERSION,
            num_parts=num_parts,
            files=files,
            parts=[sorted(r["files"]) for r in records],
            bytes_per_part=[sum(f["bytes"] for f in r["files"].values()) for r in records],
            built_at=max(r["built_at"] for r in records),
            preprocess_s=sum(float(r.get("preprocess_s", 0.0)) for r in records),
            part_wise=True,
        )
        atomic_write_bytes(directory / "meta.json", sealed_json(meta))
    return meta


def open_or_build_part(
    directory: Path,
    rank: int,
    num_parts: int,
    build: Callable[[], Tuple[Dict[str, Any], Dict[str, Any]]],
    warn: Callable[[str], None],
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(part ``rank``'s fields, its record): opened where it is published and checks out, else built
    by ``build() -> (fields, figures)`` under the part's own lock (one builder per part, whatever
    the number of ranks, jobs and hosts) and published; the store's meta.json follows once every
    part is there."""
    directory = Path(directory)
    try:
        return open_published_part(directory, rank)
    except StoreError as exc:
        if (directory / f"part{rank}").exists():  # published once: corrupt, not yet built
            warn(f"partition store {directory}: {exc}; rebuilding part {rank}")
    with part_lock(directory, rank):
        try:
            opened = open_published_part(directory, rank)
        except StoreError:
            fields, figures = build()
            write_part(directory, rank, fields, figures)
            opened = open_published_part(directory, rank, verify=False)
            # a meta.json from before holds the replaced part's digests: made again below
            with file_lock(directory.with_name(f".{directory.name}.lock")):
                (directory / "meta.json").unlink(missing_ok=True)
    complete(directory, num_parts)
    return opened
