"""The `ingest` bench suite (#38): a user's graph from files, at scale, beside a plain pandas
script.

Writes a 50M-edge CSV edge list with string node IDs and a Parquet node table (1M nodes x 128 float
features + a label column, rows shuffled), then measures, each in its own process (own peak RSS):
``gnntrain ingest`` from the CSV, the same graph's edges from Parquet and from ``.npy``, and the
plain pandas route a user would write (``read_csv`` -> ``Index.get_indexer`` -> numpy -> scipy CSR).
Run with ``python -m benchmarks ingest`` (``--quick``: 2M edges, 100k nodes).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import SuiteResult
from benchmarks.registry import suite

GIB = 2**30

_GENERATE = r"""
import sys, numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.csv as pacsv, pyarrow.parquet as pq
out, n, e, f = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
names = pc.binary_join_element_wise("user-", pa.array(np.arange(n)).cast(pa.string()), "")
order = rng.permutation(n)  # the node table lists nodes in an order of its own
position = order.argsort()  # user u's row in the node table = its node index
step = 4_000_000
with pacsv.CSVWriter(f"{out}/edges.csv", pa.schema([("src", pa.string()), ("dst", pa.string())])) as w, \
        pq.ParquetWriter(f"{out}/edges.parquet", pa.schema([("src", pa.int64()), ("dst", pa.int64())])) as pw:
    src_all = np.lib.format.open_memmap(f"{out}/src.npy", mode="w+", dtype=np.int64, shape=(e,))
    dst_all = np.lib.format.open_memmap(f"{out}/dst.npy", mode="w+", dtype=np.int64, shape=(e,))
    for lo in range(0, e, step):
        k = min(step, e - lo)
        u = rng.integers(0, n, size=k)
        v = (u + rng.geometric(1e-3, size=k)) % n  # some locality, like a real graph's ID order
        w.write_table(pa.table({"src": names.take(pa.array(u)), "dst": names.take(pa.array(v))}))
        pw.write_table(pa.table({"src": position[u], "dst": position[v]}))
        src_all[lo:lo + k], dst_all[lo:lo + k] = position[u], position[v]
    src_all.flush(); dst_all.flush()
cols = {"id": names.take(pa.array(order))}
x = rng.standard_normal((n, f)).astype(np.float32)
with pq.ParquetWriter(f"{out}/nodes.parquet", pa.schema([("id", pa.string())] + [(f"f{j}", pa.float32()) for j in
                                                          range(f)] + [("label", pa.int64())])) as pw:
    for lo in range(0, n, 250_000):
        hi = min(n, lo + 250_000)
        t = {"id": cols["id"][lo:hi], **{f"f{j}": x[lo:hi, j] for j in range(f)},
             "label": rng.integers(0, 16, size=hi - lo)}
        pw.write_table(pa.table(t))
