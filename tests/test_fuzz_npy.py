"""Fuzzed NumPy inputs for ``gnntrain ingest`` (issue #57, "Fuzzed inputs"): features, edges (one
2xE/Ex2 array or two 1-D arrays), weights, labels, masks and targets as ``.npy``. Generated
well-formed arrays (every numeric dtype, either byte order, 1-D features) ingest to the graph a
plain NumPy reference builds from them; arrays with one thing wrong (a shape, a dtype, a byte
order, Fortran order, NaN/Inf or huge values, a pickled object array, a truncated or garbled file)
either ingest to that same reference or fail with one line naming a file, leave no partial folder
and never unpickle anything.

``GNNTRAIN_FUZZ_EXAMPLES`` sets the examples per property (tests/fuzzing.py)."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Dict

import numpy as np
from fuzzing import FUZZ, one_line_or_graph, read_folder, reference_edges, remove, same_array
from hypothesis import event, example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gnntrain.data.ingest import IngestOptions, NodeOptions

FLOATS = ["<f2", "<f4", ">f4", "<f8", ">f8"]
INTS = ["|i1", "|u1", "<i2", ">u2", "<i4", ">i4", "<i8", ">i8", "<u8"]
MASKS = ("train_mask", "val_mask", "test_mask")


def _values(dtype: str, low: float = -1e4, high: float = 1e4):
    """Elements for an array of ``dtype``: finite numbers it holds, within float32's range."""
    kind = np.dtype(dtype)
    if kind.kind == "f":
        width = min(32, 8 * kind.itemsize)
        return (
            st.floats(max(low, -6e4), min(high, 6e4), width=width)
            if width == 16
            else (st.floats(low, high, width=width))
        )
    if kind.kind == "b":
        return st.booleans()
    info = np.iinfo(kind)
    return st.integers(max(int(low), int(info.min)), min(int(high), int(info.max)))


@st.composite
def datasets(draw) -> Dict[str, np.ndarray]:
    """Well-formed arrays by file name: features, edges (edges.npy, or src.npy and dst.npy), and
    maybe weights, labels, the three masks and targets."""
    n = draw(st.integers(1, 10))
    f_dtype = draw(st.sampled_from(FLOATS + INTS + ["|b1"]))
    f_shape = draw(st.sampled_from([(n,), (n, 1), (n, 3)]))
    files = {"features.npy": draw(arrays(f_dtype, f_shape, elements=_values(f_dtype, 0, 100)))}
    e = draw(st.integers(1, 20))
    e_dtype = draw(st.sampled_from(INTS))
    ends = draw(arrays(e_dtype, (2, e), elements=st.integers(0, n - 1)))
    layout = draw(st.sampled_from(["2xE", "Ex2", "two"]))
    if layout == "two":
        files["src.npy"], files["dst.npy"] = ends[0].copy(), ends[1].copy()
    else:
        files["edges.npy"] = ends if layout == "2xE" else ends.T.copy()
    if draw(st.booleans()):
        w_dtype = draw(st.sampled_from(FLOATS + INTS))
        files["weights.npy"] = draw(arrays(w_dtype, (e,), elements=_values(w_dtype, 0, 1e4)))
    if draw(st.booleans()):
        l_dtype = draw(st.sampled_from(INTS + ["<f4", ">f8"]))
        labels = draw(arrays(l_dtype, (n,), elements=st.integers(0, 3)))
        labels[0] = max(labels[0], 1)  # at least two classes (classes = largest label + 1)
        files["labels.npy"] = labels
    if draw(st.booleans()):
        m_dtype = draw(st.sampled_from(["|b1", "|u1", "<i8"]))
        for name in MASKS:
            files[f"{name}.npy"] = draw(arrays(m_dtype, (n,), elements=st.integers(0, 1)))
        files["train_mask.npy"][0] = 1  # training needs a node
    if draw(st.booleans()):
        t_dtype = draw(st.sampled_from(FLOATS))
        shape = draw(st.sampled_from([(n,), (n, 2)]))
        # a node without a target (NaN) where labels say which nodes train
        nan = st.just(float("nan")) if "labels.npy" in files else st.nothing()
        files["targets.npy"] = draw(
            arrays(t_dtype, shape, elements=st.one_of(_values(t_dtype), nan))
        )
    return files


def _options(tmp: Path, names) -> IngestOptions:
    edges = ["src.npy", "dst.npy"] if "src.npy" in names else ["edges.npy"]
    at = lambda name: tmp / name if name in names else None
    return IngestOptions(
        out=tmp / "g",
        edges=[tmp / name for name in edges],
        weights=at("weights.npy"),
        nodes=NodeOptions(
            features=tmp / "features.npy",
            labels=at("labels.npy"),
            targets=at("targets.npy"),
            masks={m: at(f"{m}.npy") for m in MASKS if at(f"{m}.npy")},
        ),
    )


