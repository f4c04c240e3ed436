"""The partition store: every rank's part written once, each rank opening only its own.

One directory per (dataset content, partitioner, parts, mode layout), keyed by the caller:

    <root>/<key>/
        meta.json          format version, the plan figures, per part: its files, sizes, checksums
        shared/*.npy       arrays several parts hold (MoP's replicated adjacency, offsets, ...)
        part<r>/tree.json  part r's structure: its fields, each a value or a reference to an array
        part<r>/*.npy      part r's arrays

No pickle: arrays are ``.npy`` read with ``allow_pickle=False`` and memory-mapped copy-on-write
(a rank's pages come from the file and only what it writes is copied); the structure is JSON.
``meta.json`` is written last, so a store without it is incomplete and is rebuilt. Every file's
BLAKE2b digest is in ``meta.json``: a part that does not match is reported and rebuilt, never
used (docs/design.md#partition-store).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from gnntrain.artifact import ArtifactError, describe_files, publish, read_sealed_json, verify_files
from gnntrain.atomic import CACHE_FULL_FIX, file_lock, on_disk_full
from gnntrain.partition.chunks import ChunkLayout
from gnntrain.registry import Registry

FORMAT_VERSION = 1
# the dataclasses a part may hold, rebuilt by their name (no pickle): each mode's rank payload,
# ChunkLayout
RECORDS: Registry[type] = Registry("store record")


def store_record(cls: type) -> type:
    """Class decorator: a dataclass that a part may hold (a mode's typed rank payload), written
    field by field and rebuilt by its class name; a second class under a taken name is refused."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__}: only a dataclass can be a store record")
    return RECORDS.add(cls.__name__, cls)


store_record(ChunkLayout)
_TORCH_DTYPES = {
    str(t).replace("torch.", ""): t
    for t in (
        torch.float32,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.float16,
    )
}


class StoreError(ArtifactError):
    """A part that is missing, foreign or corrupt (the caller rebuilds the store)."""


