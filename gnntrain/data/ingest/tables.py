"""Reading tables in bounded memory: CSV/TSV in byte blocks, Parquet in record batches.

Every reader yields :class:`Batch` objects (a pyarrow Table of the selected columns plus the
file line or row of each row), so an error names the file and the line a user can open.
CSV blocks are parsed by pyarrow's multi-threaded reader; comment and blank lines are
removed before parsing, with the line numbers kept.
"""

from __future__ import annotations

import gzip
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from gnntrain.errors import DatasetError

BLOCK_BYTES = 32 << 20  # CSV bytes parsed per step
PARQUET_BATCH_ROWS = 1 << 16


def table_format(path: Path, given: str = "auto") -> str:
    """csv | tsv | parquet | npy | npz | pyg | dgl, from ``given`` or the file name."""
    if given and given != "auto":
        return given
    name = path.name.lower()
    for suffix in (".gz", ".bz2"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for ext, kind in (
        (".csv", "csv"),
        (".txt", "csv"),
        (".tsv", "tsv"),
        (".parquet", "parquet"),
        (".pq", "parquet"),
        (".npy", "npy"),
        (".npz", "npz"),
        (".pt", "pyg"),
        (".pth", "pyg"),
        (".bin", "dgl"),
        (".dgl", "dgl"),
    ):
        if name.endswith(ext):
            return kind
    raise DatasetError(
        f"ingest: cannot tell the format of {path} from its name. Name the format, e.g. "
        f"--edges-format csv (csv, tsv, parquet, npy, npz, pyg, dgl)."
    )


def require_file(path: Path, option: str) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise DatasetError(f"ingest: {option} {path}: no such file.")
    if path.is_dir():
        raise DatasetError(f"ingest: {option} {path}: is a folder; give a file.")
    return path


@dataclass
class Batch:
    table: "object"  # pyarrow.Table with the selected columns, in the order asked
    lines: np.ndarray  # the 1-based file line (CSV) or 0-based row (Parquet) of each row
    where: str  # "line" | "row"
    done_bytes: int  # bytes of the file consumed so far (progress)

    def locate(self, row: int) -> str:
        return f"{self.where} {int(self.lines[row])}"


@dataclass
class CsvOptions:
    delimiter: Optional[str] = None  # None: ',' for csv, '\t' for tsv
    header: bool = True
    comment: str = "#"


def _open_bytes(path: Path):
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def _split_fields(line: str, delimiter: str) -> List[str]:
    import csv

    return next(csv.reader([line], delimiter=delimiter)) if line else []


class _Table:
    """What CSV and Parquet tables share: their column names, and picking a column by name or
    position."""

    path: Path
    names: List[str]
    width: int
    headerless = False  # a CSV without header: columns are named by their 0-based index

    def column(self, wanted: Optional[str], default_index: int, option: str) -> str:
        """The column name for ``wanted`` (a name, or an index without a header), or the
        ``default_index``-th."""
        if wanted is None or wanted == "":
            if default_index >= self.width:
                raise DatasetError(
                    f"ingest: {self.path} has {self.width} column(s); {option} needs a column at "
                    f"position {default_index}."
                )
            return self.names[default_index]
        if wanted in self.names:
            return wanted
        if self.headerless and re.fullmatch(r"\d+", str(wanted)) and int(wanted) < self.width:
            return str(int(wanted))
        shown = f"0..{self.width - 1} (no header)" if self.headerless else ", ".join(self.names)
        raise DatasetError(
            f"ingest: {self.path} has no column {wanted!r} ({option}); its columns are {shown}."
        )


class CsvTable(_Table):
    """A CSV/TSV file read block by block. Columns are chosen by header name or by 0-based index."""

    def __init__(self, path: Path, options: CsvOptions, kind: str = "csv"):
        self.path = path
        self.options = options
        self.delimiter = options.delimiter or ("\t" if kind == "tsv" else ",")
        if len(self.delimiter) != 1:
            raise DatasetError(
                f"ingest: --delimiter must be one character (got {self.delimiter!r})."
            )
        self.size = path.stat().st_size
        with _open_bytes(path) as f:
            first = b""
            while True:  # the first line that is neither blank nor a comment
                raw = f.readline()
                if not raw:
                    break
                if raw.strip() and not (
                    options.comment and raw.lstrip().startswith(options.comment.encode())
                ):
                    first = raw
                    break
        if not first:
            raise DatasetError(f"ingest: {path} is empty (no data lines).")
        try:
            fields = _split_fields(first.decode("utf-8").rstrip("\r\n"), self.delimiter)
        except UnicodeDecodeError:
            raise DatasetError(
                f"ingest: {path} is not UTF-8 text; is it really a {kind.upper()} file?"
            ) from None
        self.width = len(fields)
        self.names = (
            [f.strip() for f in fields] if options.header else [str(i) for i in range(self.width)]
        )
        self.headerless = not options.header
        if options.header and len(set(self.names)) != len(self.names):
            raise DatasetError(
                f"ingest: {path}: the header repeats a column name ({', '.join(self.names)})."
            )

    def batches(
        self,
        columns: Sequence[str],
        types: Dict[str, object],
        hints: Optional[Dict[str, str]] = None,
    ) -> Iterator[Batch]:
        """The ``columns``, a block at a time; ``hints`` adds a column's own fix to the line that
        names a value it cannot read."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        read = pacsv.ReadOptions(column_names=self.names, use_threads=True, block_size=16 << 20)
        parse = pacsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=False)
        convert = pacsv.ConvertOptions(
            include_columns=list(columns),
            column_types=types,
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )
        line = 1  # 1-based number of the next line in the file
        skip_header = self.options.header
        carry = b""
        with _open_bytes(self.path) as f:
            while True:
                chunk = f.read(BLOCK_BYTES)
                data = carry + chunk
                if not chunk:
                    block, carry = data, b""
                else:
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        carry = data
                        continue
                    block, carry = data[: cut + 1], data[cut + 1 :]
                if block:
                    if not block.endswith(b"\n"):
                        block += b"\n"
                    kept, lines, line, header_seen = self._clean(block, line, skip_header)
                    skip_header = skip_header and not header_seen
                    if len(lines):
                        try:
                            table = pacsv.read_csv(
                                io.BytesIO(kept),
                                read_options=read,
                                parse_options=parse,
                                convert_options=convert,
                            )
                        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                            raise self._explain(
                                exc, kept, lines, columns, types, hints or {}
                            ) from None
                        done = f.fileobj.tell() if isinstance(f, gzip.GzipFile) else f.tell()
                        yield Batch(
                            table.select(list(columns)), lines, "line", min(self.size, done)
                        )
                if not chunk:
                    return

    def _clean(
        self, block: bytes, line: int, skip_header: bool
    ) -> Tuple[bytes, np.ndarray, int, bool]:
        """Drop the header, comment and blank lines: (kept bytes, the file line of every kept line,
        the next line's number, whether the header was consumed)."""
        comment = self.options.comment.encode() if self.options.comment else b""
        count = block.count(b"\n")
        if (
            (not comment or comment not in block)
            and b"\n\n" not in block
            and not block.startswith(b"\n")
            and b"\n\r\n" not in block
            and not block.startswith(b"\r\n")
        ):
            # the common case: every line is data (the header aside), numbered without a Python loop
            start = 0
            if skip_header:
                start = block.index(b"\n") + 1
            kept = block[start:]
            first = line + (1 if skip_header else 0)
            numbers = np.arange(first, line + count, dtype=np.int64)
            return kept, numbers, line + count, skip_header
        raw_lines = block.split(b"\n")
        if raw_lines and raw_lines[-1] == b"":
            raw_lines.pop()
        kept, numbers = [], []
        header_done = not skip_header
        for i, raw in enumerate(raw_lines):
            stripped = raw.strip()
            if not stripped or (comment and stripped.startswith(comment)):
                continue
            if not header_done:
                header_done = True
                continue
            kept.append(raw)
            numbers.append(line + i)
        next_line = line + len(raw_lines)
        return (
            b"\n".join(kept) + (b"\n" if kept else b""),
            np.asarray(numbers, dtype=np.int64),
            next_line,
            skip_header and header_done,
        )

    def _explain(
        self,
        exc: Exception,
        kept: bytes,
        lines: np.ndarray,
        columns: Sequence[str],
        types: Dict[str, object],
        hints: Dict[str, str],
    ) -> DatasetError:
        """Find the line pyarrow refused and say what is wrong with it."""
        import pyarrow as pa

        index = {name: i for i, name in enumerate(self.names)}
        for number, raw in zip(lines, kept.split(b"\n")):
            try:
                fields = _split_fields(raw.decode("utf-8").rstrip("\r"), self.delimiter)
            except UnicodeDecodeError:
                return DatasetError(f"ingest: {self.path} line {number}: not UTF-8 text.")
            if len(fields) != self.width:
                return DatasetError(
                    f"ingest: {self.path} line {number}: expected {self.width} column(s), found "
                    f"{len(fields)}: {raw.decode('utf-8', 'replace')[:80]!r}."
                )
            for name in columns:
                kind = types.get(name)
                value = fields[index[name]].strip()
                if kind is not None and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                    try:
                        int(value) if pa.types.is_integer(kind) else float(value)
                    except ValueError:
                        what = "an integer" if pa.types.is_integer(kind) else "a number"
                        hint = hints.get(name) or (
                            " (string node IDs: --id-type string)"
                            if pa.types.is_integer(kind)
                            else ""
                        )
                        return DatasetError(
                            f"ingest: {self.path} line {number}, column {name!r}: {value!r} is not "
                            f"{what}{hint}."
                        )
        # one line: the parser quotes the offending text, which may span lines (an open quote)
        why = " ".join(str(exc).split())
        return DatasetError(
            f"ingest: {self.path}: cannot parse: {why} (an unbalanced double quote spans lines; "
            "fix the quoting of that row)"
            if '"' in str(exc) and "\n" in str(exc)
            else f"ingest: {self.path}: cannot parse: {why}"
        )


class ParquetTable(_Table):
    """A Parquet file read in record batches of the selected columns."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.path = path
        try:
            # no pre-buffering: pyarrow 26 reads each row group's column chunks ahead into its own
            # memory pool (mimalloc, which the system pool set in ingest() does not replace) and
            # kept ~0.5 GB mapped on a 50M-edge file (1.19 GiB peak against 0.72 without)
            self.file = pq.ParquetFile(path, pre_buffer=False)
        except Exception as exc:
            raise DatasetError(
                f"ingest: {path} is not a readable Parquet file ({type(exc).__name__}: {exc})."
            ) from None
        self.schema = self.file.schema_arrow
        self.names = list(self.schema.names)
        self.width = len(self.names)
        self.size = path.stat().st_size
        if len(set(self.names)) != len(self.names):
            raise DatasetError(
                f"ingest: {path}: a column name appears twice ({', '.join(self.names)}); give "
                "each column its own name."
            )

    def batches(
        self,
        columns: Sequence[str],
        types: Dict[str, object],
        hints: Optional[Dict[str, str]] = None,
    ) -> Iterator[Batch]:
        import pyarrow as pa

        row = 0
        total = max(1, self.file.metadata.num_rows)
        for record in self.file.iter_batches(
            batch_size=PARQUET_BATCH_ROWS, columns=list(columns), use_threads=False
        ):
            table = pa.Table.from_batches([record])
            for name, kind in types.items():
                if name in table.column_names and table.schema.field(name).type != kind:
                    try:
                        table = table.set_column(
                            table.column_names.index(name), name, table[name].cast(kind)
                        )
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                        raise DatasetError(
                            f"ingest: {self.path}, column {name!r} "
                            f"({table.schema.field(name).type}) "
                            f"cannot be read as {kind}: {exc}"
                        ) from None
            n = table.num_rows
            yield Batch(
                table.select(list(columns)),
                np.arange(row, row + n, dtype=np.int64),
                "row",
                int(self.size * min(1.0, (row + n) / total)),
            )
            row += n


def open_table(path: Path, kind: str, csv: CsvOptions):
    if kind in ("csv", "tsv"):
        return CsvTable(path, csv, kind)
    if kind == "parquet":
        return ParquetTable(path)
    raise DatasetError(f"ingest: {path}: a table must be CSV, TSV or Parquet here (got {kind}).")


def id_type_of(table, column: str, given: str) -> "object":
    """The pyarrow type node IDs are read as: int64 or large_string (``given`` =
    auto|int|string)."""
    import pyarrow as pa

    if given == "int":
        return pa.int64()
    if given == "string":
        return pa.large_string()
    if isinstance(table, ParquetTable):
        kind = table.schema.field(column).type
        return pa.int64() if pa.types.is_integer(kind) else pa.large_string()
    # CSV: integers when the first block's values all are
    first = next(table.batches([column], {column: pa.large_string()}), None)
    if first is None:
        return pa.int64()
    values = first.table.column(column).to_numpy(zero_copy_only=False)[:100000]
    return (
        pa.int64()
        if all(re.fullmatch(r"\s*[-+]?\d+\s*", str(v)) for v in values)
        else pa.large_string()
    )


def node_id_type(table, column: str, given: str) -> "object":
    """:func:`id_type_of` for the node IDs of a node table: a Parquet ID column read as they are
    (``given`` = auto) holds integers or strings; any other type is refused naming it."""
    import pyarrow as pa

    if given == "auto" and isinstance(table, ParquetTable):
        kind = table.schema.field(column).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if not (
            pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
        ):
            raise DatasetError(
                f"ingest: {table.path}, column {column!r} holds the node IDs but has type {kind}; "
                "node IDs are integers or strings. Fix: convert the column, name the ID column "
                "with --id-column, or read the IDs as text with --id-type string."
            )
    return id_type_of(table, column, given)


Progress = Callable[[str, int, int], None]  # (stage, done bytes, total bytes)


def load_npy(path: Path, option: str) -> np.ndarray:
    """A small .npy (labels, masks, targets) read whole: its header checked first (as
    :func:`gnntrain.data.ingest.nodes.open_npy` does), so a pickle, an ``.npz`` or a truncated file
    is one DatasetError and nothing is ever unpickled."""
    from gnntrain.data.ondisk import NpyFile

    try:
        NpyFile(path, fortran_ok=True)
        with open(path, "rb") as f:
            return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError) as exc:
        raise DatasetError(f"ingest: {option} {path}: not a plain NumPy array ({exc}).") from None
    except OSError as exc:
        raise DatasetError(f"ingest: {option} {path}: cannot read it as .npy ({exc}).") from None
