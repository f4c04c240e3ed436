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

# raw files up to this size are keyed by content, larger ones by size and mtime
HASHED_FILE_BYTES = 256 * 2**20


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


# download servers
DOWNLOAD_HOSTS = {"DGL": "data.dgl.ai", "PyG": "github.com", "OGB": "snap.stanford.edu"}


def network_problem(library: str, timeout_s: float = 3.0) -> Optional[str]:
    """Why ``library``'s download server cannot be reached (None when a TCP connection to it
    opens): checked before any download is started, so a machine without a network never
    waits on a library's retries and the error names the network only when it is the cause."""
    import socket
    from urllib.parse import urlparse

    host = DOWNLOAD_HOSTS.get(library, "")
    if library == "DGL" and os.environ.get("DGL_REPO"):
        host = urlparse(os.environ["DGL_REPO"]).hostname or host
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{host} cannot be reached ({exc.strerror or type(exc).__name__})"


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


def link_farm(
    source_dir: Path, farm_dir: Path, content: str, links: Optional[Dict[str, str]] = None
) -> None:
    """Mirror ``source_dir``'s entries as symlinks in ``farm_dir`` (idempotent); with ``links``,
    make exactly those links (farm path -> path in ``source_dir``) instead.

    The library's processed files live in ``farm_dir`` too, so when the source (another
    data_dir, or changed raw files) differs from the one the farm was built from, the farm is
    rebuilt rather than serving stale data. Call it holding :func:`farm_lock`.
    """
    stamp_file = farm_dir / ".gnntrain-source"
    # the links point into source_dir: a moved copy relinks
    stamp = f"{source_dir.resolve()}\n{content}"
    if farm_dir.exists() and (not stamp_file.exists() or stamp_file.read_text() != stamp):
        shutil.rmtree(farm_dir)  # symlinks are unlinked, never followed
    farm_dir.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    if links is None:
        links = {
            entry.name: entry.name for entry in source_dir.iterdir() if entry.name != "processed"
        }
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


def _nearby(data_dir: Path, layouts: Sequence[Layout]) -> Optional[Path]:
    """A folder near ``data_dir`` that holds a layout's folder: one or two levels down (data_dir
    set too high, e.g. ``datasets`` instead of ``datasets/dgl``) or the parent (data_dir set to
    the dataset folder itself)."""
    candidates = [data_dir.parent]
    children = sorted(c for c in data_dir.iterdir() if c.is_dir()) if data_dir.is_dir() else []
    candidates += children + [g for c in children for g in sorted(c.iterdir()) if g.is_dir()]
    for layout in layouts:
        for candidate in candidates:
            if (candidate / layout.folder).is_dir() and candidate.resolve() != data_dir.resolve():
                return candidate
    return None


def locate(
    name: str,
    data_dir: Optional[str],
    layouts: Sequence[Layout],
    farm_root: Path,
    farm_folder: str,
    allow_download: bool,
    library: str,
) -> Located:
    """Find ``<data_dir>/<folder>/<files>`` for the first layout that is complete, and link it
    into ``<farm_root>/<content key>/<farm_folder>``; or explain what is missing. Call it
    holding :func:`farm_lock`.

    Every error names the data_dir searched, what is missing there and the layouts accepted. A
    layout folder that is present but incomplete is an error naming the missing files (never a
    download standing in for the user's files); a download is tried only when allowed, not
    offline, and the library's server answers. A downloaded copy has a root of its own, so it
    never stands in for a ``data_dir``'s files, nor they for it.
    """
    expected = " or ".join(f"<data_dir>/{lay.folder}/{{{', '.join(lay.files)}}}" for lay in layouts)
    accepted = f"{library}'s layout: {expected}"
    fix = "Set data_dir=DIR (or GNNTRAIN_DATA_DIR) to the folder that holds"
    if data_dir:
        where = Path(data_dir)
        if where.exists() and not where.is_dir():
            raise DatasetError(
                f"dataset '{name}': data_dir={data_dir} is a file, not a folder. {fix} "
                f"{layouts[0].folder}/ ({accepted})."
            )
        if not where.exists():
            raise DatasetError(
                f"dataset '{name}': data_dir={data_dir} does not exist. {fix} {layouts[0].folder}/ "
                f"({accepted}), or leave it unset to let {library} download the files."
            )
        for layout in layouts:
            found = where / layout.folder
            if all((found / f).exists() for f in layout.files):
                content = source_stamp(found)
                root = farm_root / hashlib.sha1(content.encode()).hexdigest()[:16]
                link_farm(found, root / farm_folder, content, layout.links or None)
                return Located(found, str(found), root, layout)
        for layout in layouts:
            found = where / layout.folder
            if found.is_dir():
                missing = [f for f in layout.files if not (found / f).exists()]
                raise DatasetError(
                    f"dataset '{name}': {found} is missing {len(missing)} of {library}'s files: "
                    f"{', '.join(missing)}. Restore them (the whole set is {accepted}), or point "
                    "data_dir at "
                    f"a complete copy."
                )
        near = _nearby(where, layouts)
        if near is not None:
            raise DatasetError(
                f"dataset '{name}': data_dir={data_dir} has no {layouts[0].folder}/, but {near} "
                f"does: set data_dir={near} ({accepted})."
            )
    searched = (
        f"data_dir={data_dir} holds no {layouts[0].folder}/" if data_dir else "no data_dir is set"
    )
    if not allow_download:
        why = "downloading is off (allow_download=false)"
    elif offline():
        why = "downloading is disabled (GNNTRAIN_OFFLINE)"
    else:
        why = network_problem(library)
        if why is None:
            root = farm_root / "downloaded"
            return Located(None, f"downloaded by {library} into {root / farm_folder}", root, None)
        why = f"no download was tried: {why}"
    raise DatasetError(
        f"dataset '{name}': raw files not found ({searched}), and {why}. Expected {accepted}. "
        f"{fix} them."
    )


def read_failure(
    name: str, library: str, where: Located, folder: str, exc: Exception
) -> DatasetError:
    """The one error for a library that failed to read (or, with nothing in data_dir, to
    download) the raw files: the network is named only when a download was really tried."""
    cause = f"{type(exc).__name__}: {exc}"
    if where.found is None:
        return DatasetError(
            f"dataset '{name}': {library} could not download it into {where.root / folder} "
            f"({cause}). "
            f"Place the raw files in {library}'s layout under a folder and set data_dir=DIR, or "
            "retry when "
            f"the network is up."
        )
    return DatasetError(
        f"dataset '{name}': {library} could not read {where.found} ({cause}). Check those files "
        f"(a truncated or corrupt file), or delete {where.root / folder} to rebuild {library}'s "
        "processed cache."
    )