def _reference_matches(tmp: Path, out: Path) -> None:
    """The ingested folder ``out`` equals what plain NumPy makes of the files in ``tmp``: features
    as float32 rows, edges symmetrised without self-loops (a 2xE array by its rows, else Ex2 by its
    columns), labels (a 2-D file: its first column), masks, targets as float32 (N, T)."""
    load = lambda name: np.load(tmp / name, allow_pickle=False)
    have = lambda name: (tmp / name).exists()
    x = load("features.npy")
    n = x.shape[0]
    if have("edges.npy"):
        ends = load("edges.npy")
        src, dst = ends if ends.shape[0] == 2 else ends.T
    else:
        src, dst = load("src.npy"), load("dst.npy")
    got = read_folder(out)
    assert got.ids == list(range(n))
    assert same_array(got.features, x.astype(np.float32).reshape(n, -1))
    weights = load("weights.npy") if have("weights.npy") else None
    assert got.edges == reference_edges(src.tolist(), dst.tolist(), weights), "edges"
    if have("labels.npy"):
        assert same_array(got.labels, load("labels.npy").reshape(n, -1)[:, 0].astype(np.int64))
    else:
        assert (got.labels == -1).all()
    for name in MASKS:
        if have(f"{name}.npy"):
            assert same_array(got.masks[name], load(f"{name}.npy").astype(bool))
    if have("targets.npy"):
        assert same_array(got.targets, load("targets.npy").astype(np.float32).reshape(n, -1))


@FUZZ
@given(datasets())
def test_well_formed_arrays_ingest_to_the_reference_graph(files):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, array in files.items():
            np.save(tmp / name, array)
        opts = _options(tmp, files)
        out = one_line_or_graph(opts, list(files))
        assert out is not None, "a well-formed dataset was refused"
        _reference_matches(tmp, out)
        remove(out)


class Trap:
    """Pickled, it makes a folder when unpickled: an ingest must never unpickle."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


ODD_DTYPES = ["object", "<c8", ">c16", "<U3", "|S2", "|b1", "<f2", "|i1", ">u8", "<M8[s]", "|V4"]
ODD_VALUES = [float("nan"), float("inf"), -float("inf"), -1, 2**63 - 1, 2**64 - 1, 1e39, 1e300, 0.5]


def _odd_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` as ``dtype`` (an object array: filled with a :class:`Trap` when saved)."""
    if dtype == "object":
        return np.empty(array.shape, dtype=object)
    if dtype.startswith("|V"):  # a structured dtype
        return np.zeros(array.shape, dtype=[("a", "<i2"), ("b", "<u2")])
    with np.errstate(invalid="ignore", over="ignore"):
        return array.astype(dtype)


def _with_value(array: np.ndarray, index: int, value) -> np.ndarray:
    """``array`` with its ``index``-th element set to ``value``, as the first of its own dtype,
    int64, uint64 and float64 that holds it."""
    values = array.ravel().tolist()
    values[index] = value
    for kind in (array.dtype, np.int64, np.uint64, np.float64):
        try:
            with np.errstate(over="ignore"):  # 1e39 as float32 (inf) is a value to try too
                return np.array(values, dtype=kind).reshape(array.shape)
        except (OverflowError, ValueError):
            continue
    raise AssertionError(value)


FILE_MANGLINGS = ["truncate", "header only", "empty", "npz", "pickle", "bytes"]


@st.composite
def mangled(draw):
    """(files, the one mangled, how, raw bytes for "bytes"): a well-formed dataset with one file
    changed in one way: its array (dtype, shape, rows, Fortran order, a value) or the file itself
    (cut short, a header alone, empty, an .npz or a pickle under the name, random bytes)."""
    # what to mangle drawn first: hypothesis varies its first choices most
    how = draw(st.sampled_from(["dtype", "shape", "rows", "fortran", "value", *FILE_MANGLINGS]))
    pick = draw(st.integers(0, 9))
    files = draw(datasets())
    name = sorted(files)[pick % len(files)]
    array = files[name]
    if how == "dtype":
        files[name] = _odd_dtype(array, draw(st.sampled_from(ODD_DTYPES)))
    elif how == "shape":
        files[name] = np.resize(array, tuple(draw(st.lists(st.integers(0, 4), max_size=3))))
    elif how == "rows":
        rows = draw(st.integers(0, array.shape[0] + 3).filter(lambda r: r != array.shape[0]))
        files[name] = np.resize(array, (rows,) + array.shape[1:])
    elif how == "fortran":
        files[name] = np.asfortranarray(array.reshape(array.shape[0], -1).repeat(2, axis=1))
    elif how == "value":
        index = draw(st.integers(0, array.size - 1))
        files[name] = _with_value(array, index, draw(st.sampled_from(ODD_VALUES)))
    return files, name, how, draw(st.binary(max_size=80)) if how == "bytes" else None