np.save(f"{out}/x.npy", x)
np.save(f"{out}/y.npy", rng.integers(0, 16, size=n))
"""  # noqa: E501  (a script run in its own process)

_INGEST = r"""
import json, resource, sys, time
from pathlib import Path
t = time.perf_counter()
from gnntrain.data.ingest.command import options_from, parser
from gnntrain.data.ingest import ingest
summary = ingest(options_from(parser().parse_args(sys.argv[1:])))
out = Path(sys.argv[sys.argv.index("--out") + 1])
csr = (out / "indptr.npy").stat().st_size + (out / "indices.npy").stat().st_size
print(json.dumps({"s": time.perf_counter() - t, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "csr": csr, "edges": summary["num_edges"], "nodes": summary["num_nodes"]}))
"""  # noqa: E501  (a script run in its own process)

_PANDAS = r"""
import json, resource, sys, time
t = time.perf_counter()
import numpy as np, pandas as pd, scipy.sparse as sp
out = sys.argv[1]
nodes = pd.read_parquet(f"{out}/nodes.parquet")
index = pd.Index(nodes["id"])
edges = pd.read_csv(f"{out}/edges.csv")
src = index.get_indexer(edges["src"])
dst = index.get_indexer(edges["dst"])
del edges
assert (src >= 0).all() and (dst >= 0).all()
n = len(index)
rows, cols = np.concatenate([dst, src]), np.concatenate([src, dst])
keep = rows != cols
adj = sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.float32), (rows[keep], cols[keep])), shape=(n, n))
adj.sum_duplicates()
features = nodes[[c for c in nodes.columns if c.startswith("f")]].to_numpy(np.float32)
labels = nodes["label"].to_numpy()
np.save(f"{out}/pandas_indptr.npy", adj.indptr); np.save(f"{out}/pandas_indices.npy", adj.indices)
print(json.dumps({"s": time.perf_counter() - t, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "edges": int(adj.nnz)}))
"""  # noqa: E501  (a script run in its own process)


def _child(code: str, *args) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *[str(a) for a in args]], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


@suite("ingest")
def suite_ingest(quick: bool) -> SuiteResult:
    n, e, f = (100_000, 2_000_000, 128) if quick else (1_000_000, 50_000_000, 128)
    with tempfile.TemporaryDirectory(prefix="gnntrain-bench-ingest-", dir="/var/tmp") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", _GENERATE, str(tmp), str(n), str(e), str(f)], check=True
        )
        generate_s = time.perf_counter() - start
        csv_bytes = (tmp / "edges.csv").stat().st_size
        base = _child(_PANDAS, tmp)
        runs = {
            "CSV (string IDs) + Parquet node table": [
                "--edges",
                tmp / "edges.csv",
                "--features",
                tmp / "nodes.parquet",
            ],
            "Parquet edges + .npy features/labels": [
                "--edges",
                tmp / "edges.parquet",
                "--features",
                tmp / "x.npy",
                "--labels",
                tmp / "y.npy",
            ],
            ".npy edges (two 1-D files) + .npy": [
                "--edges",
                tmp / "src.npy",
                tmp / "dst.npy",
                "--features",
                tmp / "x.npy",
                "--labels",
                tmp / "y.npy",
            ],
        }
        rows = [
            [
                "pandas read_csv -> get_indexer -> scipy CSR (baseline)",
                f"{base['s']:.1f}",
                "1.00",
                f"{base['peak'] / GIB:.2f}",
                "1.00",
                "",
                f"{base['edges']:,}",
                "",
            ]
        ]
        first = None
        for name, args in runs.items():
            out = tmp / f"out-{len(rows)}"
            r = _child(_INGEST, *args, "--out", out)
            if first is None:
                first = r
                import numpy as np

                same = bool(
                    np.array_equal(np.load(out / "indptr.npy"), np.load(tmp / "pandas_indptr.npy"))
                )
            limit = max(GIB, 1.5 * r["csr"])
            goal = []
            if name.startswith("CSV"):
                goal.append(
                    "peak <= 0.5x pandas "
                    + ("(met)" if r["peak"] <= 0.5 * base["peak"] else "(MISSED)")
                )
                goal.append(
                    "time <= 1.5x pandas " + ("(met)" if r["s"] <= 1.5 * base["s"] else "(MISSED)")
                )
            goal.append(
                "peak <= max(1 GiB, 1.5x CSR) " + ("(met)" if r["peak"] <= limit else "(MISSED)")
            )
            rows.append(
                [
                    f"gnntrain ingest: {name}",
                    f"{r['s']:.1f}",
                    f"{r['s'] / base['s']:.2f}",
                    f"{r['peak'] / GIB:.2f}",
                    f"{r['peak'] / base['peak']:.2f}",
                    f"{r['csr'] / GIB:.2f}",
                    f"{r['edges']:,}",
                    "; ".join(goal),
                ]
            )
    return SuiteResult(
        title=f"ingest a {e / 1e6:.0f}M-edge graph with string IDs ({n:,} nodes, {f} float "
        f"features)",
        columns=[
            "route",
            "time (s)",
            "time vs pandas",
            "peak RSS (GiB)",
            "peak vs pandas",
            "CSR written (GiB)",
            "directed edges",
            "goals",
        ],
        rows=rows,
        notes=f"Edge list: {e:,} lines of 'user-<id>,user-<id>' ({csv_bytes / GIB:.2f} GiB of "
        f"CSV), "
        f"symmetrised, self-loops and repeats dropped; node table: Parquet, {n:,} rows in shuffled "
        "order "
        f"(id, f0..f{f - 1}, "
        "label), whose row order becomes the node order. Each route runs in its own process (peak "
        "= its "
        f"ru_maxrss, imports included). The pandas script builds the same CSR (same indptr: "
        f"{'yes' if same else 'NO'}). Generating the files took {generate_s:.0f} s (not counted). "
        f"Limit on ingest's peak: max(1 GiB, 1.5 x the CSR it writes).",
    )
