"""KaMinPar's spread over seeds: partition an ingested graph with several seeds and print each
result's total communication volume (rows) and edge cut, computed from the CSR.

    python scripts/kaminpar_seeds.py GRAPH_DIR K [SEEDS=5] [THREADS=1] [PRESET=default]

``GRAPH_DIR`` is a graph folder as ``gnntrain generate`` / ``gnntrain ingest`` write it (the
partitioner_scale suite keeps its graphs under the cache folder's ``bench-graphs/``). The other
options are the ``partitioner=kaminpar`` defaults (nnz vertex weights, eps 0.03, compressed load).
"""

from __future__ import annotations

import sys
import time

from omegaconf import OmegaConf

from gnntrain.data.ondisk import load_graph_dir
from gnntrain.partition.kaminpar import kaminpar_parts
from gnntrain.partition.streaming import csr_metrics


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: " + __doc__.strip().splitlines()[3].strip())
    folder, k = sys.argv[1], int(sys.argv[2])
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    preset = sys.argv[5] if len(sys.argv) > 5 else "default"
    data = load_graph_dir(folder)
    indptr, indices = data.csr
    for seed in range(seeds):
        cfg = OmegaConf.create(
            {
                "name": "kaminpar",
                "seed": seed,
                "vertex_weights": "nnz",
                "row_weight": 0.0,
                "imbalance_eps": 0.03,
                "preset": preset,
                "threads": threads,
                "compress": True,
            }
        )
        start = time.perf_counter()
        parts = kaminpar_parts(indptr, indices, data.symmetric, k, cfg)
        took = time.perf_counter() - start
        m = csr_metrics(indptr, indices, parts, k)
        volume, cut = f"{m.total_volume:,}", f"{m.edge_cut:,}"
        print(f"seed {seed}: total volume {volume} edge cut {cut} ({took:.1f} s)")


if __name__ == "__main__":
    main()
