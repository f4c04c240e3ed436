"""Link farms: a library's view of raw files in ``data_dir``, built under ``cache_dir``.

``data_dir`` is where raw files are looked for, in each library's own layout (so files
placed there are used without a download). DGL, PyG and OGB all write their processed
caches beside the raw files; to keep a read-only ``data_dir`` untouched we build a *link
farm* under ``cache_dir``: a folder of symbolic links to the raw files (renamed where a
library expects other names), which the library then reads and writes its processed files
into. The farm is keyed by the raw files' content, so a copy of the same files elsewhere
shares it and other files never stand in for them.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from gnntrain.atomic import file_lock
from gnntrain.errors import DatasetError

HASHED_FILE_BYTES = 256 * 2**20  # raw files up to this size are keyed by content, larger ones by size and mtime


@dataclass(frozen=True)
class Layout:
    """One on-disk layout of a dataset's raw files: ``<data_dir>/<folder>/<files>``.

    ``links`` maps a path inside the farm folder to the raw file it points at (relative to
    ``folder``); empty means "mirror every entry of ``folder`` under its own name".
    """

    folder: str
    files: List[str]
    links: Dict[str, str] = field(default_factory=dict)


def offline() -> bool:
    return os.environ.get("GNNTRAIN_OFFLINE", "") not in ("", "0", "false")


def source_stamp(source_dir: Path) -> str:
    """What the raw files under ``source_dir`` are: per file its relative path, size and a
    content digest (size and mtime for files over HASHED_FILE_BYTES). Independent of where
    the folder lives, so two copies of the same files share one processed cache."""
    lines = []
    for path in sorted(source_dir.rglob("*")):
        rel = path.relative_to(source_dir)
        if rel.parts[0] != "processed" and path.is_file():
            st = path.stat()
            if st.st_size <= HASHED_FILE_BYTES:
                digest = hashlib.sha1(path.read_bytes()).hexdigest()
            else:
                digest = f"mtime {st.st_mtime_ns}"
            lines.append(f"{rel}\t{st.st_size}\t{digest}")
    return "\n".join(lines) + "\n"


def link_farm(source_dir: Path, farm_dir: Path, content: str, links: Optional[Dict[str, str]] = None) -> None:
    """Mirror ``source_dir``'s entries as symlinks in ``farm_dir`` (idempotent); with ``links``,
    make exactly those links (farm path -> path in ``source_dir``) instead.

    The library's processed files live in ``farm_dir`` too, so when the source (another
    data_dir, or changed raw files) differs from the one the farm was built from, the farm is
    rebuilt rather than serving stale data. Call it holding :func:`farm_lock`.
    """
    stamp_file = farm_dir / ".gnntrain-source"
    stamp = f"{source_dir.resolve()}\n{content}"  # the links point into source_dir: a moved copy relinks
    if farm_dir.exists() and (not stamp_file.exists() or stamp_file.read_text() != stamp):
        shutil.rmtree(farm_dir)  # symlinks are unlinked, never followed
    farm_dir.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    if links is None:
        links = {entry.name: entry.name for entry in source_dir.iterdir() if entry.name != "processed"}
    for rel, target in links.items():
        link = farm_dir / rel
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to((source_dir / target).resolve())


def farm_lock(farm_root: Path, folder: str):
    """The lock under which one process links, downloads and processes ``folder``'s files
    (the libraries write their processed files beside them; two ranks at once raced there)."""
    return file_lock(farm_root / f".{folder.replace('/', '_')}.lock")


def quiet(fn: Callable[[], object]) -> object:
    """Run a library's loader with its progress prints swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn()


@dataclass(frozen=True)
class Located:
    """Where a dataset's raw files were found and where the library is to read them."""

    found: Optional[Path]  # the data_dir folder; None when the library downloads
    origin: str  # for messages and GraphData.origin
    root: Path  # the library's root folder (the farm, or the download folder)
    layout: Optional[Layout]  # which layout matched (None when downloading)


def locate(name: str, data_dir: Optional[str], layouts: Sequence[Layout], farm_root: Path, farm_folder: str,
           allow_download: bool, library: str) -> Located:
    """Find ``<data_dir>/<folder>/<files>`` for the first layout that is complete, and link it
    into ``<farm_root>/<content key>/<farm_folder>``; or explain what is missing. Call it
    holding :func:`farm_lock`.

    A downloaded copy has a root of its own, so it never stands in for a ``data_dir``'s
    files, nor they for it.
    """
    first = layouts[0]
    if data_dir and not Path(data_dir).is_dir():
        raise DatasetError(f"dataset '{name}': data_dir={data_dir} does not exist. Set data_dir=DIR (or "
                           f"GNNTRAIN_DATA_DIR) to the folder holding {first.folder}/, or leave it unset to "
                           f"let {library} download the files.")
    for layout in layouts if data_dir else ():
        found = Path(data_dir) / layout.folder
        if all((found / f).exists() for f in layout.files):
            content = source_stamp(found)
            root = farm_root / hashlib.sha1(content.encode()).hexdigest()[:16]
            link_farm(found, root / farm_folder, content, layout.links or None)
            return Located(found, str(found), root, layout)
    if allow_download and not offline():
        root = farm_root / "downloaded"
        return Located(None, f"downloaded by {library} into {root / farm_folder}", root, None)
    searched = str(Path(data_dir) / first.folder) if data_dir else "(no data_dir set)"
    expected = " or ".join(f"<data_dir>/{lay.folder}/{{{', '.join(lay.files)}}}" for lay in layouts)
    raise DatasetError(
        f"dataset '{name}': raw files not found at {searched}, and downloading is "
        f"{'disabled (GNNTRAIN_OFFLINE)' if offline() else 'off'}. Expected {library}'s layout: "
        f"{expected}. Set data_dir=DIR (or GNNTRAIN_DATA_DIR) "
        f"to the folder holding it, or run online to let {library} download it."
    )
