"""Checksummed on-disk artifacts: a folder of files and a ``meta.json`` that lists each file's size,
modification time and (optionally) BLAKE2b digest, published so that a reader who sees the meta sees
every file, and verified lazily. The meta carries its own checksum too (:func:`sealed_json`), and a
YAML file its checksum as its last line (:func:`sealed_text`): a truncated, bit-flipped or edited
file is found by its reader, never used.

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
from typing import Any, Callable, Dict, Iterable, Optional, Union

from gnntrain.atomic import atomic_write_bytes

META = "meta.json"
CHECKSUM = "checksum"  # a JSON file's own BLAKE2b, over every other key (sealed_json)
SEAL = "# checksum: "  # the last line of a sealed YAML file, its BLAKE2b over the lines above


class ArtifactError(RuntimeError):
    """A file of an artifact that is missing, of the wrong size, or does not match its digest:
    ``"<path> <why>"`` (``path`` and ``why`` kept apart for messages that put them elsewhere)."""

    def __init__(self, message: str, path: Optional[Path] = None, why: str = ""):
        super().__init__(message)
        self.path, self.why = path, why or message


def _corrupt(path: Path, why: str) -> ArtifactError:
    return ArtifactError(f"{path} {why}", Path(path), why)


def bytes_digest(data: bytes) -> str:
    """BLAKE2b (128 bits) of ``data``, as every checksum here is."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _json_digest(body: Dict[str, Any]) -> str:
    return bytes_digest(json.dumps(body, sort_keys=True).encode())


def sealed_json(payload: Dict[str, Any], indent: Optional[int] = 1) -> bytes:
    """``payload`` as a JSON object holding its own checksum (:data:`CHECKSUM`, over what a reader
    parses: any change to a key or a value is found by :func:`read_sealed_json`)."""
    body = {k: v for k, v in payload.items() if k != CHECKSUM}
    body = json.loads(json.dumps(body, default=str))  # as a reader will parse it
    return json.dumps(
        {**body, CHECKSUM: _json_digest(body)}, indent=indent, sort_keys=True
    ).encode()


def read_sealed_json(
    path: Path, required: Union[bool, Callable[[Dict[str, Any]], bool]] = True
) -> Dict[str, Any]:
    """The JSON object in ``path`` (without its checksum), checked against its checksum: an
    :class:`ArtifactError` naming the file where it does not parse or does not match, or has none
    where ``required`` (or ``required(the object)``: a format version that has one); OSError where
    it cannot be read."""
    path = Path(path)
    try:
        payload = json.loads(path.read_bytes().decode())
    except ValueError:  # JSON or UTF-8
        raise _corrupt(path, "is not valid JSON") from None
    if not isinstance(payload, dict):
        raise _corrupt(path, "is not a JSON object")
    claimed = payload.pop(CHECKSUM, None)
    if claimed is None and not (required(payload) if callable(required) else required):
        return payload
    if claimed is None:
        raise _corrupt(path, "has no checksum")
    if claimed != _json_digest(payload):
        raise _corrupt(path, "does not match its checksum")
    return payload


def sealed_text(text: str) -> str:
    """``text`` (YAML) with its checksum as a last comment line (:data:`SEAL`)."""
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{SEAL}{bytes_digest(body.encode())}\n"


def read_sealed_text(path: Path) -> str:
    """The text of the sealed file ``path`` without its checksum line: an :class:`ArtifactError`
    naming the file where the line is missing (truncated, or written unsealed) or does not match;
    OSError where it cannot be read."""
    path = Path(path)
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError:
        raise _corrupt(path, "is not text") from None
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(SEAL):
        raise _corrupt(path, "has no checksum line (truncated, or written by an older gnntrain)")
    if bytes_digest((body + "\n").encode()) != last[len(SEAL) :]:
        raise _corrupt(path, "does not match its checksum")
    return body + "\n"


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
    atomic_write_bytes(staging / META, sealed_json(meta))
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
            raise _corrupt(path, "is missing or has the wrong size")
        if (
            "digest" in entry
            and (full or stat.st_mtime_ns != entry.get("mtime_ns"))
            and file_digest(path) != entry["digest"]
        ):
            raise _corrupt(path, f"does not match its checksum in {META}")