def _write(tmp: Path, files: Dict[str, np.ndarray], name: str, how: str, raw) -> Path:
    """Save ``files`` into ``tmp``, then mangle the file ``name`` as ``how`` says; the path of the
    folder an unpickled :class:`Trap` would make."""
    marker = tmp / "unpickled"
    for file, array in files.items():
        if array.dtype == object:
            array.fill(Trap(str(marker)))
        np.save(tmp / file, array, allow_pickle=True)
    path = tmp / name
    data = path.read_bytes()
    if how == "truncate":  # a few bytes short
        path.write_bytes(data[: len(data) - 1 - len(data) % 7])
    elif how == "header only":
        path.write_bytes(data[: data.index(b"\n") + 1])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "npz":
        np.savez(tmp / "z.npz", files[name])
        path.write_bytes((tmp / "z.npz").read_bytes())
    elif how == "pickle":
        path.write_bytes(pickle.dumps(Trap(str(marker))))
    elif how == "bytes":
        path.write_bytes(raw)
    return marker


F1, E1 = np.zeros(1, np.float16), np.zeros((2, 1), np.int8)
MASKS1 = {f"{m}.npy": np.array([m == "train_mask"]) for m in MASKS}


@FUZZ
@given(mangled())
# found by this test (200 examples), each a traceback before its fix: labels with no column, a 0-d
# labels array, an empty labels file (EOFError), features with no column, a destinations file of a
# structured or datetime dtype, a truncated edge file
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.zeros((1, 0))},
        "labels.npy",
        "shape",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.array(1)},
        "labels.npy",
        "shape",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.array([1])},
        "labels.npy",
        "empty",
        None,
    )
)
@example(case=({"features.npy": np.zeros((1, 0)), "edges.npy": E1}, "features.npy", "shape", None))
@example(
    case=(
        {"features.npy": F1, "src.npy": E1[0], "dst.npy": np.zeros(1, "<i2,<u2")},
        "dst.npy",
        "dtype",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "src.npy": E1[0], "dst.npy": np.zeros(1, "<M8[s]")},
        "dst.npy",
        "dtype",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "edges.npy": np.zeros((2, 3), np.int8)},
        "edges.npy",
        "truncate",
        None,
    )
)
# ... a destinations file of strings ingested ('0' read as node 0: only the sources' dtype was
# checked); a label inf named as -9223372036854775808, a feature 1e39 warned of before its one line
@example(
    case=(
        {"features.npy": F1, "src.npy": E1[0], "dst.npy": np.array(["0"])},
        "dst.npy",
        "dtype",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.array([np.inf])},
        "labels.npy",
        "value",
        None,
    )
)
@example(case=({"features.npy": np.array([1e39]), "edges.npy": E1}, "features.npy", "value", None))
# ... and refusals that named no file: features of no rows ("the graph has no nodes"), a train mask
# node without a target, a train mask drawn among no nodes with a target
@example(case=({"features.npy": F1[:0], "edges.npy": E1}, "features.npy", "rows", None))
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, **MASKS1, "targets.npy": np.array([np.nan])},
        "targets.npy",
        "value",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "targets.npy": np.array([np.nan])},
        "targets.npy",
        "value",
        None,
    )
)
# found by make fuzz (2000 examples): float16 labels warned of an overflow (compared with 2^63 in
# float16)
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.ones(1, np.float16)},
        "labels.npy",
        "dtype",
        None,
    )
)
# always tried: an object array (np.save pickles it) and a pickle named .npy, each refused unread
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.array([1])},
        "labels.npy",
        "pickle",
        None,
    )
)
@example(
    case=(
        {"features.npy": F1, "edges.npy": E1, "labels.npy": np.empty(1, object)},
        "labels.npy",
        "dtype",
        None,
    )
)
def test_mangled_arrays_ingest_to_the_reference_or_fail_in_one_line(case):
    files, name, how, raw = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        marker = _write(tmp, files, name, how, raw)
        try:
            out = one_line_or_graph(_options(tmp, files), list(files))
        finally:
            assert not marker.exists(), f"{name} was unpickled"
        event(f"{name} {how}: {'ingested' if out else 'refused'}")
        if out is not None:
            _reference_matches(tmp, out)
            remove(out)