# ------------------------------------------------------------------ encoding
class _Writer:
    """Encodes one part's tree into JSON, writing its arrays; arrays held by several parts (the
    same tensor object) go once into ``shared/``."""

    def __init__(self, root: Path, shared_ids: Dict[int, int], dry: bool = False):
        self.root, self.shared_ids = root, shared_ids
        self.dry = dry  # count each file's bytes, write nothing (what a store needs on disk)
        self.files: Dict[str, Dict[str, Any]] = {}  # relative path -> {bytes, digest}
        self.ragged_written: Dict[int, Dict[str, Any]] = {}

    def _save(self, rel: str, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        if self.dry:
            self.files[rel] = {"bytes": npy_bytes(array)}
            return rel
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        save_npy(path, array)
        self.files[rel] = {"bytes": path.stat().st_size}
        return rel

    def tree(self, rel: str, tree: Dict[str, Any]) -> None:
        """A part's ``tree.json``."""
        text = json.dumps(tree).encode()
        if not self.dry:
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_bytes(text)
        self.files[rel] = {"bytes": len(text)}

    def encode_part(self, rank: int, part: Dict[str, Any], shared: Dict[int, str]) -> List[str]:
        """Write part ``rank`` (its arrays, then its tree.json); returns the files it uses."""
        before = set(self.files)
        tree = {k: self.encode(v, k, f"part{rank}", shared) for k, v in part.items()}
        self.tree(f"part{rank}/tree.json", tree)
        return sorted(set(self.files) - before) + _shared_refs(tree)

    def array(self, value, name: str, part_dir: str, shared: Dict[int, str]) -> Dict[str, Any]:
        is_tensor = isinstance(value, torch.Tensor)
        array = value.detach().cpu().numpy() if is_tensor else value
        if id(value) in self.shared_ids:  # held by more than one part: written once
            if id(value) not in shared:
                shared[id(value)] = self._save(f"shared/a{len(shared)}.npy", array)
            rel = shared[id(value)]
        else:
            rel = self._save(f"{part_dir}/{name}.npy", array)
        return {"tensor" if is_tensor else "ndarray": rel}

    def ragged(self, value: list, name: str, part_dir: str) -> Dict[str, Any]:
        """A list of 1-D arrays as one flat file plus lengths, not thousands of files; once per
        store when several parts hold the same list (HongTu's chunk neighbour lists)."""
        if id(value) in self.ragged_written:
            return self.ragged_written[id(value)]
        lengths = np.array([v.size for v in value], dtype=np.int64)
        flat = np.concatenate(value) if value else np.zeros(0)
        where = (
            f"shared/r{len(self.ragged_written)}"
            if id(value) in self.shared_ids
            else f"{part_dir}/{name}"
        )
        node = {
            "ragged": {"ndarray": self._save(f"{where}.flat.npy", flat)},
            "lengths": {"ndarray": self._save(f"{where}.lengths.npy", lengths)},
        }
        if id(value) in self.shared_ids:
            self.ragged_written[id(value)] = node
        return node

    def encode(self, value, name: str, part_dir: str, shared: Dict[int, str]):
        if isinstance(value, (torch.Tensor, np.ndarray)):
            return self.array(value, name, part_dir, shared)
        if dataclasses.is_dataclass(value) and type(value).__name__ in RECORDS:
            return {
                "record": type(value).__name__,
                "fields": {
                    f.name: self.encode(
                        getattr(value, f.name), f"{name}.{f.name}", part_dir, shared
                    )
                    for f in dataclasses.fields(value)
                },
            }
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise TypeError(f"{name}: only string keys can be stored")
            return {
                "dict": {
                    k: self.encode(v, f"{name}.{k}", part_dir, shared) for k, v in value.items()
                }
            }
        if isinstance(value, (list, tuple)):
            if len(value) > 8 and all(isinstance(v, np.ndarray) and v.ndim == 1 for v in value):
                return self.ragged(value, name, part_dir)
            kind = "tuple" if isinstance(value, tuple) else "list"
            return {
                kind: [self.encode(v, f"{name}.{i}", part_dir, shared) for i, v in enumerate(value)]
            }
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            value = value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return {"value": value}
        raise TypeError(
            f"{name}: a {type(value).__name__} cannot be stored (arrays, numbers, strings, dicts, "
            f"lists and {sorted(RECORDS)} can)"
        )


def save_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` of the C-ordered ``array`` through a Python file: a full disk raises ENOSPC
    (numpy's own writer reports a short write with no error number)."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        f.write(memoryview(array.reshape(-1)).cast("B"))


def npy_bytes(array: np.ndarray) -> int:
    """The size of the file ``np.save`` writes for the C-ordered ``array``: header and data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    return header.tell() + array.nbytes


def parts_bytes(parts: Sequence[Dict[str, Any]], shared_ids: Dict[int, int], first: int = 0) -> int:
    """The bytes ``parts`` (ranks ``first``, ``first`` + 1, ...) take in a store: every array file
    and tree.json, counted without writing."""
    counter, shared = _Writer(Path("."), shared_ids, dry=True), {}
    for rank, part in enumerate(parts, start=first):
        counter.encode_part(rank, part, shared)
    return sum(int(f["bytes"]) for f in counter.files.values())


def _shared_ids(parts: Sequence[Dict[str, Any]]) -> Dict[int, int]:
    """id -> parts holding it, of the arrays (and lists) more than one part holds."""
    counts: Dict[int, int] = {}
    for part in parts:
        seen = set()
        for value in _arrays(part):
            if id(value) not in seen:
                seen.add(id(value))
                counts[id(value)] = counts.get(id(value), 0) + 1
    return {k: c for k, c in counts.items() if c > 1}


def write_store(
    directory: Path, parts: Sequence[Dict[str, Any]], meta: Dict[str, Any], **extra: Any
) -> None:
    """Write ``parts`` (one field dict per rank) and ``meta`` (plus ``extra``) into ``directory``,
    atomically: the files go to a sibling folder that is renamed into place, ``meta.json`` last.
    A write that fails (a full disk: one line naming the folder and the store's bytes) leaves the
    previous store, if any, and no staging folder. (A store built part by part:
    :mod:`gnntrain.partition.part_wise`.)"""
    directory = Path(directory)
    staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shared_ids = _shared_ids(parts)
    with on_disk_full(
        directory.parent,
        f"the partition store {directory.name}",
        lambda: parts_bytes(parts, shared_ids),
        CACHE_FULL_FIX,
    ):
        try:
            writer, shared = _Writer(staging, shared_ids), {}
            part_files = [writer.encode_part(r, part, shared) for r, part in enumerate(parts)]
            files = describe_files(staging, writer.files)
            full = dict(
                meta,
                **extra,
                format_version=FORMAT_VERSION,
                num_parts=len(parts),
                files=files,
                parts=[sorted(set(rels)) for rels in part_files],
                bytes_per_part=[sum(files[f]["bytes"] for f in set(rels)) for rels in part_files],
            )
            publish(staging, directory, full)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _arrays(value):
    if isinstance(value, (torch.Tensor, np.ndarray)):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _arrays(getattr(value, f.name))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arrays(v)
    elif isinstance(value, (list, tuple)):
        yield value  # a list several parts hold is stored once (see _Writer.ragged)
        for v in value:
            yield from _arrays(v)


def _shared_refs(tree) -> List[str]:
    refs = []
    if isinstance(tree, dict):
        for key, v in tree.items():
            if key in ("tensor", "ndarray") and isinstance(v, str) and v.startswith("shared/"):
                refs.append(v)
            else:
                refs += _shared_refs(v)
    elif isinstance(tree, list):
        for v in tree:
            refs += _shared_refs(v)
    return refs


# ------------------------------------------------------------------ reading
def read_meta(directory: Path, warn: bool = True) -> Optional[Dict[str, Any]]:
    """The store's meta.json, or None when the store is missing, incomplete, corrupt (with a
    warning, unless ``warn`` is off: it is rebuilt) or of another format."""
    path = Path(directory) / "meta.json"
    try:
        meta = read_sealed_json(path)
    except OSError:
        return None
    except ArtifactError as exc:
        if warn:
            warnings.warn(
                f"partition store {path} is corrupt ({exc.why}); rebuilding the store", stacklevel=2
            )
        return None
    return meta if meta.get("format_version") == FORMAT_VERSION else None


def _meta_or_warn(directory: Path, warn: Callable[[str], None]) -> Optional[Dict[str, Any]]:
    """read_meta of a whole store, saying so where its folder is there without its meta.json (a
    store is renamed into place with it: the file was deleted)."""
    meta = read_meta(directory)
    if meta is None and Path(directory).is_dir() and not (Path(directory) / "meta.json").exists():
        warn(f"partition store {directory} has no meta.json (deleted?); rebuilding the store")
    return meta


def verify_part(directory: Path, meta: Dict[str, Any], rank: int) -> None:
    """Check part ``rank``'s files (and the shared ones it uses): each must have its size, and a
    file written to since the store was built (its mtime moved) must match its digest. An untouched
    file is not read here, so a rank's start does not page its whole part in (the digests were taken
    when the part was built); ``GNNTRAIN_VERIFY_PARTS=1`` checks every digest."""
    try:
        verify_files(directory, meta["files"], meta["parts"][rank])
    except ArtifactError as exc:
        raise StoreError(str(exc)) from None


def open_part(
    directory: Path, rank: int, meta: Optional[Dict[str, Any]] = None, verify: bool = True
) -> Dict[str, Any]:
    """Part ``rank``'s fields, its arrays memory-mapped copy-on-write; raises StoreError when a
    file is missing, foreign or corrupt."""
    directory = Path(directory)
    meta = meta or read_meta(directory)
    if meta is None or rank >= int(meta["num_parts"]):
        raise StoreError(f"{directory} holds no part {rank}")
    if verify:
        verify_part(directory, meta, rank)
    tree = json.loads((directory / f"part{rank}" / "tree.json").read_text())
    return {k: _decode(v, directory) for k, v in tree.items()}


def _load_array(directory: Path, rel: str) -> np.ndarray:
    """The array, memory-mapped copy-on-write (a plain ndarray view of the map); an empty or 0-d
    array, which cannot be mapped, is read."""
    try:
        return np.load(directory / rel, mmap_mode="c", allow_pickle=False).view(np.ndarray)
    except ValueError:
        return np.load(directory / rel, allow_pickle=False)


def _decode(node: Dict[str, Any], directory: Path):
    if "record" in node:
        return RECORDS[node["record"]](
            **{k: _decode(v, directory) for k, v in node["fields"].items()}
        )
    if "ragged" in node:
        flat, lengths = (
            np.asarray(_decode(node["ragged"], directory)),
            np.asarray(_decode(node["lengths"], directory)),
        )
        return list(np.split(flat, np.cumsum(lengths)[:-1])) if lengths.size else []
    ((kind, body),) = node.items()
    if kind == "tensor":
        array = _load_array(directory, body)
        return torch.from_numpy(array) if array.ndim else torch.tensor(array.item())
    if kind == "ndarray":
        return _load_array(directory, body)
    if kind == "dict":
        return {k: _decode(v, directory) for k, v in body.items()}
    if kind in ("list", "tuple"):
        items = [_decode(v, directory) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "value":
        return body
    raise StoreError(f"unknown entry {kind!r} in a part's tree.json")


# ------------------------------------------------------------------ building
def ensure_store(directory: Path, build: Callable[[], tuple]) -> Dict[str, Any]:
    """The store's meta, building it under its lock when it is missing or incomplete (the local
    launcher's way: its ranks then open and check their own parts)."""
    directory = Path(directory)
    meta = _meta_or_warn(directory, lambda message: warnings.warn(message, stacklevel=3))
    if meta is not None:
        return meta
    with file_lock(directory.with_name(f".{directory.name}.lock")):
        meta = read_meta(directory, warn=False)  # said above
        if meta is None:
            parts, figures = build()
            write_store(directory, parts, figures, built_at=time.time())
            meta = read_meta(directory)
    return meta


def open_or_build(
    directory: Path,
    rank: int,
    build: Callable[[], tuple],
    warn: Callable[[str], None],
    verify: bool = True,
) -> tuple:
    """(part ``rank``'s fields, meta): from the store when it is complete and its part checks out,
    else built by ``build() -> (parts, meta)`` under the store's lock (one builder per store,
    whatever the number of ranks and jobs) and then opened."""
    directory = Path(directory)
    corrupt, corrupt_build = False, None
    meta = _meta_or_warn(directory, warn)
    if meta is not None:
        try:
            return open_part(directory, rank, meta, verify), meta
        except StoreError as exc:
            warn(f"partition store {directory}: {exc}; rebuilding it")
            corrupt, corrupt_build = True, meta.get("built_at")
    with file_lock(directory.with_name(f".{directory.name}.lock")):
        meta = read_meta(directory, warn=False)  # said above
        # not rebuilt meanwhile
        if meta is None or (corrupt and meta.get("built_at") == corrupt_build):
            parts, figures = build()
            write_store(directory, parts, figures, built_at=time.time())
            meta = read_meta(directory)
    return open_part(directory, rank, meta, verify), meta
