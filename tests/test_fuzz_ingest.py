"""Fuzzed CSV and TSV edge tables for ``gnntrain ingest`` (issue #57, "Fuzzed inputs"): generated
well-formed tables (unicode and integer IDs, quoting, a byte-order mark, CRLF line ends) ingest to
the graph a plain Python reference builds from the same rows; generated malformed ones (ragged rows,
stray quotes, empty files and lines, NaN/Inf tokens, huge numbers) either ingest or fail with one
line naming the file, and never leave a traceback or a partial folder behind.

``GNNTRAIN_FUZZ_EXAMPLES`` sets the examples per property (tests/fuzzing.py)."""

from __future__ import annotations

import csv
import io
import tempfile
from pathlib import Path

import numpy as np
from fuzzing import FUZZ, one_line_or_graph, remove
from hypothesis import example, given
from hypothesis import strategies as st

from gnntrain.data.ingest import IngestOptions, NodeOptions, ingest
from gnntrain.data.ondisk import load_graph_dir

# string IDs: a letter first (never read as a number), then unicode letters, digits, inner
# punctuation that CSV must quote
STRING_IDS = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from("nabxyzéü"),
    st.text(
        alphabet=st.characters(whitelist_categories=("L", "N"), whitelist_characters=',"; -_'),
        max_size=8,
    ).map(lambda t: t.strip()),
)
INT_IDS = st.integers(min_value=0, max_value=2**40)


# a table's suffix and its field separator: ingest reads a .tsv with tabs
SEPARATORS = {"csv": ",", "tsv": "\t"}


def _write_table(
    path: Path, header, rows, bom: bool, crlf: bool, quote_all: bool, kind: str = "csv"
) -> None:
    buffer = io.StringIO()
    writer = csv.writer(
        buffer,
        delimiter=SEPARATORS[kind],
        lineterminator="\r\n" if crlf else "\n",
        quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL,
    )
    writer.writerow(header)
    writer.writerows(rows)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode())


@st.composite
def edge_tables(draw):
    """(node IDs, edges as ID pairs, writer options): a well-formed table."""
    ids = draw(
        st.lists(draw(st.sampled_from([STRING_IDS, INT_IDS])), min_size=2, max_size=12, unique=True)
    )
    edges = draw(
        st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), min_size=1, max_size=40)
    )
    layout = draw(
        st.fixed_dictionaries(
            {
                "bom": st.booleans(),
                "crlf": st.booleans(),
                "quote_all": st.booleans(),
                "kind": st.sampled_from(sorted(SEPARATORS)),
            }
        )
    )
    return ids, edges, layout


@FUZZ
@given(edge_tables())
def test_a_well_formed_table_ingests_to_the_reference_graph(table):
    ids, edges, layout = table
    expected = {(str(u), str(v)) for u, v in edges if u != v}
    expected |= {(v, u) for u, v in expected}  # symmetrised, as ingest does by default
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        edge_file, node_file = tmp / f"e.{layout['kind']}", tmp / f"n.{layout['kind']}"
        _write_table(edge_file, ["src", "dst"], edges, **layout)
        _write_table(node_file, ["id", "f"], [(i, k) for k, i in enumerate(ids)], **layout)
        opts = IngestOptions(
            out=tmp / "g", edges=[edge_file], nodes=NodeOptions(features=node_file)
        )
        if not expected:  # only self-loops: a graph of no edges
            remove(_one_line_or_graph(opts))
            return
        ingest(opts)
        graph = load_graph_dir(tmp / "g")
        names = [str(x) for x in np.asarray(_node_ids(tmp / "g"))]
        got = {(names[s], names[d]) for s, d in zip(graph.src.tolist(), graph.dst.tolist())}
        assert got == expected
        assert sorted(names) == sorted(str(i) for i in ids)


def _node_ids(folder: Path):
    from gnntrain.data.ondisk import open_graph_dir

    return open_graph_dir(folder).node_ids().to_pylist()


TOKENS = st.sampled_from(
    [
        "a",
        "b",
        "c",
        "1",
        "2",
        "-1",
        "NaN",
        "inf",
        "",
        '"',
        '"a',
        "a,b",
        "1e400",
        str(2**70),
        "é",
        " a ",
    ]
)


@st.composite
def malformed_tables(draw):
    """Raw bytes of a CSV edge table that may be anything: ragged rows, stray quotes, empty lines,
    no header, a BOM, CRLF, NaN/Inf, huge numbers; or an empty file."""
    kind = draw(st.sampled_from(sorted(SEPARATORS)))
    sep = SEPARATORS[kind]
    lines = draw(st.lists(st.lists(TOKENS, min_size=0, max_size=4).map(sep.join), max_size=12))
    header = draw(st.sampled_from(["src,dst", "", "dst,src", "a"])).replace(",", sep)
    end = draw(st.sampled_from(["\n", "\r\n"]))
    text = end.join(([header] if header else []) + lines)
    return kind, (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + text.encode()


@FUZZ
@given(malformed_tables())
# found by this test (2000 examples): an open quote made the parser's message span two lines
@example(table=("csv", b'src,dst\na,"\na,",a\n'))
def test_any_table_ingests_or_fails_in_one_line_and_leaves_nothing(table):
    kind, raw = table
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / f"e.{kind}").write_bytes(raw)
        rows = ["id,f"] + [f"{name},{k}" for k, name in enumerate(["a", "b", "c", "1", "2"])]
        (tmp / "n.csv").write_text("\n".join(rows) + "\n")
        opts = IngestOptions(
            out=tmp / "g", edges=[tmp / f"e.{kind}"], nodes=NodeOptions(features=tmp / "n.csv")
        )
        remove(_one_line_or_graph(opts))


def _one_line_or_graph(opts: IngestOptions):
    """The ingest succeeds (a loadable folder, returned) or raises one DatasetError of one line
    naming a file (None); nothing partial is left beside ``--out`` either way."""
    out = one_line_or_graph(opts, [opts.edges[0].name, opts.nodes.features.name])
    if out is not None:
        load_graph_dir(out)
    return out
